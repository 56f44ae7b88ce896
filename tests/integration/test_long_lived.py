"""A pipeline that lives for months: outputs exist from the snapshot on even
over empty tables, and the watchdog stops ``txjoin run`` when the streaming
query stops on its own or makes no progress, instead of idling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.errors import PipelineStalled
from txjoin.join.batch import BatchStats
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows

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
            # Stop between batches: a stop during one cancels its Spark jobs, which is a
            # different case (the batch fails) from a query that ends on its own.
            deadline = time.monotonic() + 60
            while not pipeline.history or pipeline.query.status["isTriggerActive"]:
                assert time.monotonic() < deadline, "the first batch did not finish in 60 s"
                pipeline.check()
                time.sleep(0.1)
            pipeline.check()  # running: nothing to say
            pipeline.query.stop()  # as if Spark ended it without an exception
            error = _until_raised(pipeline, 10)
            assert "stopped without an error" in str(error)
        finally:
            pipeline.close()


def test_a_replayed_batch_follows_the_spec_it_restarts_with(spark: Any, pg_db: str, tmp_path: Path) -> None:
    """A batch killed after its replica commit is replayed under a changed spec: the
    removed output is left as it is (no KeyError), the output whose SQL changed is
    rebuilt in full at the batch's cut with the new SQL (not the old batch's partitions)."""
    from tests.integration.test_pipeline_crash import (
        OUTPUTS as CRASH_OUTPUTS,
    )
    from tests.integration.test_pipeline_crash import (
        SCHEMA,
        _batches,
        _last_batch,
        _run_child,
        _spec_file,
        _transactions,
    )
    from tests.support.oracle import Oracle
    from txjoin.changelog import ChangelogReader
    from txjoin.spec import load_spec
    from txjoin.verify.compare import compare_rows
    from txjoin.verify.replay import read_transactions

    execute(pg_db, SCHEMA)
    spec_path = _spec_file(tmp_path, pg_db)
    spec = load_spec(spec_path)
    oracle = Oracle(pg_db, {name: sql for name, (_, sql) in CRASH_OUTPUTS.items()})
    paths = {name: spec.outputs[name].path for name in CRASH_OUTPUTS}
    with running_capture(spec.sources["bank"].capture_config(spec.changelog, roll_interval=0.02)) as ct:
        oracle.record(read_transactions(ChangelogReader(spec.changelog), "bank")[0].xid)
        wait_for_xids(spec.changelog, "bank", set(_transactions(pg_db, oracle, 4, seed=1)), ct)
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
        finally:
            pipeline.close()
        first = _batches(paths["balances"])
        wait_for_xids(spec.changelog, "bank", set(_transactions(pg_db, oracle, 5, seed=2)), ct)
        child = _run_child(spec_path, "after-replica-commit")
        assert child.returncode == -9, child.stderr[-2000:]
        killed = _last_batch(spec)

        # The spec changes while the batch is pending: 'balances' removed, 'total' gains a column.
        new_sql = "SELECT 1 AS one, sum(balance) AS total, count(*) AS n, max(balance) AS top FROM accounts"
        text = spec_path.read_text()
        head, _, _ = text.partition("[outputs.balances]")
        spec_path.write_text(head + f'[outputs.total]\nkey = ["one"]\nsql = """{new_sql}"""\n')
        changed = load_spec(spec_path)
        pipeline = Pipeline(changed, spark)
        try:
            pipeline.run_available()  # replays the killed batch
            plan = pipeline.plans["total"]
        finally:
            pipeline.close()
    assert _batches(paths["balances"]) == first, "a removed output's table is left as it is"
    # The replayed batch's version is the new SQL's, whole (a later batch may rebuild once more).
    history = DeltaRsStore().history(paths["total"])
    assert [c.batch for c in history][: len(first) + 1] == [*first, killed]
    replayed = next(c.version for c in history if c.batch == killed)
    assert set(DeltaRsStore().read(paths["total"], replayed).column_names) == {"one", "total", "n", "top"}
    got = DeltaRsStore().read(paths["total"]).to_pylist()
    expected = query(pg_db, new_sql)  # nothing committed since the killed batch: its cut is now
    assert not (diff := compare_rows(got, expected, plan.columns)), diff.describe()
    assert set(got[0]) == {"one", "total", "n", "top"}
    oracle.close()


def test_a_value_the_join_stage_cannot_read_holds_its_outputs_until_fixed(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    """1::numeric/3 (20 decimals) in an unconstrained numeric column: the output reading it
    holds at its last version (no version PostgreSQL would not give), other outputs go on,
    a restart does not wedge, and the output catches up once the source fixes the value."""
    execute(
        pg_db,
        "CREATE TABLE vals (id int PRIMARY KEY, v numeric); CREATE TABLE other (id int PRIMARY KEY, w int);"
        "INSERT INTO vals VALUES (1, 1.5), (2, 2)",
    )
    outputs = {
        "vals": {"key": ["id"], "sql": "SELECT x.id, x.v FROM vals x"},
        "other": {"key": ["id"], "sql": "SELECT o.id, o.w FROM other o"},
    }
    raw = {
        "name": "held",
        "state_dir": str(tmp_path / "state"),
        "sources": {"s": {"dsn": pg_db, "tables": ["public.vals", "public.other"]}},
        "outputs": outputs,
    }
    spec = build_spec(raw, tmp_path, "held spec")
    delta = DeltaRsStore()
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def run() -> list[BatchStats]:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            return pipeline.history
        finally:
            pipeline.close()

    with running_capture(config) as ct:
        run()
        before = len(delta.history(spec.outputs["vals"].path))
        bad = commit(pg_db, "UPDATE vals SET v = 1::numeric / 3 WHERE id = 1")
        w = commit(pg_db, "INSERT INTO other VALUES (1, 10)")
        wait_for_xids(spec.changelog, "s", {bad, w}, ct)
        history = run()  # no exception: the output holds
        assert any("vals" in b.held for b in history)
        assert len(delta.history(spec.outputs["vals"].path)) == before
        assert delta.read(spec.outputs["other"].path).to_pylist() == [{"id": 1, "w": 10}]
        run()  # a restart does not wedge
        fixed = commit(pg_db, "UPDATE vals SET v = 0.5 WHERE id = 1")
        wait_for_xids(spec.changelog, "s", {fixed}, ct)
        run()
    versions = delta.history(spec.outputs["vals"].path)
    assert len(versions) > before
    assert versions[-1].cut["s"].xid >= fixed
    assert all(v.cut["s"].xid != bad for v in versions), "no version at the unreadable value's cut"
    got = delta.read(spec.outputs["vals"].path).to_pylist()
    expected = query(pg_db, "SELECT x.id, x.v FROM vals x")
    assert not (diff := compare_rows(got, expected, ("id", "v"))), diff.describe()


def test_added_and_changed_outputs_are_built_at_the_current_cut_on_start(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    """A restart with an output added and another's SQL changed builds both from the
    replicas at their current cut, each in one commit, before any new change arrives."""
    spec = _spec(pg_db, tmp_path)
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config) as ct:
        xids = {commit(pg_db, "INSERT INTO a VALUES (1, 5), (2, 7)", "INSERT INTO b VALUES (1, 1), (2, 1)")}
        wait_for_xids(spec.changelog, "s", xids, ct)
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            cut = pipeline.store.cuts()["s"]
        finally:
            pipeline.close()
    delta = DeltaRsStore()
    totals = len(delta.history(spec.outputs["total"].path))
    total_sql = "SELECT count(*) AS n, sum(a.v) AS s, max(a.v) AS top FROM a"
    bs_sql = "SELECT b.id, b.a_id FROM b"
    raw = {
        "name": "months",
        "state_dir": str(tmp_path / "state"),
        "sources": {"s": {"dsn": pg_db, "tables": ["public.a", "public.b"]}},
        "outputs": {
            "total": {"key": ["n"], "sql": total_sql},
            "per_a": OUTPUTS["per_a"],
            "bs": {"key": ["id"], "sql": bs_sql},
        },
    }
    changed = build_spec(raw, tmp_path, "changed spec")
    Pipeline(changed, spark).close()  # no capture, no new change: the start alone builds them
    for name, sql in (("total", total_sql), ("bs", bs_sql)):
        path = changed.outputs[name].path
        last = delta.history(path)[-1]
        assert last.cut["s"].xid == cut.xid, f"{name} is built at the replicas' cut"
        got = delta.read(path).to_pylist()
        cols = tuple(got[0]) if got else ()
        assert not (diff := compare_rows(got, query(pg_db, sql), cols)), diff.describe()
    assert len(delta.history(changed.outputs["total"].path)) == totals + 1, "one commit for the rebuild"
    assert len(delta.history(changed.outputs["bs"].path)) == 1
    # Built once: a second start builds nothing more.
    Pipeline(changed, spark).close()
    assert len(delta.history(changed.outputs["total"].path)) == totals + 1
