"""What `txjoin run` shows while an initial load runs: rows read from the source (capture's
snapshot), applied to the replicas, and written by the first versions' Spark job, per table,
with rate and time left."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["load_status"]


def _n(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def _step(done: int, total: int, started: float) -> str:
    """'1.2M/10.0M rows (12%), 410k rows/s, 21 s left'."""
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = done / elapsed
    total = max(total, done)
    text = f"{_n(done)}/{_n(total)} rows ({100 * done / total:.0f}%)" if total else f"{_n(done)} rows"
    if rate > 0 and total > done:
        text += f", {_n(rate)} rows/s, {(total - done) / rate:.0f} s left"
    return text


def _spark_tasks(spark: Any) -> str:
    """Progress of Spark's running stages: '37/120 tasks'."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for sid in tracker.getActiveStageIds():
        info = tracker.getStageInfo(sid)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return f"{done}/{total} Spark tasks" if total else "starting Spark"


def load_status(captures: Any, pipeline: Any, spark: Any) -> str:
    """One line on the initial load, or "" once there is nothing to show."""
    parts = []
    for name, cap in (captures.captures.items() if captures is not None else []):
        p = cap.snapshot_progress
        if cap.streaming.is_set() or not p.estimated:
            continue
        read, estimated = sum(p.read.values()), sum(p.estimated.values())
        parts.append(f"{name}: snapshot read {_step(read, estimated, p.started)}")
    if pipeline is not None:
        lp = pipeline.join.progress
        if lp.phase == "apply":
            applied, total = sum(lp.applied.values()), sum(lp.total.values())
            parts.append(f"replicas loaded {_step(applied, total, lp.started)}")
        elif lp.phase == "recompute" and len(lp.written) < len(pipeline.plans):
            parts.append(f"first versions: {_spark_tasks(spark)}")
    return "; ".join(parts)
