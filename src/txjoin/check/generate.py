"""Random transactions for a pipeline's own schema (``txjoin check``).

The captured tables come from their sources' catalogs
(:func:`txjoin.pg.catalog.describe`): columns with their types, primary keys,
and the constraints to copy into a scratch database (:func:`scratch_ddl`).
:func:`workloads` is a hypothesis strategy of
:class:`~txjoin.check.harness.Workload` over those tables: inserts,
updates of one or two columns, deletes and primary-key changes, grouped in
multi-statement transactions on a few concurrent connections.

Values are drawn from small domains so rows collide: keys, foreign keys and
the columns an output joins or groups on take a handful of values, so joins
match, groups merge, rows move between partitions and keys get reused.
A declared single-column foreign key gets ``(SELECT ref FROM parent WHERE
ref = v)``, NULL when the parent is missing, instead of a violation.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg2.extras
from hypothesis import strategies as st

from txjoin.check.constraints import unique_columns, value_filter
from txjoin.check.harness import Statement, TxPlan, Workload
from txjoin.errors import ConfigError
from txjoin.join.plan import OutputPlan
from txjoin.pg.catalog import Column, ForeignKey, Table
from txjoin.pg.names import QualifiedName, quote_ident

__all__ = ["initial_rows", "scratch_ddl", "small_columns", "workloads"]

SMALL = st.integers(1, 6)
KEYS = st.integers(1, 9)
_WORDS = ["a", "b", "c", "Ann", "Bob", "x y", "ü", "B", "É", "zebra", "Zebra", "straße", ""]
_UUIDS = [str(uuid.UUID(int=i * 0x1111)) for i in range(1, 6)]
_DAY = dt.date(2024, 1, 1)
_PST = dt.timezone(-dt.timedelta(hours=8))


def _foreign_keys(t: Table, among: Iterable[QualifiedName]) -> list[ForeignKey]:
    """``t``'s foreign keys to tables in ``among`` (a scratch copy holds only captured tables)."""
    names = set(among)
    return [fk for fk in t.foreign_keys if fk.table in names]


def scratch_ddl(tables: Sequence[Table]) -> str:
    """DDL creating ``tables`` (columns, keys, constraints) in an empty database."""
    out = []
    for schema in sorted({t.name.schema for t in tables} - {"public"}):
        out.append(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)};")
    for t in tables:
        cols = [f"{quote_ident(c.name)} {c.formatted}{' NOT NULL' if c.not_null else ''}" for c in t.columns]
        out.append(f"CREATE TABLE {t.name.quoted} ({', '.join(cols + list(t.constraints))});")
        if t.replica_identity == "f":
            out.append(f"ALTER TABLE {t.name.quoted} REPLICA IDENTITY FULL;")
    names = [t.name for t in tables]
    for t in tables:
        for fk in _foreign_keys(t, names):
            out.append(f"ALTER TABLE {t.name.quoted} ADD {fk.definition};")
    return "\n".join(out)


# -- values -------------------------------------------------------------------------


def _numeric(typmod: int) -> st.SearchStrategy[Any]:
    scale = ((typmod - 4) & 0xFFFF) if typmod >= 4 else 2
    precision = ((typmod - 4) >> 16) if typmod >= 4 else 10
    limit = min(10 ** (precision - scale) - 1, 1000)
    return st.integers(-limit * 10**scale, limit * 10**scale).map(lambda n: Decimal(n).scaleb(-scale))


