"""Hypothesis strategies for change histories and their delivery.

A *history* is what PostgreSQL committed for one source: a snapshot unit and
then transactions in commit order. A *changelog* is what capture wrote:
per-table topics and the transaction topic, cut into segments, with
redelivered copies of a transaction's events where capture crashed between
flushing data and flushing the END. A *delivery* is how a reader sees it:
segments in any order, in arbitrary micro-batch cuts, some delivered twice.

Records here are plain dicts (``Rec``); :func:`render` turns one into the
Debezium JSON line capture writes, and :func:`frame` into the rows the
decoder hands to assembly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from hypothesis import strategies as st

from txjoin.decode import EVENT_COLUMNS

TABLES = ["public.a", "public.b", "public.c"]

Rec = dict[str, Any]


@dataclass
class Tx:
    xid: int
    end_lsn: int
    begin_lsn: int
    ts_ms: int
    events: list[Rec] = field(default_factory=list)
    snapshot: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            out[e["table"]] = out.get(e["table"], 0) + 1
        return out


@dataclass
class Segment:
    topic: str
    rows: list[Rec]


def change(**kw: Any) -> Rec:
    return {"kind": "change", "seg_first": -1, "seg_last": -1, **kw}


@st.composite
def histories(draw: st.DrawFn, max_tx: int = 12, max_events: int = 5) -> list[Tx]:
    """A snapshot unit and up to ``max_tx`` committed transactions."""
    n = draw(st.integers(0, max_tx))
    # xids are not monotonic in commit order; end LSNs are.
    xids = draw(st.lists(st.integers(500, 5000), min_size=n + 1, max_size=n + 1, unique=True))
    lsn = 1000
    txs: list[Tx] = []
    snap = Tx(xids[0], lsn, lsn, 1, snapshot=True)
    for i in range(draw(st.integers(0, 4))):
        snap.events.append(
            change(xid=snap.xid, lsn=lsn, seq_prev=-1, total_order=i + 1, op="r", snapshot="true",
                   table=draw(st.sampled_from(TABLES)), ts_ms=1, before=None, after={"id": i, "v": "snap"})
        )  # fmt: skip
    txs.append(snap)
    prev_end = lsn
    for k in range(n):
        begin = prev_end + draw(st.integers(1, 50))
        tx = Tx(xids[k + 1], 0, begin, 100 + k)
        lsn = begin
        for j in range(draw(st.integers(0, max_events))):
            lsn += draw(st.integers(0, 3))  # COPY-style multi-inserts share an LSN
            op = draw(st.sampled_from(["c", "u", "d", "t"]))
            tx.events.append(
                change(xid=tx.xid, lsn=lsn, seq_prev=prev_end, total_order=j + 1, op=op, snapshot="false",
                       table=draw(st.sampled_from(TABLES)), ts_ms=tx.ts_ms,
                       before={"id": j} if op in "ud" else None, after={"id": j, "x": k} if op in "cu" else None)
            )  # fmt: skip
        tx.end_lsn = lsn + draw(st.integers(1, 20))
        prev_end = tx.end_lsn
        txs.append(tx)
    for tx in txs:  # data_collection_order: the event's position among its table's events
        seen: dict[str, int] = {}
        for e in tx.events:
            seen[e["table"]] = seen.get(e["table"], 0) + 1
            e["dc_order"] = seen[e["table"]]
    return txs


def markers(tx: Tx) -> tuple[Rec, Rec]:
    begin: Rec = {"kind": "begin", "xid": tx.xid, "lsn": tx.begin_lsn, "ts_ms": tx.ts_ms}
    end: Rec = {"kind": "end", "xid": tx.xid, "lsn": tx.end_lsn, "ts_ms": tx.ts_ms, "dc": tx.counts()}
    return begin, end


@st.composite
def changelogs(draw: st.DrawFn, history: list[Tx]) -> list[Segment]:
    """What capture wrote: per-topic record lists cut into segments, in creation order."""
    topics: dict[str, list[Rec]] = {"tx": []}
    for tx in history:
        begin, end = markers(tx)
        topics["tx"].append(begin)
        for e in tx.events:
            topics.setdefault(e["table"], []).append(e)
        if tx.events and not tx.snapshot and draw(st.integers(0, 5)) == 0:
            # Capture crashed after flushing some of this transaction's data
            # but before its END: on restart the events are written again.
            for e in tx.events:
                if draw(st.booleans()):
                    topics[e["table"]].append(dict(e))
        topics["tx"].append(end)
    segments: list[Segment] = []
    for topic, rows in topics.items():
        i = offset = 0
        while i < len(rows):
            size = draw(st.integers(1, 4))
            chunk = [dict(r) for r in rows[i : i + size]]
            if topic == "tx":
                for r in chunk:
                    r["seg_first"], r["seg_last"] = offset, offset + len(chunk) - 1
            segments.append(Segment(topic, chunk))
            offset += len(chunk)
            i += size
    return segments


@st.composite
def deliveries(draw: st.DrawFn, segments: list[Segment]) -> list[list[Segment]]:
    """Segments in a shuffled order, some twice, cut into micro-batches."""
    seq = list(draw(st.permutations(segments)))
    for s in draw(st.lists(st.sampled_from(segments), max_size=3)) if segments else []:
        seq.insert(draw(st.integers(0, len(seq))), s)
    batches: list[list[Segment]] = []
    i = 0
    while i < len(seq):
        size = draw(st.integers(1, max(1, len(seq) // 2 + 1)))
        batches.append(seq[i : i + size])
        i += size
    return batches


def render(rec: Rec, source: str = "s") -> str:
    """The Debezium JSON line capture writes for ``rec``."""
    if rec["kind"] == "change":
        schema, table = rec["table"].split(".")
        seq = [None if rec["seq_prev"] < 0 else str(rec["seq_prev"]), str(rec["lsn"])]
        return json.dumps(
            {
                "before": rec["before"],
                "after": rec["after"],
                "source": {"version": "test", "connector": "postgresql", "name": source, "ts_ms": rec["ts_ms"],
                           "snapshot": rec["snapshot"], "db": "db", "sequence": json.dumps(seq), "schema": schema,
                           "table": table, "txId": rec["xid"], "lsn": rec["lsn"], "xmin": None},
                "op": rec["op"],
                "ts_ms": rec["ts_ms"],
                "transaction": {"id": f"{rec['xid']}:{rec['lsn']}", "total_order": rec["total_order"], "data_collection_order": rec["dc_order"]},
            }
        )  # fmt: skip
    if rec["kind"] == "begin":
        return json.dumps({"status": "BEGIN", "id": f"{rec['xid']}:{rec['lsn']}", "ts_ms": rec["ts_ms"],
                           "event_count": None, "data_collections": None})  # fmt: skip
    return json.dumps({"status": "END", "id": f"{rec['xid']}:{rec['lsn']}", "ts_ms": rec["ts_ms"],
                       "event_count": sum(rec["dc"].values()),
                       "data_collections": [{"data_collection": t, "event_count": n} for t, n in rec["dc"].items()]})  # fmt: skip


def _rows(rec: Rec) -> list[Rec]:
    """The assembly-input rows for one record (an END once per table)."""
    base: Rec = {c: (-1 if t == "int64" else None) for c, t in EVENT_COLUMNS.items()}
    base.update({k: rec[k] for k in ("kind", "seg_first", "seg_last", "xid", "lsn", "ts_ms") if k in rec})
    if rec["kind"] == "change":
        base.update({k: rec[k] for k in ("seq_prev", "total_order", "dc_order", "op", "snapshot", "table")})
        base["value"] = render(rec)
        return [base]
    if rec["kind"] == "end":
        base["event_count"] = sum(rec["dc"].values())
        if not rec["dc"]:
            return [base]
        return [{**base, "dc_table": t, "dc_count": n} for t, n in rec["dc"].items()]
    return [base]


def frame(batch: list[Segment]) -> pd.DataFrame:
    rows = [r for s in batch for rec in s.rows for r in _rows(rec)]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)


def assign_offsets(segments: list[Segment]) -> dict[int, tuple[str, int, int]]:
    """File identity of each segment (by id): (topic dir, first, last) in creation order."""
    next_offset: dict[str, int] = {}
    out: dict[int, tuple[str, int, int]] = {}
    for seg in segments:
        topic = "transaction" if seg.topic == "tx" else seg.topic
        first = next_offset.get(topic, 0)
        last = first + len(seg.rows) - 1
        next_offset[topic] = last + 1
        out[id(seg)] = (topic, first, last)
    return out
