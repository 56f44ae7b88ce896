"""Hypothesis strategies for change histories and their delivery.

A *history* is what PostgreSQL committed for one source: a snapshot unit and
then transactions in commit order. A *changelog* is what capture wrote:
per-table topics and the transaction topic, cut into segments, with
redelivered copies of a transaction's events where capture crashed between
flushing data and flushing the END. A *delivery* is how a reader sees it:
segments in any order, in arbitrary micro-batch cuts, some delivered twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from hypothesis import strategies as st

from txjoin.assemble.buffer import EVENT_COLUMNS

TABLES = ["public.a", "public.b", "public.c"]


@dataclass
class Tx:
    xid: int
    end_lsn: int
    begin_lsn: int
    ts_ms: int
    events: list[dict[str, Any]] = field(default_factory=list)  # EVENT_COLUMNS rows
    snapshot: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            t = f"{e['schema']}.{e['table']}"
            out[t] = out.get(t, 0) + 1
        return out


@dataclass
class Segment:
    topic: str
    rows: list[dict[str, Any]]


def _row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {c: (-1 if t == "int64" else None) for c, t in EVENT_COLUMNS.items()}
    base.update(kw)
    return base


@st.composite
def histories(draw: st.DrawFn, max_tx: int = 12, max_events: int = 5) -> list[Tx]:
    """A snapshot unit and up to ``max_tx`` committed transactions."""
    n = draw(st.integers(0, max_tx))
    # xids are not monotonic in commit order; end LSNs are.
    xids = draw(st.lists(st.integers(500, 5000), min_size=n + 1, max_size=n + 1, unique=True))
    lsn = 1000
    txs: list[Tx] = []
    snap_rows = draw(st.integers(0, 4))
    snap = Tx(xids[0], lsn, lsn, 1, snapshot=True)
    for i in range(snap_rows):
        table = draw(st.sampled_from(TABLES))
        snap.events.append(
            _row(
                kind="change",
                xid=snap.xid,
                lsn=lsn,
                seq_prev=-1,
                total_order=i + 1,
                op="r",
                snapshot="true",
                schema=table.split(".")[0],
                table=table.split(".")[1],
                ts_ms=1,
                after=json.dumps({"id": i, "v": "snap"}),
            )
        )
    txs.append(snap)
    prev_end = lsn
    for k in range(n):
        size = draw(st.integers(0, max_events))
        begin = prev_end + draw(st.integers(1, 50))
        tx = Tx(xids[k + 1], 0, begin, 100 + k)
        lsn = begin
        for j in range(size):
            lsn += draw(st.integers(0, 3))  # COPY-style multi-inserts share an LSN
            table = draw(st.sampled_from(TABLES))
            op = draw(st.sampled_from(["c", "u", "d", "t"]))
            tx.events.append(
                _row(
                    kind="change",
                    xid=tx.xid,
                    lsn=lsn,
                    seq_prev=prev_end,
                    total_order=j + 1,
                    op=op,
                    snapshot="false",
                    schema=table.split(".")[0],
                    table=table.split(".")[1],
                    ts_ms=tx.ts_ms,
                    before=json.dumps({"id": j}) if op in "ud" else None,
                    after=json.dumps({"id": j, "x": k}) if op in "cu" else None,
                )
            )
        tx.end_lsn = lsn + draw(st.integers(1, 20))
        prev_end = tx.end_lsn
        txs.append(tx)
    return txs


def markers(tx: Tx) -> tuple[dict[str, Any], dict[str, Any]]:
    begin = _row(kind="begin", xid=tx.xid, lsn=tx.begin_lsn, ts_ms=tx.ts_ms)
    counts = tx.counts()
    end = _row(
        kind="end",
        xid=tx.xid,
        lsn=tx.end_lsn,
        ts_ms=tx.ts_ms,
        event_count=sum(counts.values()),
        data_collections=json.dumps([{"data_collection": t, "event_count": n} for t, n in counts.items()]),
    )
    return begin, end


@st.composite
def changelogs(draw: st.DrawFn, history: list[Tx]) -> list[Segment]:
    """What capture wrote: per-topic record lists cut into segments, in creation order."""
    topics: dict[str, list[dict[str, Any]]] = {"tx": []}
    for tx in history:
        begin, end = markers(tx)
        topics["tx"].append(begin)
        for e in tx.events:
            topics.setdefault(f"{e['schema']}.{e['table']}", []).append(e)
        if tx.events and not tx.snapshot and draw(st.integers(0, 5)) == 0:
            # Capture crashed after flushing some of this transaction's data
            # but before its END: on restart the events are written again.
            for e in tx.events:
                if draw(st.booleans()):
                    topics[f"{e['schema']}.{e['table']}"].append(dict(e))
        topics["tx"].append(end)
    segments: list[Segment] = []
    for topic, rows in topics.items():
        i = 0
        offset = 0
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
    order = draw(st.permutations(segments))
    extra = draw(st.lists(st.sampled_from(segments), max_size=3)) if segments else []
    seq = list(order)
    for s in extra:
        seq.insert(draw(st.integers(0, len(seq))), s)
    batches: list[list[Segment]] = []
    i = 0
    while i < len(seq):
        size = draw(st.integers(1, max(1, len(seq) // 2 + 1)))
        batches.append(seq[i : i + size])
        i += size
    return batches


def frame(batch: list[Segment]) -> pd.DataFrame:
    rows = [r for s in batch for r in s.rows]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})
    df = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    return df.astype(EVENT_COLUMNS)


def render(row: dict[str, Any], source: str = "s") -> str:
    """The Debezium JSON record an EVENT_COLUMNS row stands for."""
    if row["kind"] == "change":
        seq = [None if row["seq_prev"] < 0 else str(row["seq_prev"]), str(row["lsn"])]
        value: dict[str, Any] = {
            "before": json.loads(row["before"]) if row["before"] else None,
            "after": json.loads(row["after"]) if row["after"] else None,
            "source": {
                "version": "test",
                "connector": "postgresql",
                "name": source,
                "ts_ms": row["ts_ms"],
                "snapshot": row["snapshot"],
                "db": "db",
                "sequence": json.dumps(seq),
                "schema": row["schema"],
                "table": row["table"],
                "txId": row["xid"],
                "lsn": row["lsn"],
                "xmin": None,
            },
            "op": row["op"],
            "ts_ms": row["ts_ms"],
            "transaction": {
                "id": f"{row['xid']}:{row['lsn']}",
                "total_order": row["total_order"],
                "data_collection_order": 1,
            },
        }
        return json.dumps(value)
    if row["kind"] == "begin":
        return json.dumps(
            {
                "status": "BEGIN",
                "id": f"{row['xid']}:{row['lsn']}",
                "ts_ms": row["ts_ms"],
                "event_count": None,
                "data_collections": None,
            }
        )
    return json.dumps(
        {
            "status": "END",
            "id": f"{row['xid']}:{row['lsn']}",
            "ts_ms": row["ts_ms"],
            "event_count": row["event_count"],
            "data_collections": json.loads(row["data_collections"]),
        }
    )


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
