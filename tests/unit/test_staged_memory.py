"""A staged transaction larger than the replica store's memory limit applies.

The join stage applies a staged (large) transaction in chunks inside one
replica transaction (``JoinStage._apply_staged``). DuckDB keeps a
transaction's in-place updates in memory until it commits, so updating rows
in place made a transaction's total size, not its chunk size, meet the memory
limit: 500,000 updates of 4 KB rows ran out of memory at a 1.1 GB limit. Here
the same at a small scale: 96 MB of updated rows against a 64 MB limit,
through the store's real DuckDB.

Outside DuckDB's limit, the process must not keep the chunks either: a view
made with DuckDB's ``register`` keeps its Arrow table alive until the
transaction ends, even once unregistered, so the driver's memory grew with
the transaction (5.4 GiB at 889,000 rows of 4 KB). The store passes Arrow
data by replacement scan instead; the Arrow memory held after each chunk
stays flat.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from txjoin.join.changes import Change, batch_of, parse_released
from txjoin.join.replica import ReplicaStore, TableSpec
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

T = QualifiedName("public", "docs")
SPEC = TableSpec(T, ("id",), (("id", ColumnType(23, "int4")), ("note", ColumnType(25, "text"))))
ROWS, WIDTH, XID = 24_000, 4000, 9


def _events(ids: range) -> pd.DataFrame:
    value = [json.dumps({"before": None, "after": {"id": i, "note": f"{i:08d}" * (WIDTH // 8)}, "op": "u"})
             for i in ids]  # fmt: skip
    return pd.DataFrame(
        {"source": "s", "xid": XID, "total_order": list(ids), "lsn": [10_000 + i for i in ids], "op": "u",
         "table": str(T), "value": value}
    )  # fmt: skip


def test_a_staged_transaction_larger_than_the_memory_limit_applies_whole(tmp_path: Path) -> None:
    store = ReplicaStore(tmp_path / "r.duckdb", [SPEC], memory_limit="64MB", threads=1)
    try:
        store.begin()
        rows = [Change(T, "c", 100, i, None, {"id": i, "note": "short"}, 1) for i in range(1, ROWS + 1)]
        store.apply({T: batch_of(SPEC, rows)})
        store.commit(1, {}, {})
        for start in range(1, ROWS + 1, 500):  # staged as micro-batches bring it: 2 MB at a time
            store.begin()
            store.stage(_events(range(start, min(ROWS, start + 499) + 1)))
            store.commit(2, {}, {})
        store.begin()
        applied, held, base = 0, [], pa.total_allocated_bytes()
        for chunk in store.staged("s", XID, 250_000, chunk_bytes=2 << 20):
            chunk = chunk.assign(source="s", commit_lsn=20_000, commit_ts_ms=0, tx_seq=3)
            parsed = parse_released(chunk, store.tables, {T: {"note"}})
            store.apply(parsed, bulk=True)
            applied += len(chunk)
            del chunk, parsed
            held.append(pa.total_allocated_bytes() - base)
        # Nothing of the applied chunks stays (with views made by register(), all 92 MiB did).
        assert max(held) < 16 << 20, f"Arrow memory held after each chunk (MiB): {[h >> 20 for h in held]}"
        store.unstage("s", XID)
        store.commit(3, {}, {})
        assert applied == ROWS
        notes = store.all_rows(T).to_pydict()
        assert len(notes["id"]) == ROWS
        assert all(n == f"{i:08d}" * (WIDTH // 8) for i, n in zip(notes["id"], notes["note"], strict=True))
    finally:
        store.close()
