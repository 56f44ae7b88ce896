"""A pipeline that lives for months: outputs exist from the snapshot on even
over empty tables, and the watchdog stops ``txjoin run`` when the streaming
query stops on its own or makes no progress, instead of idling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, running_capture, wait_for_xids
from txjoin.errors import PipelineStalled
from txjoin.join.batch import BatchStats
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

OUTPUTS = {
    "total": {"key": ["n"], "sql": "SELECT count(*) AS n, sum(a.v) AS s FROM a"},
    "per_a": {
        "key": ["id"],
        "sql": "SELECT a.id, count(b.id) AS k FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id",
    },
}


def _spec(pg_db: str, tmp_path: Path, **options: Any) -> Any:
    execute(
        pg_db, "CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY, a_id int)"
    )
    raw = {
        "name": "months",
        "state_dir": str(tmp_path / "state"),
        "sources": {"s": {"dsn": pg_db, "tables": ["public.a", "public.b"]}},
        "outputs": OUTPUTS,
        "options": options,
    }
    return build_spec(raw, tmp_path, "months spec")


def test_outputs_exist_at_the_snapshot_over_empty_tables(spark: Any, pg_db: str, tmp_path: Path) -> None:
    spec = _spec(pg_db, tmp_path)
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config):
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
        finally:
            pipeline.close()
    delta = DeltaRsStore()
    # A global count over no rows is one row (0, NULL); the LEFT JOIN is empty, but exists.
    assert delta.read(spec.outputs["total"].path).to_pylist() == [{"n": 0, "s": None}]
    assert delta.read(spec.outputs["per_a"].path).num_rows == 0
    for name in OUTPUTS:
        first = delta.history(spec.outputs[name].path)[0]
        assert first.cut["s"].xid > 0, f"{name}'s first version carries the snapshot's cut"


def _until_raised(pipeline: Pipeline, seconds: float) -> PipelineStalled:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pipeline.check()
        except PipelineStalled as e:
            return e
        time.sleep(0.2)
    raise AssertionError(f"the watchdog did not fire within {seconds} s")


def test_watchdog_stops_a_query_that_makes_no_progress(spark: Any, pg_db: str, tmp_path: Path) -> None:
    spec = _spec(pg_db, tmp_path, stall_timeout=3, trigger_interval="0.2 seconds")
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def slow(b: BatchStats) -> None:
        if b.transactions:
            time.sleep(12)  # a micro-batch stuck well past stall_timeout

    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark, on_batch=slow)
        try:
            pipeline.run_available()  # the snapshot
            pipeline.start()
            wait_for_xids(spec.changelog, "s", {commit(pg_db, "INSERT INTO a VALUES (1, 5)")}, ct)
            error = _until_raised(pipeline, 60)
            assert "no progress for" in str(error)
            assert "a micro-batch running" in str(error)
            assert "stall_timeout" in str(error)
        finally:
            pipeline.close()


def test_watchdog_stops_when_the_query_stops_on_its_own(spark: Any, pg_db: str, tmp_path: Path) -> None:
    spec = _spec(pg_db, tmp_path, trigger_interval="0.2 seconds")
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config):
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.start()
            time.sleep(1)
            pipeline.check()  # running: nothing to say
            pipeline.query.stop()  # as if Spark ended it without an exception
            error = _until_raised(pipeline, 10)
            assert "stopped without an error" in str(error)
        finally:
            pipeline.close()
