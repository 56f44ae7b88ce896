"""The assembly contract without Spark (issue [2 of 5], acceptance 1).

For any history of committed transactions and any delivery of its changelog
(per-topic interleavings, arbitrary micro-batch cuts, END before or after its
events, duplicated deliveries, capture redeliveries, and restarts that replay
the last batches from a checkpoint), the released sequence is exactly the
committed transactions, whole, once each, in commit order.
"""

from __future__ import annotations

import copy
import warnings

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.property.strategies import Segment, Tx, changelogs, deliveries, frame, histories, render
from tests.support.profiles import examples
from txjoin.assemble.buffer import OUTPUT_COLUMNS, AssemblerConfig, AssemblyState, assemble
from txjoin.assemble.spark import _OUTPUT_DTYPES, _events
from txjoin.decode import EVENT_COLUMNS

CFG = AssemblerConfig(incomplete_timeout=1e9)


def _checkpoint(state: AssemblyState) -> tuple[str, bytes]:
    return state.meta_json(), state.frames_bytes()


def _run(
    history: list[Tx],
    batches: list[list[Segment]],
    crashes: list[int],
    rollback: list[int],
    cfg: AssemblerConfig = CFG,
) -> dict[int, pd.DataFrame]:
    """Feed batches like Spark would; return the sink's final output per batch id."""
    sink: dict[int, pd.DataFrame] = {}
    checkpoints: list[tuple[str, bytes]] = [_checkpoint(AssemblyState(source="s"))]
    b = 0
    crashes_left = list(crashes)
    while b < len(batches):
        state = AssemblyState.restore(*checkpoints[b])
        frames, _ = assemble(state, frame(batches[b]), cfg, now=float(b))
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        sink[b] = out  # foreachBatch sinks are idempotent per batch id
        if crashes_left and crashes_left[0] == b:
            # Crash before the checkpoint of batch b is committed; restart
            # from an earlier checkpoint and replay the batches since.
            crashes_left.pop(0)
            back = min(rollback[len(crashes) - len(crashes_left) - 1], b)
            del checkpoints[b - back + 1 :]
            b = b - back
            continue
        checkpoints.append(_checkpoint(state))
        b += 1
    return sink


@pytest.mark.slow(75)
@settings(max_examples=examples(ci=200, thorough=5000))
@given(st.data())
def test_released_sequence_is_the_committed_transactions_whole_once_in_order(
    data: st.DataObject,
) -> None:
    history = data.draw(histories())
    segments = data.draw(changelogs(history))
    batches = data.draw(deliveries(segments))
    crashes = sorted(set(data.draw(st.lists(st.integers(0, max(0, len(batches) - 1)), max_size=2))))
    rollback = data.draw(st.lists(st.integers(0, 3), min_size=len(crashes), max_size=len(crashes)))

    sink = _run(history, batches, crashes, rollback)
    released = pd.concat([sink[b] for b in sorted(sink)], ignore_index=True) if sink else pd.DataFrame()

    expected_rows = []
    for seq, tx in enumerate(history, start=1):
        for e in tx.events:
            expected_rows.append(
                (
                    seq,
                    tx.xid,
                    tx.end_lsn,
                    e["total_order"],
                    e["op"],
                    e["table"],
                    render(e),
                )
            )
    got_rows = (
        list(
            released[["tx_seq", "xid", "commit_lsn", "total_order", "op", "table", "value"]].itertuples(
                index=False, name=None
            )
        )
        if not released.empty
        else []
    )
    assert got_rows == expected_rows

    # Each batch's releases continue exactly where the previous ones stopped:
    # whole transactions, never an earlier one after a later one.
    last_seq = 0
    for b in sorted(sink):
        out = sink[b]
        if out.empty:
            continue
        seqs = list(pd.unique(out["tx_seq"]))
        assert seqs == sorted(seqs)
        assert seqs[0] > last_seq
        for s in seqs:
            tx = history[s - 1]
            assert int((out["tx_seq"] == s).sum()) == len(tx.events), "a transaction was split across batches"
        last_seq = seqs[-1]


@settings(max_examples=examples(ci=100, thorough=3000))
@given(st.data())
def test_staged_transactions_are_applied_whole_once_in_order(data: st.DataObject) -> None:
    """With a tiny staging threshold, every transaction of two or more events is staged: its
    events pass through early (``tx_seq`` -1, possibly more than once) and one commit row is
    released in its place. Rebuilt from both, the sequence is still each committed transaction,
    whole, once, in commit order, and no staged event follows its commit row."""
    history = data.draw(histories())
    segments = data.draw(changelogs(history))
    batches = data.draw(deliveries(segments))
    crashes = sorted(set(data.draw(st.lists(st.integers(0, max(0, len(batches) - 1)), max_size=2))))
    rollback = data.draw(st.lists(st.integers(0, 3), min_size=len(crashes), max_size=len(crashes)))
    cfg = AssemblerConfig(incomplete_timeout=1e9, stage_events=1)
    sink = _run(history, batches, crashes, rollback, cfg)

    staged: dict[tuple[int, int], str] = {}  # (xid, total_order) -> record
    rebuilt: list[tuple[int, int, int, str]] = []  # (tx_seq, xid, total_order, record)
    for b in sorted(sink):
        out = sink[b]
        if out.empty:
            continue
        for row in out.to_dict("records"):
            if row["tx_seq"] < 0:
                key = (int(row["xid"]), int(row["total_order"]))
                assert staged.setdefault(key, row["value"]) == row["value"], "a staged event changed"
                done = {x for _, x, _, _ in rebuilt}
                assert key[0] not in done, "a staged event came after its transaction's commit row"
            elif row["op"] == "C":
                mine = sorted((o, v) for (x, o), v in staged.items() if x == row["xid"])
                assert len(mine) == row["tx_events"], "a staged transaction committed incomplete"
                rebuilt += [(int(row["tx_seq"]), int(row["xid"]), o, v) for o, v in mine]
            else:
                rebuilt.append((int(row["tx_seq"]), int(row["xid"]), int(row["total_order"]), row["value"]))
    expected = [
        (seq, tx.xid, e["total_order"], render(e)) for seq, tx in enumerate(history, start=1) for e in tx.events
    ]
    event(f"transactions staged: {'some' if staged else 'none'}")
    assert rebuilt == expected


