"""Every Delta version equals the output's SQL on PostgreSQL at its cut
(issue [3 of 5], acceptance 1).

Each example: a random schema of three to five tables with foreign keys and
one output SQL over them (plain joins, aggregates per anchor row, per group,
or global; INNER and LEFT; json_agg with and without ORDER BY), initial rows
captured by the snapshot, then concurrent multi-statement transactions
(inserts, value updates, foreign-key updates, deletes, primary-key changes,
cascades, rollbacks) through real capture, the Spark query and Delta.
Micro-batches are triggered at random points by running the query from its
checkpoint over what the changelog holds (each trigger is also a restart).

The harness commits one transaction at a time and records the SQL's result
on PostgreSQL after every commit, keyed by xid. Every Delta version must
equal the recorded result at the xid its cut names, cuts never go back, and
the last version must equal the source's current result.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from hypothesis import example, given, note, settings

from tests.property.join_examples import PINNED
from tests.property.join_strategies import Case, TxPlan, cases, op_sql
from tests.support.capture import execute, running_capture, wait_for, wait_for_xids
from tests.support.oracle import Oracle, check_every_version
from tests.support.pg import drop_database
from tests.support.profiles import examples
from tests.support.workload import Driver
from txjoin.changelog import ChangelogReader
from txjoin.delta_sink import DeltaRsStore
from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.pipeline import Pipeline
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

_counter = itertools.count()


@contextlib.contextmanager
def scratch_database(server: EmbeddedPostgres) -> Iterator[str]:
    name = f"join_prop_{next(_counter)}"
    drop_database(server, name)
    dsn = server.create_database(name)
    try:
        yield dsn
    finally:
        drop_database(server, name)


def run_workload(dsn: str, case: Case, oracle: Oracle, on_commit: Any) -> list[int]:
    """Run the case's transactions; return the xids of committed transactions with changes."""
    driver = Driver(dsn, case.connections)
    for c in driver.conns:
        with c.cursor() as cur:
            # One thread drives every connection: a statement that waits for
            # another's lock would wait forever, so it fails and its
            # transaction rolls back (which must leave no trace).
            cur.execute("SET lock_timeout = '100ms'")
        c.commit()
    queue = list(enumerate(case.transactions))
    slots: dict[int, tuple[int, TxPlan, int]] = {}  # connection -> (tx index, plan, next op)
    schedule = iter(case.schedule)
    commits = 0
    try:
        while queue or slots:
            for conn in range(case.connections):
                if conn not in slots and queue:
                    i, plan = queue.pop(0)
                    slots[conn] = (i, plan, 0)
            conn = sorted(slots)[next(schedule, 0) % len(slots)]
            i, plan, step = slots[conn]
            if step < len(plan.ops):
                sql, args = op_sql(case.schema, plan.ops[step])
                try:
                    driver.run(conn, sql, args, table=f"t{plan.ops[step][1]}")
                except psycopg2.Error as e:
                    note(f"tx {i}: {type(e).__name__} on {sql} {args}: rolled back")
                    driver.rollback(conn)
                    del slots[conn]
                    continue
                slots[conn] = (i, plan, step + 1)
                continue
            del slots[conn]
            if plan.rollback:
                driver.rollback(conn)
                continue
            tx = driver.commit(conn)
            commits += 1
            if tx is not None:
                oracle.record(tx.xid)  # before the next commit: the state at this commit
            on_commit(commits, driver)
    finally:
        driver.close()
    return [tx.xid for tx in driver.committed]


def _load(dsn: str, case: Case) -> None:
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute(case.schema.ddl())
        for t, row in case.initial:
            sql, args = op_sql(case.schema, ("insert", t, row))
            cur.execute(sql, args)
    conn.commit()
    conn.close()


