"""The replica store against a model (issue [2 of 7]: the vectorized apply).

Random transactions (inserts, updates that may move a row's indexed join
column, deletes, primary-key moves, truncates, unchanged TOASTed values) are
applied in commit order to a dict model, and to a real DuckDB
:class:`~txjoin.join.replica.ReplicaStore` in random micro-batches, some
carrying again changes an earlier batch applied (replays must not move a row
back), with the store closed and reopened between some batches. After every
batch's changes, before its commit (as the batch's own lookups see them), and
after every reopen, the store's live rows equal the model's, both by a full
scan and through each index (lookups by key and by the join column), so an
index that disagrees with the rows fails here. Both ways of applying are checked: in
place, and by delete and insert (``bulk``, a staged transaction's chunks); on
tables with no index besides the key's, one or two more, and a float key; and
in place both ways: by joins with the table, and by upserts through the key's
index (what few changes, or few to a large table, take); and lookups both ways, by
a join and through the column's index.
"""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.debezium.values import UNAVAILABLE
from txjoin.join.changes import Change, batch_of
from txjoin.join.replica import ReplicaStore, TableSpec
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

T = QualifiedName("public", "t")
INT4, TEXT = ColumnType(23, "int4"), ColumnType(25, "text")
SPEC = TableSpec(T, ("id",), (("id", INT4), ("g", INT4), ("v", INT4), ("doc", TEXT)), frozenset({"g"}))
UNINDEXED = dataclasses.replace(SPEC, indexed=frozenset())  # no index to keep: rows update in place
TWO_INDEXES = dataclasses.replace(SPEC, indexed=frozenset({"g", "v"}))  # most updates move an indexed value
FLOAT_KEY = dataclasses.replace(SPEC, columns=(("id", ColumnType(701, "float8")), *SPEC.columns[1:]))
Row = dict[str, Any]

ids = st.integers(1, 8)
groups = st.one_of(st.none(), st.integers(1, 3))
ops = st.one_of(
    st.tuples(st.just("insert"), ids, groups, st.integers(0, 9)),
    st.tuples(st.just("update"), ids, groups, st.integers(0, 9), st.booleans()),  # bool: doc TOASTed
    st.tuples(st.just("delete"), ids),
    st.tuples(st.just("move"), ids, ids),
    st.tuples(st.just("truncate")),
)


def transactions(program: list[list[tuple[Any, ...]]]) -> tuple[list[Change], dict[int, Row]]:
    """The changes PostgreSQL would emit for ``program`` (in commit order) and the final table."""
    table: dict[int, Row] = {}
    out: list[Change] = []
    lsn = 1000
    for xid, tx in enumerate(program, start=1):
        lsn += 100
        mine: list[Change] = []

        def emit(op: str, before: Row | None, after: Row | None, mine: list[Change] = mine) -> None:
            mine.append(Change(T, op, 0, len(mine) + 1, before, after, 0))

        for op in tx:
            if op[0] == "insert" and op[1] not in table:
                table[op[1]] = {"id": op[1], "g": op[2], "v": op[3], "doc": f"doc {op[1]}.{xid}"}
                emit("c", None, dict(table[op[1]]))
            elif op[0] == "update" and op[1] in table:
                table[op[1]].update(g=op[2], v=op[3])
                after = dict(table[op[1]])
                if op[4]:
                    after["doc"] = UNAVAILABLE  # unchanged TOASTed value: not in the event
                emit("u", {"id": op[1]}, after)
            elif op[0] == "delete" and op[1] in table:
                del table[op[1]]
                emit("d", {"id": op[1]}, None)
            elif op[0] == "move" and op[1] in table and op[2] not in table:
                row = table.pop(op[1])
                emit("d", {"id": op[1]}, None)
                row["id"] = op[2]
                table[op[2]] = row
                emit("c", None, {**row, "doc": UNAVAILABLE})
            elif op[0] == "truncate":
                table.clear()
                emit("t", None, None)
        out += [dataclasses.replace(c, commit_lsn=lsn, xid=xid) for c in mine]
    return out, table


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r["id"])


