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
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from txjoin.join.plan import Edge, OutputPlan
from txjoin.join.replica import Change, ReplicaStore, encode
from txjoin.pg.names import QualifiedName

__all__ = ["ALL", "Touched", "affected_partitions", "closure", "path_to", "touched_keys"]

Row = dict[str, Any]
Partitions = set[str]  # encoded lists of anchor values

#: Marker in :class:`Touched` for a table that was truncated: every row counts.
ALL = object()


class Touched:
    """Primary keys a batch changes, per table (or every row, after a truncate)."""

    def __init__(self) -> None:
        self.keys: dict[QualifiedName, set[tuple[Any, ...]]] = {}
        self.truncated: set[QualifiedName] = set()

    def tables(self) -> set[QualifiedName]:
        return set(self.keys) | self.truncated


def touched_keys(changes: Iterable[Change], primary_keys: Mapping[QualifiedName, tuple[str, ...]]) -> Touched:
    out = Touched()
    for ch in changes:
        if ch.op == "t":
            out.truncated.add(ch.table)
            continue
        pk = primary_keys[ch.table]
        keys = out.keys.setdefault(ch.table, set())
        for img in (ch.before, ch.after):
            if img is not None and all(c in img for c in pk):
                keys.add(tuple(img[c] for c in pk))
    return out


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


def step(plan: OutputPlan, store: ReplicaStore, rows: list[Row], cur: str, edge: Edge, nxt: str) -> list[Row]:
    """Rows of alias ``nxt`` joined by ``edge`` to ``rows`` of alias ``cur``."""
    if not rows:
        return []
    table = plan.aliases[nxt].name
    if edge.kind == "eq":
        here, there = (edge.left_col, edge.right_col) if cur == edge.left else (edge.right_col, edge.left_col)
        return store.by_column(table, there, {_hashable(r.get(here)) for r in rows})
    # right.right_col = ANY(left.left_col)
    if cur == edge.left:  # from the array side to the scalar side
        values = {_hashable(v) for r in rows for v in (r.get(edge.left_col) or [])}
        return store.by_column(table, edge.right_col, values)
    return store.by_element(table, edge.left_col, {_hashable(r.get(edge.right_col)) for r in rows})


def _hashable(v: Any) -> Any:
    return encode(v) if isinstance(v, list | dict) else v


def _partition(plan: OutputPlan, row: Row) -> str:
    return encode([row.get(c) for c in plan.anchor_cols])


def affected_partitions(
    plan: OutputPlan, store: ReplicaStore, touched: Touched, *, old_state: bool
) -> Partitions | None:
    """Partitions reachable from ``touched`` rows in the store's current state.

    Returns None when every partition is affected (a global aggregate, or a
    truncate seen from the old state of the anchor table).
    """
    tables = {info.name for info in plan.aliases.values()}
    if not (touched.tables() & tables):
        return set()
    if plan.mode == "group" and not plan.anchor:
        return None
    out: Partitions = set()
    anchor_table = plan.aliases[plan.anchor].name
    for alias, info in plan.aliases.items():
        t = info.name
        if t in touched.truncated:
            if old_state and alias == plan.anchor:
                return None
            # Before: every row the truncate removed. After: rows inserted
            # after the truncate in the same batch.
            rows = store.all_rows(t) if old_state else []
            rows += store.by_keys(t, touched.keys.get(t, set()))
        elif t in touched.keys:
            rows = store.by_keys(t, touched.keys[t])
        else:
            continue
        if alias == plan.anchor:
            out |= {_partition(plan, r) for r in rows}
            if plan.mode == "root":
                # A deleted root row has no row any more, but its partition
                # must be recomputed (to delete its output).
                out |= {encode(list(k)) for k in touched.keys.get(anchor_table, set())}
            continue
        for cur, edge, nxt in path_to(plan, alias, plan.anchor):
            rows = step(plan, store, rows, cur, edge, nxt)
            if not rows:
                break
        else:
            out |= {_partition(plan, r) for r in rows}
    return out


def closure(plan: OutputPlan, store: ReplicaStore, partitions: Partitions | None) -> dict[str, list[Row]]:
    """Every row the SQL needs to compute ``partitions`` (None: all of them), per alias.

    Rows are per alias, not per table: in a self-join, rows fetched for one
    alias must not act as rows of the other.
    """
    if partitions is None or not plan.anchor:  # every partition, or the one global group
        return {alias: store.all_rows(info.name) for alias, info in plan.aliases.items()}
    anchor = plan.anchor
    table = plan.aliases[anchor].name
    values = [tuple(_decode(p)) for p in partitions]
    if plan.mode == "root":
        rows = store.by_keys(table, values)
    elif len(plan.anchor_cols) == 1:
        # A group's value may be NULL: GROUP BY keeps a NULL group.
        rows = store.by_column(table, plan.anchor_cols[0], {v[0] for v in values}, include_null=True)
    else:
        wanted = {encode(list(v)) for v in values}
        rows = [
            r
            for r in store.by_column(table, plan.anchor_cols[0], {v[0] for v in values}, include_null=True)
            if _partition(plan, r) in wanted
        ]
    by_alias: dict[str, list[Row]] = {anchor: rows}
    todo = deque([anchor])
    while todo:
        cur = todo.popleft()
        for e in plan.edges:
            if cur not in (e.left, e.right):
                continue
            nxt = e.other(cur)
            if nxt in by_alias:
                continue
            by_alias[nxt] = step(plan, store, by_alias[cur], cur, e, nxt)
            todo.append(nxt)
    for alias in plan.aliases:
        by_alias.setdefault(alias, [])
    return by_alias


def _decode(p: str) -> list[Any]:
    v: list[Any] = json.loads(p)
    return v
