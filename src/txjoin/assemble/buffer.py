"""Transaction assembly: buffer change events until each transaction is whole,
release whole transactions in commit order, drop duplicates.

This is plain logic over pandas frames and a small state object; the Spark
operator (:mod:`txjoin.assemble.spark`) only converts to and from
``GroupState``. One :class:`AssemblyState` covers one source, because commit
order is a property of the whole source's sequence of transactions.

Ordering. END markers arrive on the transaction topic in commit order; their
``id`` suffix is the commit's end LSN, strictly increasing per source. With
the embedded changelog a file listing can miss a segment renamed during the
listing, so markers carry their segment's offset range and a segment beyond
the contiguous frontier waits until the gap fills. A transaction is released
only when every END before it has been released: nothing overtakes.

Completeness. END's ``data_collections`` gives per-table counts; a transaction
is complete when, for every table, the distinct ``total_order`` values of its
buffered events number exactly that count.

Duplicates. Inside the buffer ``(xid, total_order)`` is unique. A change whose
``seq_prev`` (the previous transaction's end LSN, ``source.sequence[0]``) is
below the last released end LSN belongs to a released transaction. ENDs at or
below it were released already. Snapshot events after the snapshot unit was
released are copies or leftovers of an aborted snapshot attempt.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from txjoin.errors import (
    AssemblyError,
    IncompleteTransaction,
    ProtocolError,
    TransactionTooLarge,
)

__all__ = [
    "EVENT_COLUMNS",
    "OUTPUT_COLUMNS",
    "AssemblerConfig",
    "AssemblyState",
    "BatchReport",
    "Marker",
    "assemble",
]

log = logging.getLogger(__name__)

#: Columns of the decoded input rows (see :mod:`txjoin.decode`). Integers use
#: -1 for "absent" so columns stay int64.
EVENT_COLUMNS: dict[str, str] = {
    "kind": "object",  # 'change' | 'begin' | 'end' | 'heartbeat'
    "seg_first": "int64",  # transaction topic: first offset of the record's segment, else -1
    "seg_last": "int64",
    "xid": "int64",
    "lsn": "int64",  # change: its LSN; begin/end: the id's LSN (END: commit end LSN)
    "seq_prev": "int64",  # change: source.sequence[0]; -1 if null
    "total_order": "int64",  # change: transaction.total_order; -1 if absent
    "op": "object",
    "snapshot": "object",  # source.snapshot ('false' when streaming)
    "schema": "object",
    "table": "object",
    "ts_ms": "int64",
    "event_count": "int64",  # END: total events
    "data_collections": "object",  # END: JSON [{"data_collection":..., "event_count":...}]
    "before": "object",  # JSON text or None
    "after": "object",
}

#: Columns of released rows, in order.
OUTPUT_COLUMNS: dict[str, str] = {
    "source": "object",
    "tx_seq": "int64",  # 1-based ordinal of the transaction in this source (snapshot = 1)
    "xid": "int64",
    "commit_lsn": "int64",
    "commit_ts_ms": "int64",
    "total_order": "int64",
    "lsn": "int64",
    "op": "object",
    "schema": "object",
    "table": "object",
    "before": "object",
    "after": "object",
    "tx_events": "int64",  # events in the whole transaction
}

_BUFFER_COLUMNS = [
    "xid",
    "lsn",
    "total_order",
    "op",
    "snapshot",
    "schema",
    "table",
    "before",
    "after",
]


@dataclass(frozen=True)
class AssemblerConfig:
    """Settings of the assembly operator (one per pipeline)."""

    #: A transaction buffering more events than this stops the query with
    #: :class:`TransactionTooLarge` naming the transaction and this setting.
    max_transaction_events: int = 5_000_000
    #: Seconds a transaction may stay incomplete before it is reported.
    incomplete_timeout: float = 60.0
    #: What to do then: 'warn' (log every timeout period, keep waiting) or
    #: 'fail' (stop the query with IncompleteTransaction).
    on_incomplete: Literal["warn", "fail"] = "warn"
    #: Check transaction-topic segment contiguity (embedded changelog). Kafka
    #: partitions are read in offset order, so the Kafka reader turns it off.
    check_segments: bool = True
    #: First offset of the transaction topic (non-zero after retention).
    start_offset: int = 0
    #: Rows per released frame.
    chunk_rows: int = 50_000

    def __post_init__(self) -> None:
        if self.on_incomplete not in ("warn", "fail"):
            raise ValueError(
                f"on_incomplete={self.on_incomplete!r} is invalid: valid values are 'warn', 'fail'"
            )


@dataclass
class Marker:
    """An accepted END marker waiting for its events."""

    xid: int
    end_lsn: int
    ts_ms: int
    event_count: int
    counts: dict[str, int]  # "schema.table" -> events

    def to_json(self) -> list[Any]:
        return [self.xid, self.end_lsn, self.ts_ms, self.event_count, self.counts]

    @classmethod
    def from_json(cls, v: list[Any]) -> Marker:
        return cls(int(v[0]), int(v[1]), int(v[2]), int(v[3]), dict(v[4]))


@dataclass
class AssemblyState:
    """What one source's assembly keeps between micro-batches."""

    source: str = ""
    frontier: int = 0  # next transaction-topic offset expected
    last_end: int = 0  # end LSN of the last released transaction
    last_xid: int = -1
    released: int = 0  # transactions released so far
    snapshot_released: bool = False
    markers: list[Marker] = field(default_factory=list)  # accepted, unreleased, by end LSN
    held: dict[int, tuple[int, list[Marker]]] = field(
        default_factory=dict
    )  # seg_first -> (seg_last, markers)
    first_seen: dict[int, float] = field(default_factory=dict)  # xid -> wall time first seen
    reported: dict[int, float] = field(default_factory=dict)  # xid (or -offset) -> last report time
    events: pd.DataFrame = field(default_factory=lambda: _empty(_BUFFER_COLUMNS))

    # -- serialization for GroupState -------------------------------------
    def meta_json(self) -> str:
        return json.dumps(
            {
                "source": self.source,
                "frontier": self.frontier,
                "last_end": self.last_end,
                "last_xid": self.last_xid,
                "released": self.released,
                "snapshot_released": self.snapshot_released,
                "markers": [m.to_json() for m in self.markers],
                "held": {str(k): [v[0], [m.to_json() for m in v[1]]] for k, v in self.held.items()},
                "first_seen": {str(k): v for k, v in self.first_seen.items()},
                "reported": {str(k): v for k, v in self.reported.items()},
            }
        )

    def events_bytes(self) -> bytes:
        if self.events.empty:
            return b""
        table = pa.Table.from_pandas(self.events, preserve_index=False)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        return sink.getvalue()

    @classmethod
    def restore(cls, meta: str, events: bytes | None) -> AssemblyState:
        m = json.loads(meta)
        st = cls(
            source=m["source"],
            frontier=int(m["frontier"]),
            last_end=int(m["last_end"]),
            last_xid=int(m["last_xid"]),
            released=int(m["released"]),
            snapshot_released=bool(m["snapshot_released"]),
            markers=[Marker.from_json(x) for x in m["markers"]],
            held={int(k): (int(v[0]), [Marker.from_json(x) for x in v[1]]) for k, v in m["held"].items()},
            first_seen={int(k): float(v) for k, v in m["first_seen"].items()},
            reported={int(k): float(v) for k, v in m["reported"].items()},
        )
        if events:
            st.events = pa.ipc.open_stream(events).read_all().to_pandas()
        return st

    def in_flight(self) -> int:
        """Transactions seen but not yet released (for progress displays)."""
        return len(set(self.first_seen) | {m.xid for m in self.markers})


