"""The Delta sink's large batches: time and peak memory of one batch of scattered keys (issue [7 of 7]).

A batch of more than 4,000 changed keys is committed by rewriting the key
range the keys span (a predicate listing them would be too long), and
scattered keys span the whole table. Per table size (rows shaped like
bench.join's output, files of 2 MB), one batch replacing ``--keys`` keys
drawn uniformly goes through :meth:`DeltaRsStore.replace_partitions`. Its
peak memory is the process's VmHWM above its RSS before the batch, each
measurement in a fresh process. The baseline, measured the same way, is
reading the whole table into memory (what the rewrite did before it went in
pieces). The memory target: the batch's peak does not grow with the table
(<= 1.5x from the smallest size to the largest), where the baseline's does.

The same batch is also committed with a key of two columns, (order_id,
region): past 4,000 keys it has no predicate either, and rewrites a range of
one of its columns (before, the whole table, read at once).

    .venv/bin/python -m bench.sink --sizes 4000000,16000000 --keys 5000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import Stat, machine, write_figures

ROWS_PER_COMMIT = 1_000_000


def _rows(ids: np.ndarray) -> pa.Table:
    return pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "amount": pa.array(np.round(np.random.default_rng(len(ids)).random(len(ids)), 2)),
        "note": pa.array([f"order {i} with a note of some length" for i in ids.tolist()]),
        "client": pa.array([f"client {i % 1000}" for i in ids.tolist()]),
        "region": pa.array(["north", "south", "east", "west"] * (len(ids) // 4) + ["north"] * (len(ids) % 4)),
    })  # fmt: skip


def _memory() -> tuple[int, int]:
    """(RSS, peak RSS) of this process in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def build(path: Path, n: int) -> None:
    """A table of ``n`` rows in key order, written by the sink (its files of 2 MB at most)."""
    from txjoin.sink.delta import DeltaRsStore

    store = DeltaRsStore()
    kw: dict[str, Any] = {"key": ["order_id"], "partition_cols": ["order_id"], "cut": {}, "app_id": "bench"}
    for i in range(0, n, ROWS_PER_COMMIT):
        ids = np.arange(i, min(n, i + ROWS_PER_COMMIT))
        parts = None if i == 0 else [[k] for k in ids.tolist()]  # new keys past the table
        store.replace_partitions(path, _rows(ids), partitions=parts, batch=i // ROWS_PER_COMMIT, **kw)


def child(path: Path, n: int, keys: int, what: str) -> dict[str, Any]:
    """One measurement in this (fresh) process: the batch, or the baseline's whole read."""
    from deltalake import DeltaTable

    from txjoin.sink.delta import DeltaRsStore

    store = DeltaRsStore()
    chosen = np.sort(np.random.default_rng(7).choice(n, keys, replace=False))
    rows = _rows(chosen)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM
    before, _ = _memory()
    t0 = time.monotonic()
    if what in ("batch", "pair"):
        cols = ["order_id"] if what == "batch" else ["order_id", "region"]
        parts = [list(k) for k in zip(*(rows.column(c).to_pylist() for c in cols), strict=True)]
        store.replace_partitions(
            path, rows, key=cols, partition_cols=cols, partitions=parts, cut={}, batch=10_000, app_id="bench",
        )  # fmt: skip
    else:
        DeltaTable(str(path)).to_pyarrow_table()
    seconds = time.monotonic() - t0
    _, peak = _memory()
    return {"seconds": seconds, "peak_over_mib": peak - before}


def _measure(path: Path, n: int, keys: int, what: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.sink", "--child", str(path), str(n), str(keys), what],
        capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode:
        tail = out.stderr[-3000:]
        sys.exit(f"bench.sink: the {what} on {n:,} rows failed (exit {out.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4000000,16000000", help="table sizes in rows, comma-separated")
    ap.add_argument("--keys", type=int, default=5000, help="scattered keys the batch replaces (> 4,000)")
    ap.add_argument("--runs", type=int, default=3, help="batches (and whole reads) per size")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, n, keys, what = args.child
        print(json.dumps(child(Path(path), int(n), int(keys), what)), flush=True)
        os._exit(0)  # delta-rs's threads can abort a normal exit (delta-io/delta-rs#2184)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {machine()}; a batch of {args.keys:,} scattered keys per table size", flush=True)
    figures: dict[str, Any] = {"keys": args.keys, "sizes": []}
    with tempfile.TemporaryDirectory(prefix="bench-sink-") as d:
        for n in sizes:
            path = Path(d) / f"t{n}"
            build(path, n)
            runs: dict[str, list[dict[str, Any]]] = {"batch": [], "pair": [], "whole_read": []}
            for _ in range(args.runs):  # alternating; each batch commits, the table keeps its size
                runs["whole_read"].append(_measure(path, n, args.keys, "read"))
                runs["batch"].append(_measure(path, n, args.keys, "batch"))
                runs["pair"].append(_measure(path, n, args.keys, "pair"))
            z: dict[str, Any] = {"rows": n}
            for w, rs in runs.items():
                for m in ("seconds", "peak_over_mib"):
                    z[f"{w}_{m}"] = [r[m] for r in rs]
            figures["sizes"].append(z)
            print(
                f"{n:>12,} rows: batch {Stat(z['batch_seconds']).fmt(' s', 2)}, peak above the process "
                f"{Stat(z['batch_peak_over_mib']).fmt(' MiB')}; with a two-column key "
                f"{Stat(z['pair_seconds']).fmt(' s', 2)}, {Stat(z['pair_peak_over_mib']).fmt(' MiB')}; "
                "baseline (reading the whole table) "
                f"{Stat(z['whole_read_seconds']).fmt(' s', 2)}, "
                f"{Stat(z['whole_read_peak_over_mib']).fmt(' MiB')}",
                flush=True,
            )
    small, large = figures["sizes"][0], figures["sizes"][-1]

    def growth(key: str) -> float:
        return float(statistics.median(large[key]) / max(1.0, statistics.median(small[key])))

    figures["peak_growth"] = growth("batch_peak_over_mib")
    figures["pair_peak_growth"] = growth("pair_peak_over_mib")
    figures["baseline_peak_growth"] = growth("whole_read_peak_over_mib")
    print(
        f"peak memory growth {sizes[0]:,} -> {sizes[-1]:,} rows: batch {figures['peak_growth']:.2f}x, "
        f"with a two-column key {figures['pair_peak_growth']:.2f}x (target <= 1.5x); baseline "
        f"{figures['baseline_peak_growth']:.2f}x",
        flush=True,
    )
    write_figures(args.json, figures)
    os._exit(0)


if __name__ == "__main__":
    main()
