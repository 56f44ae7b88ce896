"""An output's Delta commit against the age of its log (issue [7 of 7]; not in ``make bench``).

delta-rs lists the whole ``_delta_log`` directory of a local table at every
commit, so a commit's cost grows with the versions the log keeps. An output
commits once a micro-batch, and every ``idle_commit_interval`` (2 s) when
nothing changed; Delta keeps 30 days of log by default. This commits one-row
batches through :class:`~txjoin.sink.delta.DeltaRsStore` (what the pipeline
does) and reports the median commit at each mark, against the same table at
its first mark (the baseline, same run), in two runs:

- *30 days* (Delta's default, what txjoin kept before): every commit stays
  in the log for the whole run;
- *retention*: a retention of ``--retention`` seconds, short enough for the
  run to pass it many times, stands for the default 10 minutes of a pipeline
  that has run longer than that: expired entries go at each checkpoint (every
  100 commits), so the log stays at about the commits of one window.

    .venv/bin/python -m bench.delta_log --marks 100,1000,4000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import machine, write_figures
from txjoin.cut import Cut
from txjoin.sink.delta import DeltaRsStore


def _commit(store: DeltaRsStore, path: Path, batch: int) -> float:
    rows = pa.table({"id": pa.array([batch % 1000], pa.int64()), "v": [f"b{batch}"]})
    t0 = time.perf_counter()
    store.replace_partitions(
        path, rows, key=["id"], partition_cols=["id"], partitions=[[batch % 1000]],
        cut={"s": Cut(batch)}, batch=batch, app_id="bench",
    )  # fmt: skip
    return time.perf_counter() - t0


def run(retention: str, marks: list[int], probes: int) -> dict[int, tuple[float, int]]:
    """Per mark: the median of ``probes`` commits after it, and the log's files then."""
    root = Path(tempfile.mkdtemp(prefix="txjoin-bench-delta-log-"))
    path = root / "out"
    try:
        store = DeltaRsStore(log_retention=retention)
        store.replace_partitions(
            path, pa.table({"id": pa.array(range(1000), pa.int64()), "v": ["a"] * 1000}),
            key=["id"], partition_cols=["id"], partitions=None, cut={"s": Cut(0)}, batch=0, app_id="bench",
        )  # fmt: skip
        out: dict[int, tuple[float, int]] = {}
        batch = 1
        for mark in marks:
            while batch < mark:
                _commit(store, path, batch)
                batch += 1
            times = []
            for _ in range(probes):
                times.append(_commit(store, path, batch))
                batch += 1
            out[mark] = (statistics.median(times), len(list((path / "_delta_log").iterdir())))
            print(
                f"  {retention:<22} after {mark:>6,} commits: commit median {out[mark][0] * 1000:.1f} ms, "
                f"{out[mark][1]:,} files in _delta_log",
                flush=True,
            )
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--marks", default="100,1000,4000", help="commits before each measurement, comma list")
    ap.add_argument("--probes", type=int, default=40, help="commits measured at each mark")
    ap.add_argument("--retention", type=int, default=5, help="seconds of log the short-retention run keeps")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    marks = [int(x) for x in args.marks.split(",")]
    print(f"machine: {machine()}; one-row commits, medians of {args.probes} per mark")
    out: dict[str, Any] = {}
    runs = {"30 days": "interval 30 days", "retention": f"interval {args.retention} seconds"}
    for name, retention in runs.items():
        got = run(retention, marks, args.probes)
        out[name] = {str(m): {"commit_s": s, "log_files": n} for m, (s, n) in got.items()}
    for name in out:
        first, last = out[name][str(marks[0])], out[name][str(marks[-1])]
        print(
            f"{name}: commit at {marks[-1]:,} commits / at {marks[0]:,}: "
            f"{last['commit_s'] / first['commit_s']:.2f}x ({last['log_files']:,} log files)"
        )
    write_figures(args.json, out)


if __name__ == "__main__":
    main()