@settings(max_examples=examples(ci=120, thorough=2000))
@given(st.data())
def test_nothing_is_released_before_all_earlier_transactions(data: st.DataObject) -> None:
    """Withhold one random segment: everything committed after the first
    transaction it touches must stay buffered."""
    history = data.draw(histories(max_tx=8))
    segments = data.draw(changelogs(history))
    if not segments:
        return
    withheld = data.draw(st.sampled_from(segments))
    rest = [s for s in segments if s is not withheld]
    batches = data.draw(deliveries(rest))
    state = AssemblyState(source="s")
    released: list[pd.DataFrame] = []
    for batch in batches:
        frames, _ = assemble(state, frame(batch), CFG, now=0.0)
        released.extend(frames)
    got_seqs = sorted(set(pd.concat(released)["tx_seq"])) if released else []
    first_blocked = _first_blocked(history, segments, withheld)
    assert all(s - 1 < first_blocked for s in got_seqs)
    # Delivering the withheld segment releases the rest.
    frames, _ = assemble(state, frame([withheld]), CFG, now=0.0)
    released.extend(frames)
    total = sum(len(f) for f in released)
    assert total == sum(len(tx.events) for tx in history)


def _first_blocked(history: list[Tx], segments: list[Segment], withheld: Segment) -> int:
    """Index of the first transaction that cannot complete without ``withheld``."""
    if withheld.topic == "tx":
        # Markers are B0 E0 B1 E1 ...; a gap blocks every END at or after it.
        first = withheld.rows[0]["seg_first"]
        return min((i for i in range(len(history)) if 2 * i + 1 >= first), default=len(history))
    copies: dict[tuple[int, int], int] = {}
    for seg in segments:
        if seg.topic == "tx":
            continue
        for r in seg.rows:
            copies[(r["xid"], r["total_order"])] = copies.get((r["xid"], r["total_order"]), 0) + 1
    inside: dict[tuple[int, int], int] = {}
    for r in withheld.rows:
        inside[(r["xid"], r["total_order"])] = inside.get((r["xid"], r["total_order"]), 0) + 1
    essential = {xid for (xid, order), n in inside.items() if copies[(xid, order)] == n}
    return min((i for i, tx in enumerate(history) if tx.xid in essential), default=len(history))


def test_state_round_trip_keeps_buffered_events_and_markers() -> None:
    state = AssemblyState(source="s", frontier=3, last_end=10)
    state.events = pd.DataFrame(
        {
            "xid": [5],
            "lsn": [11],
            "total_order": [1],
            "dc_order": [1],
            "op": ["c"],
            "snapshot": ["false"],
            "table": ["public.a"],
            "value": ['{"id":1}'],
        }
    )
    copy_ = AssemblyState.restore(state.meta_json(), state.frames_bytes())
    assert copy_.meta_json() == state.meta_json()
    pd.testing.assert_frame_equal(copy_.events, state.events)
    assert copy.deepcopy(state).frontier == 3


def test_fresh_states_do_not_share_their_empty_frames() -> None:
    """The empty frames a state starts with are copies of one template each (buffer._empty):
    changing one in place changes no other state's."""
    names = ("markers", "counts", "held", "events", "staged")
    a = AssemblyState(source="a")
    for name in names:
        frame_ = getattr(a, name)
        frame_["added"] = pd.Series(dtype="int64")
        frame_.loc[0] = 1
    b = AssemblyState(source="b")
    for name in names:
        assert "added" not in getattr(b, name).columns, name
        assert getattr(b, name).empty, name


@settings(max_examples=examples(ci=60, thorough=1000))
@given(st.data())
def test_the_spark_glue_passes_the_same_rows_as_pandas_would(data: st.DataObject) -> None:
    """The operator's input (Spark's Arrow chunks) joined column by column equals ``pd.concat`` of
    them, dtypes included; its output, padded the way PySpark pads it, reaches Arrow unchanged."""
    history = data.draw(histories())
    segments = data.draw(changelogs(history))
    batch = frame(segments)
    batch.insert(0, "source", "s")
    table = pa.Table.from_pandas(batch, preserve_index=False)
    size = data.draw(st.integers(1, max(1, len(batch))))
    chunks = [table.slice(i, size).to_pandas() for i in range(0, max(1, len(batch)), size)]

    got = _events(iter(chunks))
    want = pd.concat(chunks, ignore_index=True)[list(EVENT_COLUMNS)]
    pd.testing.assert_frame_equal(got, want)

    released, _ = assemble(AssemblyState(source="s"), got, CFG, now=0.0)
    for out in released:
        with warnings.catch_warnings():  # pandas deprecates what PySpark does here
            warnings.simplefilter("ignore", FutureWarning)
            pad = pd.DataFrame(dict.fromkeys(OUTPUT_COLUMNS), index=[])
            padded = pd.concat([out.astype(_OUTPUT_DTYPES), pad])
        kept = ["Int64" if t == "int64" else t for t in OUTPUT_COLUMNS.values()]
        assert list(padded.dtypes.astype(str)) == kept
        plain = pa.Table.from_pandas(out, preserve_index=False)
        assert pa.Table.from_pandas(padded, preserve_index=False).cast(plain.schema).equals(plain)
