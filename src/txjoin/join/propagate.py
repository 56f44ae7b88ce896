"""Key propagation: which output partitions can a batch of changes affect?

An output partition (a root row, or a group) changes only if some join
tuple feeding it contains a changed row. So from every changed row we walk
the join graph to the partition's anchor table, looking rows up by join
column (equality or array element), and collect the anchor values reached.

The walk runs twice: over the replicas *before* the batch is applied, from
the rows as they were (their before-images: the old foreign keys of a moved
row, deleted rows), and *after*, from the rows as they are. The union is
exactly the set of partitions whose tuples may differ; filters in the SQL
can only make it an over-approximation, which the recompute corrects.

Rows and partitions travel as Arrow tables: a step looks up all the values
a set of rows reaches in one query.
"""

from __future__ import annotations

from collections import deque

import pyarrow as pa
import pyarrow.compute as pc

from txjoin.join.changes import Touched
from txjoin.join.plan import Edge, OutputPlan
from txjoin.join.replica import Partitions, ReplicaStore

__all__ = ["affected_partitions", "closure", "distinct", "path_to", "step"]


def distinct(t: pa.Table) -> pa.Table:
    """``t``'s distinct rows (NULLs compare equal, as GROUP BY does)."""
    return t.group_by(t.column_names, use_threads=False).aggregate([]) if t.num_rows else t


def path_to(plan: OutputPlan, start: str, goal: str) -> list[tuple[str, Edge, str]]:
    """Edges from alias ``start`` to alias ``goal`` (breadth first)."""
    prev: dict[str, tuple[str, Edge] | None] = {start: None}
    todo = deque([start])
    while todo:
        cur = todo.popleft()
        if cur == goal:
            break
        for e in plan.edges:
            if cur in (e.left, e.right):
                nxt = e.other(cur)
                if nxt not in prev:
                    prev[nxt] = (cur, e)
                    todo.append(nxt)
    steps: list[tuple[str, Edge, str]] = []
    node = goal
    while prev.get(node) is not None:
        p = prev[node]
        assert p is not None
        steps.append((p[0], p[1], node))
        node = p[0]
    return list(reversed(steps))


def _unique(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.unique(values.drop_null())


def step(
    plan: OutputPlan, store: ReplicaStore, rows: pa.Table, cur: str, edge: Edge, nxt: str, select: list[str]
) -> pa.Table:
    """Rows of alias ``nxt`` joined by ``edge`` to ``rows`` of alias ``cur``."""
    table = plan.aliases[nxt].name
    if rows.num_rows == 0:
        return store.tables[table].schema(select).empty_table()
    if edge.kind == "eq":
        here, there = (edge.left_col, edge.right_col) if cur == edge.left else (edge.right_col, edge.left_col)
        return store.rows_by_column(table, there, _unique(rows.column(here)), select=select)
    # right.right_col = ANY(left.left_col)
    if cur == edge.left:  # from the array side to the scalar side
        elements = pc.list_flatten(rows.column(edge.left_col))
        return store.rows_by_column(table, edge.right_col, _unique(elements), select=select)
    return store.rows_by_element(table, edge.left_col, _unique(rows.column(edge.right_col)), select=select)


def _columns(plan: OutputPlan, store: ReplicaStore, alias: str, extra: set[str]) -> list[str]:
    """``alias``'s primary key, the columns its edges use, and ``extra``, in table order."""
    spec = store.tables[plan.aliases[alias].name]
    want = set(spec.primary_key) | extra
    for e in plan.edges:
        if e.left == alias:
            want.add(e.left_col)
        if e.right == alias:
            want.add(e.right_col)
    if alias == plan.anchor:
        want |= set(plan.anchor_cols)
    return [c for c, _ in spec.columns if c in want]


def _empty_partitions(plan: OutputPlan, store: ReplicaStore) -> Partitions:
    return store.tables[plan.aliases[plan.anchor].name].schema(plan.anchor_cols).empty_table()


def affected_partitions(
    plan: OutputPlan, store: ReplicaStore, touched: Touched, *, old_state: bool
) -> Partitions | None:
    """Partitions reachable from ``touched`` rows in the store's current state.

    Returns None when every partition is affected (a global aggregate, or a
    truncate seen from the old state of the anchor table).
    """
    tables = {info.name for info in plan.aliases.values()}
    if not (touched.tables() & tables):
        return _empty_partitions(plan, store) if plan.anchor else pa.table({})
    if plan.mode == "group" and not plan.anchor:
        return None
    parts: list[pa.Table] = []
    for alias, info in plan.aliases.items():
        t = info.name
        keys = touched.keys(t)
        select = _columns(plan, store, alias, set())
        if t in touched.truncated:
            if old_state and alias == plan.anchor:
                return None
            # Before: every row the truncate removed. After: rows inserted
            # after the truncate in the same batch.
            found = [store.all_rows(t, select=select)] if old_state else []
            if keys is not None:
                found.append(store.rows_by_keys(t, keys, select=select))
            rows = pa.concat_tables(found) if found else store.tables[t].schema(select).empty_table()
        elif keys is not None:
            rows = store.rows_by_keys(t, keys, select=select)
        else:
            continue
        if alias == plan.anchor:
            parts.append(rows.select(list(plan.anchor_cols)))
            if plan.mode == "root" and keys is not None:
                # A deleted root row has no row any more, but its partition
                # must be recomputed (to delete its output).
                parts.append(keys.select(list(plan.anchor_cols)))
            continue
        for cur, edge, nxt in path_to(plan, alias, plan.anchor):
            rows = step(plan, store, rows, cur, edge, nxt, _columns(plan, store, nxt, set()))
            if rows.num_rows == 0:
                break
        else:
            parts.append(rows.select(list(plan.anchor_cols)))
    if not parts:
        return _empty_partitions(plan, store)
    schema = _empty_partitions(plan, store).schema
    return distinct(pa.concat_tables([p.cast(schema) for p in parts]))


def closure(plan: OutputPlan, store: ReplicaStore, partitions: Partitions | None) -> dict[str, pa.Table]:
    """Every row the SQL needs to compute ``partitions`` (None: all of them), per alias.

    Rows are per alias, not per table: in a self-join, rows fetched for one
    alias must not act as rows of the other. Each alias gets its primary key
    and the columns the SQL reads.
    """

    def select(alias: str) -> list[str]:
        return _columns(plan, store, alias, set(plan.used_columns.get(alias, ())))

    if partitions is None or not plan.anchor:  # every partition, or the one global group
        return {
            alias: store.all_rows(info.name, select=select(alias)) for alias, info in plan.aliases.items()
        }
    anchor = plan.anchor
    rows = store.rows_by_tuples(
        plan.aliases[anchor].name, plan.anchor_cols, partitions, select=select(anchor)
    )
    by_alias: dict[str, pa.Table] = {anchor: rows}
    todo = deque([anchor])
    while todo:
        cur = todo.popleft()
        for e in plan.edges:
            if cur not in (e.left, e.right):
                continue
            nxt = e.other(cur)
            if nxt in by_alias:
                continue
            by_alias[nxt] = step(plan, store, by_alias[cur], cur, e, nxt, select(nxt))
            todo.append(nxt)
    for alias, info in plan.aliases.items():
        by_alias.setdefault(alias, store.tables[info.name].schema(select(alias)).empty_table())
    return by_alias
