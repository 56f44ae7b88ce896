"""Decode + assembly throughput on Spark beside read-and-decode only (issue [2 of 5]).

A changelog of N events is generated the way capture writes it (segments per
flush, transaction topic last), then two queries run over it in the same
Spark session with ``availableNow`` and ``maxFilesPerTrigger``:

- *limit*: read and decode every record, write nothing (``noop`` sink);
- *txjoin*: read, decode and assemble (``applyInPandasWithState``, one group
  per source), write the released rows to the ``noop`` sink.

Reports events/s (from the queries' own batch durations), txjoin/limit, and
per-batch latency p50/p99, for 1-3 and 100 events per transaction. With
``--million`` it also pushes one 1,000,000-row transaction through assembly
and reports the time and the Python workers' peak memory.

    .venv/bin/python -m bench.assemble --events 400000 --runs 3 --million
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench.common import Stat, machine, write_figures
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream, state_partitions
from txjoin.session import spark_session

SOURCE = "b"


def generate(root: Path, events: int, tx_min: int, tx_max: int, per_flush: int = 4000, seed: int = 1) -> int:
    """Write a changelog like capture's; return the number of change events."""
    rng = random.Random(seed)
    offsets: dict[str, int] = {}
    pending: dict[str, list[str]] = {}

    def emit(topic: str, line: str) -> None:
        pending.setdefault(topic, []).append(line)

    def flush() -> None:
        for topic in sorted(pending, key=lambda t: t.endswith(".transaction")):
            lines = pending[topic]
            if not lines:
                continue
            d = root / topic
            d.mkdir(parents=True, exist_ok=True)
            first = offsets.get(topic, 0)
            (d / f"{first:020d}-{first + len(lines) - 1:020d}.jsonl").write_text("\n".join(lines) + "\n")
            offsets[topic] = first + len(lines)
        pending.clear()

    lsn, prev_end, xid, n, since_flush = 10_000, 10_000, 1000, 0, 0
    # The snapshot unit comes first, as capture writes it (empty here).
    emit(
        f"{SOURCE}.transaction",
        json.dumps(
            {"status": "BEGIN", "id": f"999:{lsn}", "ts_ms": 1, "event_count": None, "data_collections": None}
        ),
    )
    emit(
        f"{SOURCE}.transaction",
        json.dumps(
            {"status": "END", "id": f"999:{lsn}", "ts_ms": 1, "event_count": 0, "data_collections": []}
        ),
    )
    while n < events:
        size = min(rng.randint(tx_min, tx_max), events - n)
        xid += 1
        counts: dict[str, int] = {}
        emit(
            f"{SOURCE}.transaction",
            json.dumps(
                {
                    "status": "BEGIN",
                    "id": f"{xid}:{lsn}",
                    "ts_ms": 1,
                    "event_count": None,
                    "data_collections": None,
                }
            ),
        )
        for i in range(size):
            lsn += 40
            table = "orders" if i % 2 == 0 else "lines"
            counts[f"public.{table}"] = counts.get(f"public.{table}", 0) + 1
            after = {
                "id": n + i,
                "customer": (n + i) % 997,
                "amount": f"{(n + i) % 10000 / 100:.2f}",
                "note": "order note",
                "items": [1, 2, 3],
            }
            emit(
                f"{SOURCE}.public.{table}",
                json.dumps(
                    {
                        "before": None,
                        "after": after,
                        "source": {
                            "version": "bench",
                            "connector": "postgresql",
                            "name": SOURCE,
                            "ts_ms": 1,
                            "snapshot": "false",
                            "db": "db",
                            "sequence": f'["{prev_end}","{lsn}"]',
                            "schema": "public",
                            "table": table,
                            "txId": xid,
                            "lsn": lsn,
                            "xmin": None,
                        },
                        "op": "c",
                        "ts_ms": 1,
                        "transaction": {
                            "id": f"{xid}:{lsn}",
                            "total_order": i + 1,
                            "data_collection_order": counts[f"public.{table}"],
                        },
                    },
                    separators=(",", ":"),
                ),
            )
        lsn += 40
        prev_end = lsn
        emit(
            f"{SOURCE}.transaction",
            json.dumps(
                {
                    "status": "END",
                    "id": f"{xid}:{lsn}",
                    "ts_ms": 1,
                    "event_count": size,
                    "data_collections": [{"data_collection": t, "event_count": c} for t, c in counts.items()],
                }
            ),
        )
        n += size
        since_flush += size
        if since_flush >= per_flush:
            flush()
            since_flush = 0
    flush()
    return n