@dataclass
class BatchReport:
    """What one call to :func:`assemble` did."""

    released_transactions: int = 0
    released_events: int = 0
    duplicates_dropped: int = 0
    buffered_events: int = 0
    waiting: list[str] = field(default_factory=list)  # human-readable incomplete reports


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=EVENT_COLUMNS.get(c, "object")) for c in columns})


def _parse_collections(text: Any, xid: int) -> dict[str, int]:
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return {}
    try:
        items = json.loads(text) if isinstance(text, str) else list(text)
        return {str(d["data_collection"]): int(d["event_count"]) for d in items}
    except (ValueError, KeyError, TypeError) as e:
        raise AssemblyError(
            f"END marker of transaction {xid} has malformed data_collections {text!r}: {e}",
            xid=xid,
        ) from None


def _accept_markers(state: AssemblyState, marks: pd.DataFrame, cfg: AssemblerConfig) -> None:
    """Move END markers into ``state.markers`` respecting segment contiguity.

    ``marks`` holds every transaction-topic row of the batch (BEGIN and END):
    a segment holding only BEGINs still moves the frontier.
    """
    by_segment: dict[int, tuple[int, list[Marker]]] = {}
    cols = (
        "kind",
        "seg_first",
        "seg_last",
        "xid",
        "lsn",
        "ts_ms",
        "event_count",
        "data_collections",
    )
    for kind, first, last, xid, lsn, ts_ms, count, collections in zip(
        *(marks[c].tolist() for c in cols), strict=True
    ):
        key = int(first) if cfg.check_segments else -1
        seg = by_segment.setdefault(key, (int(last), []))
        if kind != "end" or int(lsn) <= state.last_end:
            continue
        m = Marker(int(xid), int(lsn), int(ts_ms), int(count), _parse_collections(collections, int(xid)))
        if sum(m.counts.values()) != m.event_count:
            raise AssemblyError(
                f"END marker of transaction {m.xid} (end LSN {m.end_lsn}) says event_count "
                f"{m.event_count} but its data_collections add up to {sum(m.counts.values())}",
                xid=m.xid,
            )
        seg[1].append(m)
    if not cfg.check_segments:
        for _, ms in by_segment.values():
            state.markers.extend(ms)
    else:
        for first, (last, ms) in by_segment.items():
            if first < 0:
                raise AssemblyError(
                    f"a transaction-topic record of source {state.source!r} carries no segment "
                    "range: the embedded changelog reader must supply it (or turn "
                    "check_segments off for Kafka)",
                )
            if last < state.frontier or first in state.held:
                continue  # a segment delivered again
            state.held[first] = (last, ms)
        while state.frontier in state.held:
            last, ms = state.held.pop(state.frontier)
            state.markers.extend(ms)
            state.frontier = last + 1
        # Segments wholly below the frontier cannot matter any more.
        for first in [f for f, (last, _) in state.held.items() if last < state.frontier]:
            del state.held[first]
    # Commit order is end-LSN order; drop markers already released or repeated.
    seen: set[int] = set()
    kept = []
    for m in sorted(state.markers, key=lambda m: m.end_lsn):
        if m.end_lsn <= state.last_end or m.end_lsn in seen:
            continue
        seen.add(m.end_lsn)
        kept.append(m)
    state.markers = kept


