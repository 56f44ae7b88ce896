"""A trigger's cost against the number of segment files in a topic (issue [7 of 7]).

Capture writes one segment file per topic per flush. Spark's file source
lists every file of every topic directory at each trigger (``latestOffset``)
and logs every name in its checkpoint; txjoin's changelog source
(:mod:`txjoin.changelog.stream`) finds the segments past the offset it has
reached in the topic's index (:mod:`txjoin.changelog.index`), which capture's
writer builds when it opens on the existing segments and appends to. This
measures both as a changelog ages: a topic directory holding N segment files
is read by a streaming query; once the first batch has taken the existing
files, capture's writer adds one segment every 1.5 s, and the median
``latestOffset`` and trigger time of the batches that carry them, and the
checkpoint's size, are reported per N and reader. Spark's file source (the
reader before) is the baseline.

    .venv/bin/python -m bench.listing --files 1000,10000,50000,200000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_figures
from txjoin.changelog import SEGMENT_GLOB, SegmentChangelog
from txjoin.changelog.stream import read_stream
from txjoin.session import spark_session


def _segment(topic: Path, offset: int) -> None:
    (topic / f"{offset:020d}-{offset:020d}.jsonl").write_text('{"ts_ms": 1}\n')


def _bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def latest_offset_s(spark: Any, files: int, probes: int, reader: str) -> tuple[float, float, int]:
    """Median seconds of ``latestOffset`` and of the trigger with ``files`` segments in the topic,
    and the checkpoint's bytes at the end; ``reader``: 'spark' (file source) or 'txjoin'."""
    work = Path(tempfile.mkdtemp(prefix="txjoin-bench-listing-"))
    try:
        topic = work / "changelog" / "s.public.t"
        topic.mkdir(parents=True)
        for i in range(files):
            _segment(topic, i)
        # New segments come from capture's writer, which opens on the existing ones (and
        # indexes them, as it does a changelog written before the index).
        writer = SegmentChangelog(work / "changelog")
        if reader == "spark":
            df = spark.readStream.format("text").option("pathGlobFilter", SEGMENT_GLOB).load(str(topic))
        else:
            df = read_stream(spark, work / "changelog", ["s"])
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime="250 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 600
            while sum(p["numInputRows"] for p in q.recentProgress) < files:  # the existing files
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the batches over the first {files} files did not finish in 600 s")
                time.sleep(0.5)
            first = len(q.recentProgress)
            for _ in range(probes):
                writer.append("s.public.t", b'{"ts_ms": 1}')
                writer.flush()
                time.sleep(1.5)
            progress = [p for p in q.recentProgress[first:] if p["numInputRows"]]
        finally:
            q.stop()
            writer.close()
        latest = statistics.median(p["durationMs"]["latestOffset"] / 1000 for p in progress)
        trigger = statistics.median(p["durationMs"]["triggerExecution"] / 1000 for p in progress)
        return float(latest), float(trigger), _bytes(work / "checkpoint")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", default="1000,10000,50000,200000", help="segment files per topic, comma list")
    ap.add_argument("--spark-max", type=int, default=50000, help="largest size read by Spark's file source")
    ap.add_argument("--probes", type=int, default=6, help="new segments measured per size")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    spark = spark_session("txjoin-bench-listing", cores=2, driver_memory="2g")
    print(f"machine: {machine()}")
    out: dict[str, Any] = {}
    for n in (int(x) for x in args.files.split(",")):
        for reader in ("spark", "txjoin") if n <= args.spark_max else ("txjoin",):
            latest, trigger, ck = latest_offset_s(spark, n, args.probes, reader)
            out[f"{reader}/{n}"] = {"latest_offset_s": latest, "trigger_s": trigger, "checkpoint_bytes": ck}
            print(
                f"  {n:>9,} segment files, {reader + ' reader:':<15} latestOffset median {latest:.3f} s, "
                f"trigger {trigger:.3f} s, checkpoint {ck / 1e6:.2f} MB",
                flush=True,
            )
    spark.stop()
    write_figures(args.json, out)


if __name__ == "__main__":
    main()