def check(store: ReplicaStore, model: dict[int, Row]) -> None:
    want = _sorted([dict(r) for r in model.values()])
    assert _sorted(store.all_rows(T).to_pylist()) == want
    everyone = pa.table({"id": pa.array(list(range(1, 9)), pa.int64())})
    assert _sorted(store.rows_by_keys(T, everyone).to_pylist()) == want
    some = pa.table({"id": pa.array([3, None, 9, 1, 3], pa.int64())})  # absent, NULL, twice
    assert _sorted(store.rows_by_keys(T, some, select=["v", "id"]).to_pylist()) == [
        {"v": r["v"], "id": r["id"]} for r in want if r["id"] in (1, 3)
    ]
    by_group = store.rows_by_column(T, "g", pa.array([None, 1, 2, 3], pa.int64()), include_null=True)
    assert _sorted(by_group.to_pylist()) == want
    for column in ("g", "v"):  # without NULL: through the column's index, if it has one
        found = store.rows_by_column(T, column, pa.array([3, None, 0, 3], pa.int64()), select=["id"])
        assert sorted(r["id"] for r in found.to_pylist()) == [r["id"] for r in want if r[column] in (0, 3)]
    for columns, values in TUPLES:  # a composite lookup: through one column's index, if any fits
        found = store.rows_by_tuples(T, columns, pa.table(values), select=["id"])
        tuples = list(zip(*(a.to_pylist() for a in values.values()), strict=True))
        assert sorted(r["id"] for r in found.to_pylist()) == [
            r["id"] for r in want if tuple(r[c] for c in columns) in tuples
        ], columns
    assert store.count(T) == len(model)


# NULL in a tuple matches NULL (GROUP BY); repeats, absent values. The first one's g has no NULL.
TUPLES: list[tuple[list[str], dict[str, pa.Array]]] = [
    (["g", "v"], {"g": pa.array([1, 3, 3, 2], pa.int64()), "v": pa.array([0, None, 5, 5], pa.int64())}),
    (["v", "g"], {"v": pa.array([None, 4, 7], pa.int64()), "g": pa.array([1, None, 3], pa.int64())}),
    (["id", "g"], {"id": pa.array([1, 2, 3, 9, None], pa.int64()), "g": pa.array([None, 1, 2, 2, 3], pa.int64())}),
]