def assemble(
    state: AssemblyState, batch: pd.DataFrame, cfg: AssemblerConfig, now: float
) -> tuple[list[pd.DataFrame], BatchReport]:
    """Feed one micro-batch of decoded rows; return released frames and a report.

    ``state`` is updated in place. ``now`` is wall-clock seconds, used only
    for timeouts, so tests can drive time.
    """
    report = BatchReport()
    kinds = batch["kind"] if not batch.empty else pd.Series(dtype="object")
    if not batch.empty and (kinds == "bad").any():
        bad = batch.loc[kinds == "bad"].iloc[0]
        raise ProtocolError(
            f"source {state.source!r}: record in {bad['schema']} is neither a Debezium change "
            f"event nor a transaction marker: {bad['after']!r}. Fix or remove that record; "
            "nothing after the last good transaction was released",
            path=bad["schema"],
            source=state.source,
        )

    # -- change events into the buffer, without duplicates ----------------
    changes = batch.loc[kinds == "change", [*_BUFFER_COLUMNS, "seq_prev"]] if not batch.empty else None
    if changes is not None and not changes.empty:
        before = len(changes)
        stale = (changes["seq_prev"] >= 0) & (changes["seq_prev"] < state.last_end)
        if state.snapshot_released:
            stale |= changes["snapshot"] != "false"
        changes = changes.loc[~stale, _BUFFER_COLUMNS]
        report.duplicates_dropped += before - len(changes)
        if not changes.empty:
            for x in pd.unique(changes["xid"]):
                state.first_seen.setdefault(int(x), now)
            buffered = (
                pd.concat([state.events, changes], ignore_index=True) if not state.events.empty else changes
            )
            n = len(buffered)
            buffered = buffered.drop_duplicates(["xid", "total_order"], keep="first", ignore_index=True)
            report.duplicates_dropped += n - len(buffered)
            state.events = buffered
    if not batch.empty:
        begins = batch.loc[kinds == "begin", "xid"]
        for x in pd.unique(begins):
            if x not in (m.xid for m in state.markers):
                state.first_seen.setdefault(int(x), now)
        marks = batch.loc[(kinds == "end") | (kinds == "begin")]
        if not marks.empty:
            _accept_markers(state, marks, cfg)

    # -- release the longest complete prefix -------------------------------
    events = state.events
    if not events.empty:
        counts = events.groupby(["xid", "schema", "table"], sort=False).size()
        have: dict[tuple[int, str], int] = {
            (int(x), f"{s}.{t}"): int(n)
            for (x, s, t), n in zip(counts.index.tolist(), counts.tolist(), strict=True)
        }
        per_xid = events.groupby("xid", sort=False).size()
        too_big = per_xid[per_xid > cfg.max_transaction_events]
        if not too_big.empty:
            xid = int(too_big.index[0])
            raise TransactionTooLarge(
                f"transaction {xid} of source {state.source!r} buffers {int(too_big.iloc[0])} "
                f"events, more than max_transaction_events={cfg.max_transaction_events}. txjoin "
                "never splits a transaction: raise the setting (and the Spark executor memory "
                "with it) to let this transaction through",
                xid=xid,
                source=state.source,
                setting="max_transaction_events",
            )
    else:
        have = {}
    release: list[Marker] = []
    for m in state.markers:
        complete = True
        for table, n in m.counts.items():
            got = have.get((m.xid, table), 0)
            if got < n:
                complete = False
                break
            if got > n:
                raise AssemblyError(
                    f"transaction {m.xid} (end LSN {m.end_lsn}) of source {state.source!r} has "
                    f"{got} distinct events for {table} but its END says {n}: the changelog "
                    "holds events END does not count; it was written by something else or is "
                    "damaged",
                    xid=m.xid,
                    table=table,
                )
        if not complete:
            break
        release.append(m)

    frames: list[pd.DataFrame] = []
    if release:
        released_xids = {m.xid for m in release}
        take = events["xid"].isin(released_xids).to_numpy() if not events.empty else np.zeros(0, bool)
        out = events.loc[take]
        state.events = events.loc[~take].reset_index(drop=True)
        seq = {m.xid: state.released + i + 1 for i, m in enumerate(release)}
        info = {m.xid: m for m in release}
        if not out.empty:
            xids = out["xid"]
            out = pd.DataFrame(
                {
                    "source": state.source,
                    "tx_seq": xids.map(seq).astype("int64"),
                    "xid": xids.astype("int64"),
                    "commit_lsn": xids.map({x: m.end_lsn for x, m in info.items()}).astype("int64"),
                    "commit_ts_ms": xids.map({x: m.ts_ms for x, m in info.items()}).astype("int64"),
                    "total_order": out["total_order"].astype("int64"),
                    "lsn": out["lsn"].astype("int64"),
                    "op": out["op"],
                    "schema": out["schema"],
                    "table": out["table"],
                    "before": out["before"],
                    "after": out["after"],
                    "tx_events": xids.map({x: m.event_count for x, m in info.items()}).astype("int64"),
                }
            ).sort_values(["commit_lsn", "total_order"], kind="stable", ignore_index=True)
            for start in range(0, len(out), cfg.chunk_rows):
                frames.append(out.iloc[start : start + cfg.chunk_rows])
            report.released_events = len(out)
        state.released += len(release)
        state.last_end = release[-1].end_lsn
        state.last_xid = release[-1].xid
        state.markers = state.markers[len(release) :]
        for m in release:
            state.first_seen.pop(m.xid, None)
            state.reported.pop(m.xid, None)
        if not state.snapshot_released:
            state.snapshot_released = True
            if not state.events.empty:
                leftover = state.events["snapshot"] != "false"
                if leftover.any():
                    log.info(
                        "source %s: dropping %d snapshot events of an aborted snapshot attempt",
                        state.source,
                        int(leftover.sum()),
                    )
                    for x in pd.unique(state.events.loc[leftover, "xid"]):
                        state.first_seen.pop(int(x), None)
                    state.events = state.events.loc[~leftover].reset_index(drop=True)
        report.released_transactions = len(release)

    report.buffered_events = len(state.events)
    _check_timeouts(state, cfg, now, have, report)
    return frames, report