def _scalar(col_type: str, typmod: int, small: bool) -> st.SearchStrategy[Any] | None:
    if col_type in ("int2", "int4", "int8", "oid"):
        return SMALL if small else st.integers(-20, 20)
    if col_type == "numeric":
        return SMALL.map(Decimal) if small else _numeric(typmod)
    if col_type in ("float4", "float8"):
        return SMALL.map(float) if small else st.integers(-40, 40).map(lambda n: n / 4)
    if col_type == "bool":
        return st.booleans()
    if col_type in ("text", "varchar", "bpchar", "name", "citext"):
        words = _WORDS[:3] if small else _WORDS
        if col_type in ("varchar", "bpchar") and typmod > 4:
            width = typmod - 4
            words = sorted({w[:width] for w in words})
        return st.sampled_from(words)
    if col_type == "date":
        return st.integers(0, 20 if not small else 3).map(lambda d: _DAY + dt.timedelta(days=d))
    if col_type == "timestamp":
        return st.integers(0, 2000).map(lambda m: dt.datetime(2024, 1, 1) + dt.timedelta(minutes=m))
    if col_type == "timestamptz":
        zones = st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), _PST])
        return st.builds(
            lambda m, z: (dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=m)).astimezone(z),
            st.integers(0, 2000),
            zones,
        )
    if col_type == "time":
        edges = st.sampled_from([dt.time(0), dt.time(23, 59, 59, 999999), "24:00:00", dt.time(12, 0, 0, 5)])
        minutes = st.integers(0, 6 if small else 1439).map(lambda m: dt.time(m // 60, m % 60))
        return minutes | edges
    if col_type == "uuid":
        return st.sampled_from(_UUIDS[:3] if small else _UUIDS)
    if col_type in ("json", "jsonb"):
        return st.dictionaries(st.sampled_from(["k", "n"]), SMALL, max_size=2).map(psycopg2.extras.Json)
    return None


def _values(col: Column, small: bool, table: QualifiedName) -> st.SearchStrategy[Any]:
    if col.enum_labels:
        base_enum = st.sampled_from(col.enum_labels[:3] if small else col.enum_labels)
        return base_enum if col.not_null else st.one_of(st.none(), base_enum)
    if col.type.is_array:
        elem = _scalar(col.type.element.name, -1, True)
        base: st.SearchStrategy[Any] | None = None if elem is None else st.lists(elem, max_size=4)
    else:
        base = _scalar(col.type.name, col.type.typmod, small)
    if base is None:
        if not col.not_null:
            return st.none()
        raise ConfigError(
            f"txjoin check cannot generate values of type {col.formatted} for {table}.{col.name} "
            "(NOT NULL): make it nullable in the spec's scratch copy, or tell us which type you need"
        )
    return base if col.not_null else st.one_of(st.none(), base)


def small_columns(tables: Sequence[Table], plans: Mapping[str, OutputPlan]) -> dict[QualifiedName, set[str]]:
    """Columns that should collide: keys, foreign keys, join and GROUP BY columns."""
    out: dict[QualifiedName, set[str]] = {t.name: set(t.primary_key) for t in tables}
    names = [t.name for t in tables]
    for t in tables:
        for fk in _foreign_keys(t, names):
            out[t.name] |= set(fk.columns)
    for p in plans.values():
        for table, cols in p.index_columns().items():
            out.setdefault(table, set()).update(cols)
        for table, cols in p.array_columns().items():
            out.setdefault(table, set()).update(cols)
    return out


@dataclass
class _Gen:
    tables: list[Table]
    small: dict[QualifiedName, set[str]]
    fk_of: dict[tuple[QualifiedName, str], ForeignKey] = field(default_factory=dict)
    #: Tables whose key another table references without ON UPDATE CASCADE: keys stay put.
    pinned: set[QualifiedName] = field(default_factory=set)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tables]
        for t in self.tables:
            for fk in _foreign_keys(t, names):
                if len(fk.columns) == 1:
                    self.fk_of[(t.name, fk.columns[0])] = fk
                if "ON UPDATE CASCADE" not in fk.definition.upper():
                    self.pinned.add(fk.table)

    def value(self, t: Table, col: Column) -> st.SearchStrategy[Any]:
        if (
            col.name in t.primary_key
            and col.type.name in ("int2", "int4", "int8")
            and len(t.primary_key) == 1
        ):
            # A little wider than the join domain: some inserts add rows, some collide.
            base: st.SearchStrategy[Any] = KEYS
        else:
            base = _values(col, col.name in self.small.get(t.name, set()), t.name)
        filters = (value_filter(t.constraints, col.name), value_filter(col.domain_checks, "value"))
        checks = [f for f in filters if f is not None]
        if not checks:
            return base
        return base.filter(lambda v: all(ok(v) for ok in checks))

    def expr(self, t: Table, col: str) -> str:
        fk = self.fk_of.get((t.name, col))
        if fk is None:
            return "%s"
        ref = quote_ident(fk.ref_columns[0])
        match = f"(SELECT {ref} FROM {fk.table.quoted} WHERE {ref} = %s)"
        if not t.column(col).not_null:
            return match  # NULL when that parent is missing
        # NOT NULL: that parent, else any parent (fails only when there is none).
        return f"COALESCE({match}, (SELECT {ref} FROM {fk.table.quoted} ORDER BY {ref} LIMIT 1))"

    @st.composite
    def insert(draw: st.DrawFn, self: _Gen, t: Table) -> Statement:
        cols = list(t.columns)
        values = tuple(draw(self.value(t, c)) for c in cols)
        names = ", ".join(quote_ident(c.name) for c in cols)
        exprs = ", ".join(self.expr(t, c.name) for c in cols)
        return Statement(f"INSERT INTO {t.name.quoted} ({names}) VALUES ({exprs}){_on_conflict(t)}", values)

    def _where(self, draw: st.DrawFn, t: Table) -> tuple[str, tuple[Any, ...]]:
        cols = ", ".join(quote_ident(k) for k in t.primary_key)
        if draw(st.integers(0, 3)) > 0:
            # An existing row, by its place in key order (modulo the row count, so it
            # hits whenever the table has rows); a drawn key below, which may miss.
            n = f"GREATEST((SELECT count(*) FROM {t.name.quoted}), 1)"
            pick = f"SELECT {cols} FROM {t.name.quoted} ORDER BY {cols} LIMIT 1 OFFSET mod(%s, {n})"
            return f"({cols}) = ({pick})", (draw(st.integers(0, 5)),)
        keys = tuple(draw(self.value(t, t.column(k)).filter(lambda v: v is not None)) for k in t.primary_key)
        return " AND ".join(f"{quote_ident(k)} = %s" for k in t.primary_key), keys

    @st.composite
    def update(draw: st.DrawFn, self: _Gen, t: Table) -> Statement | None:
        others = [c for c in t.columns if c.name not in t.primary_key]
        if not others:
            return None
        chosen = draw(st.lists(st.sampled_from(others), min_size=1, max_size=2, unique_by=lambda c: c.name))
        sets = ", ".join(f"{quote_ident(c.name)} = {self.expr(t, c.name)}" for c in chosen)
        values = tuple(draw(self.value(t, c)) for c in chosen)
        where, keys = self._where(draw, t)
        # A UNIQUE column takes only a value no other row has.
        unique = [(c, v) for c, v in zip(chosen, values, strict=True) if c.name in unique_columns(t)]
        guards = "".join(
            f" AND NOT EXISTS (SELECT 1 FROM {t.name.quoted} "
            f"WHERE {quote_ident(c.name)} = {self.expr(t, c.name)})"
            for c, _ in unique
        )
        args = values + keys + tuple(v for _, v in unique)
        return Statement(f"UPDATE {t.name.quoted} SET {sets} WHERE {where}{guards}", args)

    @st.composite
    def delete(draw: st.DrawFn, self: _Gen, t: Table) -> Statement:
        where, keys = self._where(draw, t)
        return Statement(f"DELETE FROM {t.name.quoted} WHERE {where}", keys)

    @st.composite
    def move_key(draw: st.DrawFn, self: _Gen, t: Table) -> Statement | None:
        if len(t.primary_key) != 1 or t.name in self.pinned:
            return None
        k = t.primary_key[0]
        vals = self.value(t, t.column(k)).filter(lambda v: v is not None)
        old, new = draw(vals), draw(vals)
        q = quote_ident(k)
        return Statement(
            f"UPDATE {t.name.quoted} SET {q} = %s WHERE {q} = %s "
            f"AND NOT EXISTS (SELECT 1 FROM {t.name.quoted} WHERE {q} = %s)",
            (new, old, new),
        )

    @st.composite
    def statement(draw: st.DrawFn, self: _Gen, source: str) -> Statement:
        t = draw(st.sampled_from([t for t in self.tables if t.source == source]))
        kind = draw(st.sampled_from(["insert", "insert", "update", "update", "delete", "move_key"]))
        made = draw(getattr(self, kind)(t))
        return made if made is not None else draw(self.insert(t))


def _on_conflict(t: Table) -> str:
    """What an insert does when its row exists. Where the key is the table's only
    uniqueness, it updates that row (a change to check); else it does nothing.
    A deferrable constraint cannot arbitrate ON CONFLICT: with a deferrable key
    a conflict fails (on a constraint), and another deferrable constraint is
    left out of the arbiters by naming the key."""
    pk = next((d for d in t.constraints if _PRIMARY.match(d)), "")
    deferrable = [d for d in t.constraints if _DEFERRABLE.search(d)]
    if not t.primary_key or pk in deferrable:
        return "" if deferrable else " ON CONFLICT DO NOTHING"
    keys = ", ".join(quote_ident(k) for k in t.primary_key)
    others = [c.name for c in t.columns if c.name not in t.primary_key]
    if not others or any(_UNIQUE.match(d) for d in t.constraints):
        return f" ON CONFLICT ({keys}) DO NOTHING" if deferrable else " ON CONFLICT DO NOTHING"
    sets = ", ".join(f"{quote_ident(c)} = EXCLUDED.{quote_ident(c)}" for c in others)
    return f" ON CONFLICT ({keys}) DO UPDATE SET {sets}"


_PRIMARY = re.compile(r"\s*PRIMARY\s+KEY\b", re.I)
_UNIQUE = re.compile(r"\s*(UNIQUE|EXCLUDE)\b", re.I)
_DEFERRABLE = re.compile(r"(?<!NOT )\bDEFERRABLE\b", re.I)


def _parents_first(tables: Sequence[Table]) -> list[Table]:
    order: list[Table] = []
    by_name = {t.name: t for t in tables}

    def visit(t: Table, seen: set[QualifiedName]) -> None:
        if t in order or t.name in seen:
            return
        for fk in _foreign_keys(t, by_name):
            if fk.table in by_name and fk.table != t.name:
                visit(by_name[fk.table], seen | {t.name})
        order.append(t)

    for t in tables:
        visit(t, set())
    return order


@st.composite
def initial_rows(
    draw: st.DrawFn, tables: Sequence[Table], plans: Mapping[str, OutputPlan]
) -> list[Statement]:
    """Inserts for the snapshot: parents before children, enough rows that joins match."""
    gen = _Gen(list(tables), small_columns(tables, plans))
    out: list[Statement] = []
    for t in _parents_first(tables):
        out += draw(st.lists(gen.insert(t), min_size=2, max_size=8))
    return out


@st.composite
def workloads(
    draw: st.DrawFn,
    tables: Sequence[Table],
    plans: Mapping[str, OutputPlan],
    *,
    max_transactions: int = 10,
    max_statements: int = 4,
) -> Workload:
    gen = _Gen(list(tables), small_columns(tables, plans))
    sources = sorted({t.source for t in tables})
    txs = []
    for _ in range(draw(st.integers(min(8, max_transactions), max_transactions))):
        source = draw(st.sampled_from(sources))
        stmts = draw(st.lists(gen.statement(source), min_size=1, max_size=max_statements))
        txs.append(TxPlan(source, tuple(stmts), draw(st.sampled_from([False] * 9 + [True]))))
    steps = sum(len(t.statements) + 1 for t in txs)
    # Paced: a micro-batch after most commits (each a Delta version to check,
    # and a restart from the checkpoint), several transactions in the others.
    paced = draw(st.lists(st.integers(0, 5), min_size=len(txs) + 1, max_size=len(txs) + 1))
    return Workload(
        transactions=tuple(txs),
        connections=draw(st.integers(1, 3)),
        schedule=tuple(draw(st.lists(st.integers(0, 2), max_size=steps))),
        triggers=frozenset(i for i, p in enumerate(paced) if p > 0),
    )
