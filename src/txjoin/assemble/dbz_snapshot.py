"""Debezium's own snapshots, framed as one unit for assembly.

Debezium's PostgreSQL connector writes its initial snapshot as ``op: "r"``
rows with ``"transaction": null`` and no BEGIN/END on the transaction topic
(unlike txjoin's capture, whose snapshot is one unit with an END). Each row
says where it stands in ``source.snapshot``: ``first``, ``true`` (or
``first_in_data_collection`` / ``last_in_data_collection``), and ``last`` on
the very last row. All carry the snapshot transaction's ``txId`` and the
slot's consistent point as ``lsn``.

:func:`frame_snapshot` gives such rows positions in arrival order and, once
the ``last`` row is in, adds the END marker a transaction would have: that
xid, that LSN, the rows counted per table. Assembly then releases the
snapshot as the source's first transaction, whole, before any streamed one
(their END LSNs are above the consistent point). It relies on Debezium
writing the snapshot in order, so that every row is delivered with or
before the ``last`` one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from txjoin.errors import ProtocolError

__all__ = ["frame_snapshot", "require_transaction_metadata", "snapshot_pending"]

_NEXT = ""  # key of the position counter in the state's dict (tables are "schema.table")


def frame_snapshot(snap: dict[str, int], batch: pd.DataFrame, released: bool) -> pd.DataFrame:
    """``batch`` with its transaction-less snapshot rows positioned, plus the snapshot's END
    once its last row arrived. ``snap`` (position counter, rows per table) is updated."""
    if batch.empty or released:
        return batch
    is_snap = (
        (batch["kind"] == "change") & (batch["snapshot"] != "false") & (batch["total_order"] < 0)
    ).to_numpy()
    if not is_snap.any():
        return batch
    batch = batch.copy()
    start = snap.get(_NEXT, 0)
    n = int(is_snap.sum())
    batch.loc[is_snap, "total_order"] = np.arange(start + 1, start + 1 + n, dtype="int64")
    snap[_NEXT] = start + n
    rows = batch.loc[is_snap]
    for table, k in rows.groupby("table", sort=False).size().items():
        snap[str(table)] = snap.get(str(table), 0) + int(k)
    last = rows.loc[rows["snapshot"] == "last"]
    if last.empty:
        return batch
    row = last.iloc[-1]
    counts = {t: k for t, k in snap.items() if t != _NEXT}
    total = sum(counts.values())
    values = {
        "kind": "end",
        "seg_first": -1,
        "seg_last": -1,
        "xid": int(row["xid"]),
        "lsn": int(row["lsn"]),
        "seq_prev": -1,
        "total_order": -1,
        "dc_order": -1,
        "snapshot": "last",
        "ts_ms": int(row["ts_ms"]),
        "event_count": total,
        "dc_table": None,
        "dc_count": -1,
    }
    if "source" in batch.columns:
        values["source"] = row["source"]
    end = pd.DataFrame(
        {c: pd.Series([values.get(c)] * len(counts), dtype=batch[c].dtype) for c in batch.columns}
    )
    end["dc_table"] = pd.Series(list(counts), dtype="object")
    end["dc_count"] = pd.Series(list(counts.values()), dtype="int64")
    snap.clear()
    snap[_NEXT] = start + n
    return pd.concat([batch, end], ignore_index=True)


def snapshot_pending(snap: dict[str, int]) -> bool:
    """Whether snapshot rows arrived but not the last one: streamed transactions wait."""
    return any(t != _NEXT for t in snap)


def require_transaction_metadata(source: str, batch: pd.DataFrame) -> None:
    """Refuse streamed Debezium events without a transaction block: they cannot be assembled."""
    if batch.empty:
        return
    bad = batch.loc[(batch["kind"] == "change") & (batch["snapshot"] == "false") & (batch["total_order"] < 0)]
    if bad.empty:
        return
    row = bad.iloc[0]
    raise ProtocolError(
        f"source {source!r}: a streamed change of {row['table']} (transaction {int(row['xid'])}, LSN "
        f"{int(row['lsn'])}) has no transaction block, so txjoin cannot tell where its transaction ends. "
        "Set provide.transaction.metadata=true on the Debezium connector (events from then on carry it)",
        source=source,
        table=str(row["table"]),
        xid=int(row["xid"]),
    )
