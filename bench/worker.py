"""The assembly operator's Python side per event, run the way PySpark's worker runs it.

No Spark session: decoded rows in Arrow chunks of 10,000 (Spark's
``arrow.maxRecordsPerBatch``) are converted to pandas, passed to txjoin's
``applyInPandasWithState`` function (:func:`txjoin.assemble.spark.state_function`),
and its output is padded and converted to Arrow with PySpark's own code, as
PySpark's worker does for that operator. Each batch holds ``--txs``
transactions of ``--per-tx`` changes, their BEGIN and their END. Not part of
``make bench``; for comparing two trees (bench/NOTES.md):

    .venv/bin/python -m bench.worker --txs 5000 --per-tx 3 --batches 12
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from txjoin.assemble.buffer import OUTPUT_COLUMNS, AssemblerConfig
from txjoin.assemble.spark import state_function
from txjoin.decode import EVENT_COLUMNS

CHUNK_ROWS = 10_000


class _State:
    """The part of PySpark's GroupState that the state function uses."""

    def __init__(self) -> None:
        self.exists = False
        self.get: Any = None

    def update(self, value: Any) -> None:
        self.get, self.exists = value, True


def _batch(b: int, txs: int, per_tx: int) -> list[pa.RecordBatch]:
    """Batch ``b``: one transaction-topic segment of BEGINs and ENDs, and the changes."""
    xid = 100_000 + b * txs + np.arange(txs)
    lsn = (b * txs + np.arange(txs)) * 1000 + 10
    off = b * 2 * txs

    def rows(n: int, **cols: Any) -> pd.DataFrame:
        absent = {c: (None if t == "object" else -1) for c, t in EVENT_COLUMNS.items()}
        return pd.DataFrame({**absent, "snapshot": "false", "ts_ms": 1, **cols}, index=range(n))

    seg = {"seg_first": off, "seg_last": off + 2 * txs - 1, "table": "."}
    begins = rows(txs, kind="begin", xid=xid, lsn=lsn, **seg)
    counts = {"event_count": per_tx, "dc_table": "public.orders", "dc_count": per_tx}
    ends = rows(txs, kind="end", xid=xid, lsn=lsn + 500, **counts, **seg)
    n = txs * per_tx
    order = np.tile(np.arange(1, per_tx + 1), txs)
    change_lsn = np.repeat(lsn, per_tx) + order
    text = [f'{{"before":null,"after":{{"id":{i},"note":"{"x" * 300}"}},"op":"u"}}' for i in range(n)]
    values = np.array(text, dtype=object)
    changes = rows(
        n, kind="change", xid=np.repeat(xid, per_tx), lsn=change_lsn, seq_prev=change_lsn - 1,
        total_order=order, dc_order=order, op="u", table="public.orders", value=values,
    )  # fmt: skip
    frame = pd.concat([changes, begins, ends], ignore_index=True).astype(EVENT_COLUMNS)
    frame.insert(0, "source", "s")
    chunks: list[pa.RecordBatch] = pa.Table.from_pandas(frame, preserve_index=False).to_batches(CHUNK_ROWS)
    return chunks


def _to_arrow(frames: list[pd.DataFrame]) -> pa.RecordBatch:
    """PySpark's conversion of the operator's output (the state columns left out)."""
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    fields = [StructField(c, LongType() if t == "int64" else StringType()) for c, t in OUTPUT_COLUMNS.items()]
    schema = StructType(fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PySpark's padding, deprecated by pandas
        merged = pd.concat([*frames, pd.DataFrame(dict.fromkeys(schema.names), index=[])], ignore_index=True)
    return PandasToArrowConversion.convert(
        [merged], StructType([StructField("_1", schema)]), timezone="UTC", safecheck=True, arrow_cast=True,
        assign_cols_by_name=True, int_to_decimal_coercion_enabled=False,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--txs", type=int, default=5000, help="transactions per batch")
    ap.add_argument("--per-tx", type=int, default=3, help="changes per transaction")
    ap.add_argument("--batches", type=int, default=12, help="batches measured (after 2 warm-up ones)")
    args = ap.parse_args()
    run = state_function(AssemblerConfig())
    state = _State()
    events = args.txs * (args.per_tx + 2)
    batches = [_batch(b, args.txs, args.per_tx) for b in range(args.batches + 2)]
    expected = args.txs * args.per_tx
    times = []
    for b, chunks in enumerate(batches):
        started = time.perf_counter()
        out = [f for f in run(("s",), (c.to_pandas() for c in chunks), state) if len(f)]
        released = _to_arrow(out)
        if b >= 2:
            times.append(time.perf_counter() - started)
        if released.num_rows != expected:
            raise SystemExit(f"batch {b}: released {released.num_rows} rows, expected {expected}")
    per_event = [t / events * 1e6 for t in times]
    print(
        f"{args.batches} batches of {events:,} events ({args.txs:,} transactions of {args.per_tx} changes): "
        f"{statistics.median(per_event):.2f} us an event (min {min(per_event):.2f}, max {max(per_event):.2f})"
    )


if __name__ == "__main__":
    main()