def _run(
    spark: Any, root: Path, work: Path, assemble: bool, files_per_trigger: int, cfg: AssemblerConfig
) -> tuple[float, list[float], int]:
    rows = [0]

    def sink(batch: Any, batch_id: int) -> None:
        batch.write.format("noop").mode("overwrite").save()

    ck = work / ("ck-asm" if assemble else "ck-read")
    shutil.rmtree(ck, ignore_errors=True)
    # maxFilesPerTrigger must be set on the source: rebuild with it.
    df = read_events_with_limit(spark, root, files_per_trigger)
    if assemble:
        df = assemble_stream(df, cfg)
    # As the pipeline starts it: one state partition for the one source.
    with state_partitions(spark, 1):
        q = (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    durations = [
        p["durationMs"]["triggerExecution"] / 1000 for p in q.recentProgress if p["numInputRows"] > 0
    ]
    rows[0] = sum(p["numInputRows"] for p in q.recentProgress)
    return sum(durations), durations, rows[0]


def read_events_with_limit(spark: Any, root: Path, files_per_trigger: int) -> Any:
    """The pipeline's default reader (by offset, Spark's decoder) with a limit of files a trigger;
    ``TXJOIN_BENCH_ARROW_DECODER=1``: the reader that decodes with Arrow (``arrow_decoder``)."""
    from txjoin.changelog.stream import read_stream
    from txjoin.decode import decode, read_decoded

    if os.environ.get("TXJOIN_BENCH_ARROW_DECODER") == "1":
        return read_decoded(spark, root, [SOURCE], max_files=files_per_trigger)
    return decode(read_stream(spark, root, [SOURCE], max_files=files_per_trigger))


class WorkerMemory:
    """Peak resident memory of Spark's Python workers, sampled from /proc."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            total = 0
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"pyspark" not in cmd or (b"daemon" not in cmd and b"worker" not in cmd):
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                except OSError:
                    continue
            self.peak = max(self.peak, total)

    def __enter__(self) -> WorkerMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--files-per-trigger", type=int, default=12)
    ap.add_argument("--million", action="store_true", help="also push one 1,000,000-row transaction through")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    figures: dict[str, Any] = {}
    spark = spark_session("txjoin-bench-assemble", cores=2, driver_memory="6g")
    cfg = AssemblerConfig()
    print(f"machine: {machine()}")
    made: list[Path] = []
    for label, lo, hi in (("1-3 events/tx", 1, 3), ("100 events/tx", 100, 100)):
        work = Path(tempfile.mkdtemp(prefix="txjoin-bench-asm-"))
        made.append(work)
        try:
            root = work / "changelog"
            n = generate(root, args.events, lo, hi)
            read_rates, asm_rates, ratios, lat = [], [], [], []
            # Warm-up: the JVM's code paths and Spark's Python workers start once.
            _run(spark, root, work, False, args.files_per_trigger, cfg)
            _run(spark, root, work, True, args.files_per_trigger, cfg)
            for _ in range(args.runs):
                t_read, _, _ = _run(spark, root, work, False, args.files_per_trigger, cfg)
                t_asm, durations, _ = _run(spark, root, work, True, args.files_per_trigger, cfg)
                read_rates.append(n / t_read)
                asm_rates.append(n / t_asm)
                ratios.append(asm_rates[-1] / read_rates[-1])
                lat.extend(durations)
            lat.sort()
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            print(
                f"\n{label}: {n} events, {args.files_per_trigger} files per batch "
                f"({len(lat) // args.runs} batches)"
            )
            print(f"  read + decode only (limit): {Stat(read_rates).fmt(' events/s')}")
            print(f"  decode + assembly (txjoin): {Stat(asm_rates).fmt(' events/s')}")
            print(
                f"  txjoin / limit:             {Stat(ratios).fmt('', 2)}"
                "   target: >= 0.8"
            )
            print(f"  per-batch latency:          p50 {statistics.median(lat):.2f} s, p99 {p99:.2f} s")
            figures[label] = {
                "read_per_s": read_rates,
                "assemble_per_s": asm_rates,
                "ratio": ratios,
                "batch_p50_s": statistics.median(lat),
                "batch_p99_s": p99,
            }
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.million:
        work = Path(tempfile.mkdtemp(prefix="txjoin-bench-1m-"))
        made.append(work)
        try:
            root = work / "changelog"
            n = generate(root, 1_000_000, 1_000_000, 1_000_000, per_flush=50_000)
            with WorkerMemory() as mem:
                t_asm, durations, _ = _run(spark, root, work, True, 4, cfg)
            print(
                f"\none transaction of {n:,} rows: assembled and released in {t_asm:.1f} s over "
                f"{len(durations)} batches; Python workers' peak RSS {mem.peak / 2**20:,.0f} MiB "
                f"(max_transaction_events={cfg.max_transaction_events:,})"
            )
            figures["million"] = {"seconds": t_asm, "worker_peak_mib": mem.peak / 2**20}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    # The state store's maintenance writes RocksDB snapshots into stopped queries'
    # checkpoints up to a minute later, even removed ones: remove them again once it ended.
    for work in made:
        shutil.rmtree(work, ignore_errors=True)
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
