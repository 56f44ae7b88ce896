"""Key propagation and closures, without Spark or PostgreSQL (issue [3 of 5]).

For random schemas, outputs and batches of changes applied to a real
:class:`~txjoin.join.replica.ReplicaStore`, two properties hold:

1. *Nothing missed*: every output partition whose rows differ between the
   state before and after the batch is among the affected partitions.
2. *Closure sufficiency*: for every affected partition, the SQL evaluated
   over the closure's rows (per alias) gives that partition's rows exactly as
   the SQL over the whole tables does.

SQLite evaluates the SQL (transpiled by sqlglot): a neutral third engine,
fast enough for hundreds of examples; the outputs here use only what it
shares with PostgreSQL (joins, count, sum).
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, note, settings
from hypothesis import strategies as st
from sqlglot import exp

from tests.property.join_strategies import Op, Schema, operations, rows, schemas
from tests.support.profiles import examples
from txjoin.join.changes import Change, batch_of, touched_of
from txjoin.join.plan import OutputPlan, TableInfo, plan_output
from txjoin.join.propagate import affected_partitions, closure, distinct
from txjoin.join.replica import ReplicaStore, TableSpec
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

Row = dict[str, Any]


def _plan(schema: Schema) -> OutputPlan:
    infos = {}
    for t in range(schema.n):
        name = QualifiedName("public", f"t{t}")
        cols = ("id", "v", "g", *schema.ref_columns(t))
        infos[name] = TableInfo(name, "src", cols, ("id",), dict.fromkeys(cols, "int4"))
    return plan_output("out", schema.sql(with_json=False), schema.key(), infos)


def _store(plan: OutputPlan, path: Path) -> ReplicaStore:
    specs = []
    idx, arr = plan.index_columns(), plan.array_columns()
    for t in plan.tables:
        columns = tuple((c, ColumnType(23, "int4")) for c in plan.aliases[_alias_of(plan, t)].columns)
        specs.append(
            TableSpec(t, ("id",), columns, frozenset(idx.get(t, set()) - {"id"}), frozenset(arr.get(t, set())))
        )
    return ReplicaStore(path, specs)


def _alias_of(plan: OutputPlan, table: QualifiedName) -> str:
    return next(a for a, info in plan.aliases.items() if info.name == table)


def _apply(store: ReplicaStore, changes: list[Change]) -> dict[QualifiedName, pa.Table]:
    by_table: dict[QualifiedName, list[Change]] = {}
    for c in changes:
        by_table.setdefault(c.table, []).append(c)
    batches = {t: batch_of(store.tables[t], cs) for t, cs in by_table.items()}
    return batches


def _evaluate(plan: OutputPlan, by_alias: dict[str, list[Row]]) -> list[tuple[Any, ...]]:
    """The output's SQL over ``by_alias`` rows, on SQLite."""
    db = sqlite3.connect(":memory:")
    tree = sqlglot.parse_one(plan.sql, read="postgres")
    for alias, info in plan.aliases.items():
        cols = ("id", "v", "g", *[c for c in plan.aliases[alias].columns if c.startswith("ref_")])
        db.execute(f"CREATE TABLE a_{alias} ({', '.join(cols)})")
        db.executemany(
            f"INSERT INTO a_{alias} VALUES ({', '.join('?' * len(cols))})",
            [tuple(r.get(c) for c in cols) for r in by_alias.get(alias, [])],
        )
        del info
    for t in tree.find_all(exp.Table):
        alias = t.alias_or_name
        t.set("this", exp.to_identifier(f"a_{alias}"))
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    out = [tuple(r) for r in db.execute(tree.sql(dialect="sqlite")).fetchall()]
    db.close()
    return out


def _anchor(plan: OutputPlan, row: Row) -> tuple[Any, ...]:
    return tuple(row[c] for c in plan.anchor_cols)


def _partition_of(plan: OutputPlan, row: tuple[Any, ...]) -> tuple[Any, ...]:
    idx = [plan.columns.index(c) for c in plan.partition_cols]
    return tuple(row[i] for i in idx)


def _by_partition(
    plan: OutputPlan, result: list[tuple[Any, ...]]
) -> dict[tuple[Any, ...], Counter[tuple[Any, ...]]]:
    out: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {}
    for r in result:
        out.setdefault(_partition_of(plan, r), Counter())[r] += 1
    return out