def check_case(case: Case, server: EmbeddedPostgres, spark: Any) -> None:
    schema = case.schema
    note(f"DDL:\n{schema.ddl()}\nSQL: {schema.sql()}\nkey: {schema.key()}")
    tmp = Path(tempfile.mkdtemp(prefix="txjoin-joinprop-"))
    try:
        with scratch_database(server) as dsn:
            _load(dsn, case)
            spec = build_spec(
                {
                    "name": "prop",
                    "state_dir": str(tmp / "state"),
                    "sources": {"src": {"dsn": dsn, "tables": schema.tables}},
                    "outputs": {"out": {"key": schema.key(), "sql": schema.sql()}},
                },
                tmp,
                "property test spec",
            )
            oracle = Oracle(dsn, {"out": schema.sql()})
            cfg = spec.sources["src"].capture_config(
                spec.changelog, roll_interval=0.02, heartbeat_interval=0.2
            )
            with running_capture(cfg) as ct:
                wait_for(lambda: bool(_ends(spec.changelog)), 30, "the snapshot")
                oracle.record(_ends(spec.changelog)[0])
                pipeline = Pipeline(spec, spark)

                def trigger(commits: int, driver: Driver) -> None:
                    if commits in case.triggers:
                        wait_for_xids(spec.changelog, "src", {tx.xid for tx in driver.committed}, ct)
                        pipeline.run_available()

                xids = run_workload(dsn, case, oracle, trigger)
                wait_for_xids(spec.changelog, "src", set(xids), ct)
                pipeline.run_available()
            plan = pipeline.plans["out"]
            path = spec.outputs["out"].path
            versions = check_every_version(plan, path, "src", oracle.results["out"])
            note(f"{versions} Delta versions checked, {len(xids)} transactions committed")
            got = DeltaRsStore().read(path).to_pylist()
            diff = compare_rows(
                got,
                oracle.query("out"),
                plan.columns,
                json_columns=plan.json_columns,
                unordered_columns=plan.unordered_columns,
            )
            assert not diff, f"the last version differs from the source's current result:\n{diff.describe()}"
            oracle.close()
            pipeline.store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ends(changelog: Path) -> list[int]:
    if not (changelog / "src.transaction").exists():
        return []
    return [e.xid for e in read_transactions(ChangelogReader(changelog), "src")]


def _pinned(test: Any) -> Any:
    for _, case in reversed(PINNED):
        test = example(case=case)(test)
    return test


@settings(max_examples=examples(ci=25, thorough=200))
@given(case=cases())
@_pinned
def test_every_delta_version_equals_the_sql_on_postgresql(
    case: Case, pg_server: EmbeddedPostgres, spark: Any
) -> None:
    check_case(case, pg_server, spark)


def test_harness_catches_a_torn_version(pg_server: EmbeddedPostgres, spark: Any, tmp_path: Path) -> None:
    """The oracle check is not vacuous: a version whose cut names an earlier
    transaction than its content reflects is reported."""
    with scratch_database(pg_server) as dsn:
        execute(dsn, "CREATE TABLE t0 (id int PRIMARY KEY, v int)")
        oracle = Oracle(dsn, {"out": "SELECT id AS k0, v AS v0 FROM t0"})
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t0 VALUES (1, 1)")
        conn.commit()
        oracle.record(100)
        with conn.cursor() as cur:
            cur.execute("UPDATE t0 SET v = 2")
        conn.commit()
        oracle.record(101)
        conn.close()
        from deltalake import CommitProperties, write_deltalake

        from txjoin.join.plan import TableInfo, plan_output
        from txjoin.pg.names import QualifiedName

        rows = oracle.query("out")
        import pyarrow as pa

        path = tmp_path / "out"
        write_deltalake(
            str(path),
            pa.Table.from_pylist(rows),
            commit_properties=CommitProperties(
                custom_metadata={"txjoin.cut": '{"src": {"lsn": 1, "xid": 100}}'}
            ),
        )
        t0 = QualifiedName("public", "t0")
        plan = plan_output(
            "out",
            "SELECT id AS k0, v AS v0 FROM t0",
            ["k0"],
            {t0: TableInfo(t0, "src", ("id", "v"), ("id",))},
        )
        with pytest.raises(AssertionError, match="differs"):
            check_every_version(plan, path, "src", oracle.results["out"])
        oracle.close()
