"""The join stage's plain logic: planning, replicas, key propagation, closures.

Each test here is a case a review found wrong once (see the test names); the
property tests cover the general behaviour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from txjoin.cut import Cut
from txjoin.debezium.values import UNAVAILABLE
from txjoin.errors import ChangelogError, UnsupportedQuery
from txjoin.join.changes import Change, batch_of, touched_of
from txjoin.join.plan import OutputPlan, TableInfo, plan_output
from txjoin.join.propagate import affected_partitions, closure
from txjoin.join.replica import ReplicaStore, TableSpec
from txjoin.pg.names import QualifiedName as Q
from txjoin.pg.types import ColumnType

TABLES = {
    t.name: t
    for t in [
        TableInfo(Q("public", "orders"), "s", ("id", "client_id", "note", "region", "pizzas"), ("id",)),
        TableInfo(Q("public", "clients"), "s", ("id", "name", "region"), ("id",)),
        TableInfo(Q("public", "items"), "s", ("id", "order_id", "pos", "qty"), ("id",)),
        TableInfo(Q("public", "emp"), "s", ("id", "mgr_id", "name"), ("id",)),
        TableInfo(Q("public", "pizzas"), "s", ("id", "name", "price"), ("id",)),
    ]
}
INT4, TEXT = ColumnType(23, "int4"), ColumnType(25, "text")
TYPES = {
    "orders": {"id": INT4, "client_id": INT4, "note": TEXT, "region": TEXT, "pizzas": ColumnType(1007, "_int4")},
    "clients": {"id": INT4, "name": TEXT, "region": TEXT},
    "items": {"id": INT4, "order_id": INT4, "pos": INT4, "qty": INT4},
    "emp": {"id": INT4, "mgr_id": INT4, "name": TEXT},
    "pizzas": {"id": INT4, "name": TEXT, "price": ColumnType(1700, "numeric")},
}
# The planner refuses columns of unknown type: give TABLES theirs.
TABLES = {
    q: TableInfo(q, t.source, t.columns, t.primary_key, {c: ty.label for c, ty in TYPES[q.table].items()})
    for q, t in TABLES.items()
}


def plan(sql: str, key: list[str]) -> OutputPlan:
    return plan_output("o", sql, key, TABLES)


def store_for(p: OutputPlan, path: Path) -> ReplicaStore:
    idx, arr = p.index_columns(), p.array_columns()
    return ReplicaStore(
        path,
        [
            TableSpec(
                t,
                ("id",),
                tuple(TYPES[t.table].items()),
                frozenset(idx.get(t, set()) - {"id"}),
                frozenset(arr.get(t, set())),
            )
            for t in p.tables
        ],
    )


class Changes:
    def __init__(self) -> None:
        self.lsn = 100

    def __call__(self, op: str, table: str, before: Any = None, after: Any = None, xid: int = 1) -> Change:
        self.lsn += 1
        return Change(Q("public", table), op, self.lsn, 1, before, after, xid)


def run_batch(
    p: OutputPlan, store: ReplicaStore, changes: list[Change], batch: int
) -> set[tuple[Any, ...]] | None:
    """Apply ``changes`` as one batch; the affected partitions as value tuples (None: all)."""
    by_table: dict[Q, list[Change]] = {}
    for c in changes:
        by_table.setdefault(c.table, []).append(c)
    batches = {t: batch_of(store.tables[t], cs) for t, cs in by_table.items()}
    store.begin()
    try:
        touched = touched_of(batches, store.tables)
        old = affected_partitions(p, store, touched, old_state=True)
        store.apply(batches)
        new = affected_partitions(p, store, touched, old_state=False)
        store.commit(batch, {}, {})
    except BaseException:
        store.rollback()
        raise
    if old is None or new is None:
        return None
    return {tuple(r.values()) for t in (old, new) for r in t.to_pylist()}


def ids(rows: pa.Table) -> list[Any]:
    return sorted(rows.column("id").to_pylist())


def test_multi_column_group_by_closure_finds_its_rows(tmp_path: Path) -> None:
    p = plan(
        "SELECT c.region, c.name, count(o.id) AS n FROM clients c JOIN orders o ON o.client_id = c.id "
        "GROUP BY c.region, c.name",
        ["region", "name"],
    )
    s = store_for(p, tmp_path / "r.duckdb")
    ch = Changes()
    run_batch(p, s, [ch("c", "clients", after={"id": 1, "name": "Bob", "region": "EU"})], 0)
    parts = run_batch(
        p,
        s,
        [ch("c", "orders", after={"id": 10, "client_id": 1, "note": None, "region": "EU", "pizzas": []})],
        1,
    )
    assert parts == {("EU", "Bob")}
    rows = closure(p, s, pa.table({"region": ["EU"], "name": ["Bob"]}))
    assert ids(rows["c"]) == [1]
    assert ids(rows["o"]) == [10]


def test_null_group_keeps_its_rows_in_the_closure(tmp_path: Path) -> None:
    p = plan(
        "SELECT c.region, count(o.id) AS n FROM clients c JOIN orders o ON o.client_id = c.id GROUP BY c.region",
        ["region"],
    )
    s = store_for(p, tmp_path / "r.duckdb")
    ch = Changes()
    run_batch(p, s, [ch("c", "clients", after={"id": 1, "name": "Bob", "region": None})], 0)
    parts = run_batch(
        p,
        s,
        [ch("c", "orders", after={"id": 10, "client_id": 1, "note": None, "region": "EU", "pizzas": []})],
        1,
    )
    assert parts == {(None,)}
    assert ids(closure(p, s, pa.table({"region": pa.array([None], pa.string())}))["c"]) == [1]


def test_self_join_closure_is_per_alias(tmp_path: Path) -> None:
    p = plan("SELECT e.id, m.name AS mgr FROM emp e LEFT JOIN emp m ON e.mgr_id = m.id", ["id"])
    assert p.view("e") != p.view("m")
    s = store_for(p, tmp_path / "r.duckdb")
    ch = Changes()
    run_batch(
        p,
        s,
        [
            ch("c", "emp", after={"id": 1, "mgr_id": 2, "name": "Ann"}),
            ch("c", "emp", after={"id": 2, "mgr_id": 3, "name": "Bea"}),
            ch("c", "emp", after={"id": 3, "mgr_id": None, "name": "Cid"}),
        ],
        0,
    )
    parts = run_batch(p, s, [ch("u", "emp", after={"id": 1, "mgr_id": 2, "name": "Ann2"})], 1)
    assert parts == {(1,)}
    rows = closure(p, s, pa.table({"id": pa.array([1], pa.int64())}))
    # Row 2 is only a manager here: it must not be an 'e' row, or the SQL
    # would recompute (and overwrite) partition 2 without its manager.
    assert ids(rows["e"]) == [1]
    assert ids(rows["m"]) == [2]


def test_truncate_then_insert_in_one_batch_reaches_the_new_rows(tmp_path: Path) -> None:
    p = plan(
        "SELECT o.id, count(i.id) AS n FROM orders o LEFT JOIN items i ON i.order_id = o.id GROUP BY o.id",
        ["id"],
    )
    s = store_for(p, tmp_path / "r.duckdb")
    ch = Changes()
    run_batch(
        p,
        s,
        [
            ch("c", "orders", after={"id": 1, "client_id": 1, "note": None, "region": "EU", "pizzas": []}),
            ch("c", "orders", after={"id": 2, "client_id": 1, "note": None, "region": "EU", "pizzas": []}),
            ch("c", "items", after={"id": 100, "order_id": 1, "pos": 1, "qty": 1}),
        ],
        0,
    )
    parts = run_batch(
        p, s, [ch("t", "items"), ch("c", "items", after={"id": 200, "order_id": 2, "pos": 1, "qty": 1})], 1
    )
    assert parts == {(1,), (2,)}


def test_primary_key_change_keeps_unchanged_toast_values(tmp_path: Path) -> None:
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    ch = Changes()
    note = "x" * 5000
    run_batch(
        p,
        s,
        [ch("c", "orders", after={"id": 1, "client_id": 1, "note": note, "region": "EU", "pizzas": []})],
        0,
    )
    delete = Change(Q("public", "orders"), "d", 500, 1, {"id": 1}, None, 42)
    create = Change(
        Q("public", "orders"), "c", 500, 2, None,
        {"id": 2, "client_id": 1, "note": UNAVAILABLE, "region": "EU", "pizzas": []}, 42,
    )  # fmt: skip
    run_batch(p, s, [delete, create], 1)
    assert s.rows_by_keys(Q("public", "orders"), pa.table({"id": [2]})).to_pylist()[0]["note"] == note
    # Without the row it moved from, the placeholder cannot be resolved: loud.
    orphan = Change(
        Q("public", "orders"), "u", 600, 1, None,
        {"id": 9, "client_id": 1, "note": UNAVAILABLE, "region": "EU", "pizzas": []}, 43,
    )  # fmt: skip
    with pytest.raises(ChangelogError, match="unchanged TOASTed"):
        run_batch(p, s, [orphan], 2)


def test_replayed_older_change_never_resurrects_a_deleted_row(tmp_path: Path) -> None:
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    row = {"id": 1, "client_id": 1, "note": "a", "region": "EU", "pizzas": []}
    insert = Change(Q("public", "orders"), "c", 100, 1, None, row, 7)
    delete = Change(Q("public", "orders"), "d", 200, 1, {"id": 1}, None, 8)
    run_batch(p, s, [insert, delete], 0)
    run_batch(p, s, [insert], 1)  # at-least-once redelivery of the older insert
    assert s.rows_by_keys(Q("public", "orders"), pa.table({"id": [1]})).num_rows == 0


def test_element_index_is_filled_when_an_output_is_added(tmp_path: Path) -> None:
    first = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(first, tmp_path / "r.duckdb")
    ch = Changes()
    run_batch(
        first,
        s,
        [ch("c", "orders", after={"id": 1, "client_id": 1, "note": "", "region": "EU", "pizzas": [7, 8]})],
        0,
    )
    s.close()
    second = plan(
        "SELECT o.id, json_agg(p.name) AS names FROM orders o JOIN pizzas p ON p.id = ANY(o.pizzas) GROUP BY o.id",
        ["id"],
    )
    s = store_for(second, tmp_path / "r.duckdb")
    assert ids(s.rows_by_element(Q("public", "orders"), "pizzas", pa.array([7]))) == [1]


def test_left_join_on_condition_between_preserved_tables_is_refused() -> None:
    with pytest.raises(UnsupportedQuery, match="ON clause of LEFT JOIN i that does not involve i"):
        plan(
            "SELECT o.id, c.name, count(i.id) AS n FROM orders o JOIN clients c ON c.id = o.client_id "
            "LEFT JOIN items i ON i.order_id = o.id AND c.region = o.region GROUP BY o.id, c.name",
            ["id"],
        )


def test_where_equalities_are_join_edges() -> None:
    p = plan(
        "SELECT o.id, c.name FROM orders o, clients c WHERE o.client_id = c.id AND c.region = 'EU'", ["id"]
    )
    assert [(e.left, e.left_col, e.right, e.right_col) for e in p.edges] == [("o", "client_id", "c", "id")]


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT o.id, c.name FROM orders o JOIN clients c ON c.id > o.client_id", "not an equality"),
        ("SELECT o.id, x.v FROM orders o JOIN missing x ON x.id = o.id", "which no source captures"),
        ("SELECT o.id, now() AS t FROM orders o", "time, random or session function"),
        ("SELECT o.id, 'today'::date AS t FROM orders o", "time literal"),
        ("SELECT o.id, current_user AS u FROM orders o", "session function"),
        ("SELECT o.id FROM orders o RIGHT JOIN clients c ON c.id = o.client_id", "RIGHT JOIN"),
        ("SELECT o.id FROM orders o LIMIT 3", "LIMIT"),
        (
            "SELECT o.id, string_agg(o.note, ',') AS s FROM orders o GROUP BY o.id",
            "string_agg without ORDER BY",
        ),
        ("SELECT o.id FROM orders o WHERE o.id IN (SELECT id FROM clients)", "subquery"),
    ],
)
def test_refusals_name_the_construct(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedQuery, match=construct):
        plan(sql, ["id"])


def test_aggregate_order_by_follows_postgresql_null_placement() -> None:
    p = plan(
        "SELECT o.id, json_agg(i.qty ORDER BY i.pos) AS a, json_agg(i.qty ORDER BY i.pos DESC) AS d, "
        "json_agg(i.qty ORDER BY i.pos NULLS FIRST) AS f FROM orders o JOIN items i ON i.order_id = o.id "
        "GROUP BY o.id",
        ["id"],
    )
    sql = p.spark_sql
    # ASC: nulls last (flag IS NULL sorts false first); DESC: nulls first; explicit NULLS FIRST on ASC.
    a, d, f = (
        sql.split(" AS `a`")[0],
        sql.split(" AS `d`")[0].split(" AS `a`")[1],
        sql.split(" AS `f`")[0].split(" AS `d`")[1],
    )
    assert "'n0', i.pos IS NULL" in a
    assert "TRUE" in a.split("SORT_ARRAY")[1]
    assert "'n0', i.pos IS NULL" in d
    assert "FALSE" in d.split("SORT_ARRAY")[1]
    assert "'n0', NOT i.pos IS NULL" in f
    # Over no rows the aggregate is NULL, as in PostgreSQL.
    assert sql.startswith("SELECT o.id AS `id`, IF(SIZE(COLLECT_LIST(")


def test_pending_partitions_round_trip(tmp_path: Path) -> None:
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    s.begin()
    s.commit(4, {"o": pa.table({"id": [1, 2]}), "all": None}, {"s": Cut(5)})
    pending = s.pending(4)
    assert pending["all"] is None
    assert pending["o"] is not None
    assert pending["o"].to_pylist() == [{"id": 1}, {"id": 2}]
    assert s.last_batch == 4
    assert s.cuts() == {"s": Cut(5)}


def test_metadata_reads_follow_commits_and_rollbacks(tmp_path: Path) -> None:
    """The store answers metadata from memory: a rolled-back value is gone, a committed one stays
    (also for a new store on the file), and a caller changing what it read changes nothing."""
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    s.begin()
    s.set_meta("initialized", {"o": "f1"})
    s.commit(1, {}, {"s": Cut(5)})
    got = s.meta("initialized")
    got["o"] = "changed by the caller"
    assert s.meta("initialized") == {"o": "f1"}
    s.begin()
    s.set_meta("initialized", {"o": "f2"})
    s.set_meta("held", ["o"])
    assert (s.meta("initialized"), s.meta("held")) == ({"o": "f2"}, ["o"])
    s.rollback()
    assert (s.meta("initialized"), s.meta("held", []), s.last_batch) == ({"o": "f1"}, [], 1)
    s.begin()
    s.set_meta("held", ["o"])
    s.commit(2, {}, {"s": Cut(6)})
    s.close()
    again = store_for(p, tmp_path / "r.duckdb")
    assert (again.meta("initialized"), again.meta("held"), again.last_batch) == ({"o": "f1"}, ["o"], 2)
    assert again.cuts() == {"s": Cut(6)}


def _staged_rows(xid: int, orders: range) -> Any:
    import pandas as pd

    return pd.DataFrame(
        {
            "source": "s", "xid": xid, "total_order": list(orders), "lsn": [1000 + o for o in orders],
            "op": "u", "table": "public.orders", "value": [f'{{"after": {{"id": {o}}}}}' for o in orders],
        }
    )  # fmt: skip


def test_staged_events_are_read_back_whole_inside_the_batch_that_stages_the_last_ones(tmp_path: Path) -> None:
    # A large transaction's last events arrive in the batch that commits it:
    # reading them back must see what this uncommitted transaction staged.
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    s.begin()
    s.stage(_staged_rows(7, range(1, 8)))
    s.commit(1, {}, {})
    s.begin()
    s.stage(_staged_rows(7, range(5, 12)))  # 5..7 redelivered: kept once
    s.stage(_staged_rows(8, range(1, 3)))  # another transaction's events stay apart
    chunks = list(s.staged("s", 7, 3))
    assert [len(c) for c in chunks] == [3, 3, 3, 2]
    assert [o for c in chunks for o in c["total_order"]] == list(range(1, 12))
    s.unstage("s", 7)
    assert list(s.staged("s", 7, 3)) == []
    s.rollback()
    assert sum(len(c) for c in s.staged("s", 7, 100)) == 7  # the committed batch's events


def test_staged_chunks_hold_about_chunk_bytes_of_values_whatever_the_rows_width(tmp_path: Path) -> None:
    # Rows alone would not bound a chunk's memory: 250,000 wide events are gigabytes.
    p = plan("SELECT o.id, o.note FROM orders o", ["id"])
    s = store_for(p, tmp_path / "r.duckdb")
    narrow, wide = _staged_rows(7, range(1, 401)), _staged_rows(7, range(401, 1401))
    wide["value"] = [f'{{"after": {{"id": {o}, "note": "{"x" * 2000}"}}}}' for o in range(401, 1401)]
    s.begin()
    s.stage(narrow)
    s.stage(wide)
    chunks = list(s.staged("s", 7, 500, chunk_bytes=100_000))
    assert [o for c in chunks for o in c["total_order"]] == list(range(1, 1401))
    sizes = [sum(len(v) for v in c["value"]) for c in chunks]
    assert len(chunks[0]) == 100  # the first chunk measures the events' width
    assert max(len(c) for c in chunks) <= 500  # never more rows than chunk_rows
    # Each chunk is sized from the one before: where the events widen, a chunk overshoots (at
    # most chunk_rows rows); once the width is known, every chunk holds at most the budget.
    assert max(sizes[-10:]) <= 100_000
    assert min(len(c) for c in chunks[-10:-1]) >= 45  # and not needlessly small
    assert [len(c) for c in s.staged("s", 7, 300)] == [300] * 4 + [200]  # no budget: rows only
    s.rollback()


def test_distinct_keys_never_counts_fewer_than_duckdb(tmp_path: Path) -> None:
    """The upsert's shortcut ends a batch when it wrote one row per distinct key, counted by Arrow:
    Arrow must tell apart every pair of keys DuckDB does (-0.0 and 0.0 it tells apart, DuckDB not,
    which only costs a second statement), and key types Arrow cannot group are counted by DuckDB."""
    s = store_for(plan("SELECT o.id, o.note FROM orders o", ["id"]), tmp_path / "r.duckdb")
    floats = pa.table({"k": pa.array([float("nan"), float("nan"), -0.0, 0.0, 1.0, 1.0])})
    duck = s.db.sql("SELECT count(*) FROM (SELECT DISTINCT k FROM floats)").fetchall()[0][0]
    assert (duck, s._distinct_keys(floats, ["k"], 'w."k"')) == (3, 4)
    lists = pa.table({"k": pa.array([[1], [1], [2, 3]], pa.list_(pa.int64())), "j": [1, 1, 1]})
    assert s._distinct_keys(lists, ["k", "j"], 'w."k", w."j"') == 2
    s.close()