class Model:
    """The source tables as PostgreSQL would hold them, producing Debezium-style changes."""

    def __init__(self, n: int) -> None:
        self.tables: dict[int, dict[int, Row]] = {t: {} for t in range(n)}
        self.lsn = 1000

    def apply(self, schema: Schema, op: Op) -> list[Change]:
        kind, t = op[0], op[1]
        table = self.tables[t]
        name = QualifiedName("public", f"t{t}")
        self.lsn += 10
        out: list[Change] = []

        def ch(opcode: str, before: Row | None, after: Row | None) -> None:
            out.append(Change(name, opcode, self.lsn, len(out) + 1, before, after))

        if kind == "insert":
            row = dict(op[2])
            if row["id"] not in table:
                table[row["id"]] = row
                ch("c", None, dict(row))
        elif kind in ("update_v", "update_g", "update_ref"):
            pk = op[2]
            if pk in table:
                before = dict(table[pk])
                if kind == "update_ref":
                    table[pk][op[3]] = op[4]
                else:
                    table[pk]["v" if kind == "update_v" else "g"] = op[3]
                ch("u", before, dict(table[pk]))
        elif kind == "delete":
            if op[2] in table:
                ch("d", table.pop(op[2]), None)
        elif kind == "move_pk":
            old, new = op[2], op[3]
            if old in table and new not in table:
                row = table.pop(old)
                ch("d", dict(row), None)
                row["id"] = new
                table[new] = row
                ch("c", None, dict(row))
        return out

    def by_alias(self, plan: OutputPlan) -> dict[str, list[Row]]:
        return {
            alias: list(self.tables[int(info.name.table[1:])].values())
            for alias, info in plan.aliases.items()
        }


@st.composite
def batches(draw: st.DrawFn) -> tuple[Schema, list[tuple[int, Row]], list[list[Op]]]:
    schema = draw(schemas())
    initial = [(t, r) for t in range(schema.n) for r in draw(st.lists(rows(schema, t), max_size=5))]
    bs = draw(st.lists(st.lists(operations(schema), min_size=1, max_size=6), min_size=1, max_size=4))
    return schema, initial, bs


@pytest.mark.slow(70)
@settings(max_examples=examples(ci=100, thorough=3000))
@given(case=batches(), indexed=st.booleans())
def test_affected_partitions_cover_every_change_and_closures_suffice(
    case: tuple[Schema, list[tuple[int, Row]], list[list[Op]]], indexed: bool
) -> None:
    schema, initial, bs = case
    plan = _plan(schema)
    note(f"SQL: {plan.sql}\nmode {plan.mode}, anchor {plan.anchor}")
    model = Model(schema.n)
    with tempfile.TemporaryDirectory() as d:
        store = _store(plan, Path(d) / "r.duckdb")
        if indexed:  # lookups through the indexes, as a few keys of a large table take
            store.rows_per_indexed_key = 0
        else:
            store.indexed_keys = 0  # on tables this small: joins only
        changes = [c for t, r in initial for c in model.apply(schema, ("insert", t, r))]
        store.begin()
        store.apply(_apply(store, changes))
        store.commit(0, {}, {})
        for b, ops in enumerate(bs, start=1):
            before = _by_partition(plan, _evaluate(plan, model.by_alias(plan)))
            changes = [c for op in ops for c in model.apply(schema, op)]
            batches = _apply(store, changes)
            store.begin()
            touched = touched_of(batches, store.tables)
            old = affected_partitions(plan, store, touched, old_state=True)
            store.apply(batches)
            new = affected_partitions(plan, store, touched, old_state=False)
            store.commit(b, {}, {})
            after = _by_partition(plan, _evaluate(plan, model.by_alias(plan)))
            assert store_state(store, plan) == model_state(model, plan), "the replica differs from the model"
            if old is None or new is None:
                continue  # every partition is recomputed
            both = distinct(pa.concat_tables([old, new]))
            affected = {tuple(r.values()) for r in both.to_pylist()}
            changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
            assert changed <= affected, (
                f"batch {b}: partitions {sorted(changed - affected, key=repr)} changed but were missed"
            )
            rows = {a: t.to_pylist() for a, t in closure(plan, store, both).items()}
            if plan.anchor:  # every live row of an affected partition's anchor, none other
                anchored = [r for r in model.by_alias(plan)[plan.anchor] if _anchor(plan, r) in affected]
                assert sorted(r["id"] for r in rows[plan.anchor]) == sorted(r["id"] for r in anchored)
            got = _by_partition(plan, _evaluate(plan, rows))
            for p in affected:
                assert got.get(p) == after.get(p), f"batch {b}: partition {p} over its closure differs"
        store.close()


def store_state(store: ReplicaStore, plan: OutputPlan) -> dict[str, list[Row]]:
    return {str(t): sorted(store.all_rows(t).to_pylist(), key=lambda r: r["id"]) for t in plan.tables}


def model_state(model: Model, plan: OutputPlan) -> dict[str, list[Row]]:
    return {
        str(t): sorted(model.tables[int(t.table[1:])].values(), key=lambda r: r["id"]) for t in plan.tables
    }