def _store(path: Path, spec: TableSpec, upsert: bool) -> ReplicaStore:
    """A store that upserts every in-place batch and looks keys up by index (``upsert``), or does
    neither (the joins)."""
    store = ReplicaStore(path, [spec])
    if upsert:
        store.few_changes_per_rows = 0
        store.rows_per_indexed_key = 0
    else:
        # On a table this small: joins only, for changes and lookups.
        store.few_changes, store.indexed_keys = 0, 0
    return store


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[list[tuple[Any, ...]]], list[int], list[int], list[bool]]:
    program = draw(st.lists(st.lists(ops, min_size=1, max_size=6), min_size=1, max_size=10))
    n = len(program)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, n - 1)), max_size=n)))
    replays = draw(st.lists(st.integers(0, n), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    reopen = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    return program, cuts, replays, reopen


@pytest.mark.slow(55)
@settings(max_examples=examples(ci=100, thorough=2000), deadline=None)
@given(
    case=cases(),
    bulk=st.booleans(),
    spec=st.sampled_from([SPEC, UNINDEXED, TWO_INDEXES, FLOAT_KEY]),
    upsert=st.booleans(),
)
@example(  # an update moving a row to another group, then a replay of the insert
    case=([[("insert", 1, 1, 0)], [("update", 1, 2, 5, False)]], [1], [0, 1], [False, True]),
    bulk=False,
    spec=SPEC,
    upsert=False,
)
@example(  # a re-delivered insert/delete/insert before an update keeping a TOASTed value
    case=(
        [[("insert", 2, None, 0)], [("delete", 2)], [("insert", 2, None, 0)], [("update", 2, None, 0, True)]],
        [1, 2, 3],
        [0, 0, 0, 1],
        [False, False, False, False],
    ),
    bulk=False,
    spec=SPEC,
    upsert=False,
)
@example(  # a replayed insert must not take back a key deleted and inserted since (the joins' UPDATE)
    case=(
        [[("insert", 1, None, 0)], [("insert", 1, None, 0)], [("delete", 1), ("insert", 1, None, 0)],
         [("insert", 1, None, 0)]],
        [1, 2, 3],
        [0, 0, 0, 1],
        [False, False, False, False],
    ),
    bulk=False,
    spec=SPEC,
    upsert=False,
)
@example(  # the same with the delete re-delivered too
    case=(
        [[("insert", 2, None, 0)], [("delete", 2)], [("insert", 2, None, 0)], [("update", 2, None, 0, True)]],
        [1, 2, 3],
        [0, 0, 0, 2],
        [False, False, False, False],
    ),
    bulk=False,
    spec=SPEC,
    upsert=False,
)
@example(  # a primary-key move whose create takes the deleted row's TOASTed value
    case=([[("insert", 1, None, 0)], [("move", 1, 2), ("update", 2, 3, 1, True)]], [], [0], [False]),
    bulk=False,
    spec=SPEC,
    upsert=False,
)
@example(  # a staged transaction's way (delete and insert), with a replay and a reopen
    case=([[("insert", 1, 1, 0)], [("update", 1, 1, 5, False)]], [1], [0, 1], [False, True]),
    bulk=True,
    spec=UNINDEXED,
    upsert=False,
)
@example(  # the same two ways through the upsert
    case=([[("insert", 1, 1, 0)], [("update", 1, 2, 5, False)]], [1], [0, 1], [False, True]),
    bulk=False,
    spec=SPEC,
    upsert=True,
)
@example(  # an insert delivered again after its update must not bring the old value back
    case=([[("insert", 1, 1, 0)], [("update", 1, 1, 5, False)], [("insert", 2, 1, 0)]], [1, 2], [0, 0, 1], [False] * 3),
    bulk=False,
    spec=UNINDEXED,
    upsert=True,
)
@example(  # a delete's tombstone keeps its indexed value; the key comes back with another
    case=([[("insert", 3, 1, 0)], [("delete", 3)], [("insert", 3, 2, 1)]], [1, 2], [0, 0, 1], [False, True, False]),
    bulk=False,
    spec=TWO_INDEXES,
    upsert=True,
)
def test_store_equals_the_model_after_every_batch(
    case: tuple[list[list[tuple[Any, ...]]], list[int], list[int], list[bool]],
    bulk: bool,
    spec: TableSpec,
    upsert: bool,
) -> None:
    program, cuts, replays, reopen = case
    changes, _ = transactions(program)
    by_tx: list[list[Change]] = [[c for c in changes if c.xid == x] for x in range(1, len(program) + 1)]
    bounds = [0, *cuts, len(program)]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.duckdb"
        store = _store(path, spec, upsert)
        try:
            for b, (lo, hi) in enumerate(itertools.pairwise(bounds)):
                batch = [c for tx in by_tx[lo:hi] for c in tx]
                # Changes of transactions an earlier batch applied, delivered again.
                again = [c for tx in by_tx[: min(lo, replays[b])] for c in tx]
                note(f"batch {b}: transactions {lo + 1}..{hi}, {len(again)} replayed changes")
                store.begin()
                store.apply({T: batch_of(spec, again + batch)}, bulk=bulk)  # bulk: staged transactions
                _, model = transactions(program[:hi])
                check(store, model)  # as the batch's lookups see it, before its commit
                store.commit(b + 1, {}, {})
                if reopen[b]:
                    store.close()
                    store = _store(path, spec, upsert)
                    check(store, model)
        finally:
            store.close()
