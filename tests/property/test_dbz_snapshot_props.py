"""Debezium's own snapshot (rows with ``"transaction": null`` and ``source.snapshot``
first/true/last, no BEGIN/END) is released as one unit, whole, before the streamed
transactions, however the rows are cut into micro-batches (issue [6 of 7])."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.strategies import _rows, change
from tests.support.profiles import examples
from txjoin.assemble.buffer import AssemblerConfig, AssemblyState, assemble
from txjoin.decode import EVENT_COLUMNS

CFG = AssemblerConfig(check_segments=False, debezium_snapshots=True)
SNAP_XID, SNAP_LSN = 700, 5_000


def _frame(recs: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [r for rec in recs for r in _rows(rec)]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def _snapshot_row(i: int, n: int, table: str) -> dict[str, Any]:
    flag = "last" if i == n - 1 else "first" if i == 0 else "true"
    return change(
        xid=SNAP_XID, lsn=SNAP_LSN, ts_ms=1, seq_prev=-1, total_order=-1, dc_order=-1, op="r",
        snapshot=flag, table=table, before=None, after={"id": i},
    )  # fmt: skip


@st.composite
def debezium_logs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, list[int]]:
    """Snapshot rows in Debezium's order, then streamed transactions; the records in delivery
    order (a transaction's END may come before or after its events), and the cut points."""
    tables = draw(st.lists(st.sampled_from(["public.a", "public.b"]), min_size=1, max_size=12))
    tables.sort()  # Debezium snapshots one table after another
    recs = [_snapshot_row(i, len(tables), t) for i, t in enumerate(tables)]
    lsn = SNAP_LSN
    for k in range(draw(st.integers(0, 4))):
        xid = SNAP_XID + 1 + k
        events = draw(st.lists(st.sampled_from(["public.a", "public.b"]), min_size=1, max_size=3))
        lsn += 100
        changes = [
            change(xid=xid, lsn=lsn + j, ts_ms=2, seq_prev=-1, total_order=j + 1, dc_order=1, op="u",
                   snapshot="false", table=t, before=None, after={"id": j})
            for j, t in enumerate(events)
        ]  # fmt: skip
        dc: dict[str, int] = {}
        for t in events:
            dc[t] = dc.get(t, 0) + 1
        end = {
            "kind": "end",
            "seg_first": -1,
            "seg_last": -1,
            "xid": xid,
            "lsn": lsn + 50,
            "ts_ms": 2,
            "dc": dc,
        }
        recs += [end, *changes] if draw(st.booleans()) else [*changes, end]
    cuts = sorted(set(draw(st.lists(st.integers(0, len(recs)), max_size=6))))
    return recs, len(tables), cuts


@settings(max_examples=examples(ci=60, thorough=1000), deadline=None)
@given(debezium_logs())
def test_debezium_snapshot_is_one_unit_released_first(
    log: tuple[list[dict[str, Any]], int, list[int]],
) -> None:
    recs, n_snapshot, cuts = log
    state = AssemblyState(source="s")
    released: list[pd.DataFrame] = []
    bounds = [0, *cuts, len(recs)]
    for lo, hi in itertools.pairwise(bounds):
        frames, _ = assemble(state, _frame(recs[lo:hi]), CFG, now=0.0)
        released += frames
    assert released, "the whole log was delivered: something is released"
    out = pd.concat(released, ignore_index=True)
    first = out.loc[out["tx_seq"] == 1]
    assert set(first["xid"]) == {SNAP_XID}, "the snapshot is the first transaction released"
    assert len(first) == n_snapshot, "every snapshot row, in one unit"
    assert sorted(first["total_order"]) == list(range(1, n_snapshot + 1))
    streamed = [r for r in recs if r["kind"] == "change" and r["snapshot"] == "false"]
    assert len(out) == n_snapshot + len(streamed), "every streamed change released once"
    seqs = out.groupby("xid")["tx_seq"].first().sort_values()
    assert list(seqs.index) == sorted(seqs.index), "commit order"