def _check_timeouts(
    state: AssemblyState,
    cfg: AssemblerConfig,
    now: float,
    have: dict[tuple[int, str], int],
    report: BatchReport,
) -> None:
    """Report transactions incomplete for longer than the timeout."""
    problems: list[tuple[int, str, dict[str, Any]]] = []
    head = state.markers[0] if state.markers else None
    if head is not None:
        since = state.first_seen.setdefault(head.xid, now)
        if now - since >= cfg.incomplete_timeout:
            missing = {
                t: n - have.get((head.xid, t), 0)
                for t, n in head.counts.items()
                if have.get((head.xid, t), 0) < n
            }
            what = ", ".join(f"{n} of {head.counts[t]} events of {t}" for t, n in missing.items())
            problems.append(
                (
                    head.xid,
                    f"transaction {head.xid} (end LSN {head.end_lsn}) of source "
                    f"{state.source!r} is incomplete after {now - since:.0f} s: missing {what}; "
                    f"{len(state.markers) - 1} later transactions wait behind it",
                    {"missing": missing, "end_lsn": head.end_lsn},
                )
            )
    if state.held:
        first_held = min(state.held)
        key = -first_held - 1
        since = state.first_seen.setdefault(key, now)
        if now - since >= cfg.incomplete_timeout:
            problems.append(
                (
                    key,
                    f"transaction topic of source {state.source!r} has a gap: offsets "
                    f"{state.frontier}..{first_held - 1} have not arrived after "
                    f"{now - since:.0f} s while later segments have; "
                    f"{sum(len(v[1]) for v in state.held.values())} "
                    "transactions wait behind the gap",
                    {"missing_offsets": [state.frontier, first_held - 1]},
                )
            )
    else:
        state.first_seen = {k: v for k, v in state.first_seen.items() if k >= 0}
    marker_xids = {m.xid for m in state.markers}
    for xid, since in state.first_seen.items():
        if xid < 0 or xid in marker_xids or now - since < cfg.incomplete_timeout:
            continue
        problems.append(
            (
                xid,
                f"transaction {xid} of source {state.source!r} has buffered events but no END "
                f"after {now - since:.0f} s (upstream loss, or capture stopped mid-transaction); "
                "it is kept, not released",
                {},
            )
        )
    for key, message, details in problems:
        last = state.reported.get(key)
        if last is not None and now - last < cfg.incomplete_timeout:
            continue
        state.reported[key] = now
        report.waiting.append(message)
        if cfg.on_incomplete == "fail":
            raise IncompleteTransaction(
                message + ". Set on_incomplete='warn' to keep waiting instead of stopping",
                xid=key,
                source=state.source,
                **details,
            )
        log.warning("%s", message)
