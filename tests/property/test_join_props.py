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
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from hypothesis import example, given, note, settings

from tests.property.join_examples import PINNED
from tests.property.join_strategies import Case, cases, op_sql
from tests.support.capture import execute
from tests.support.pg import drop_database
from tests.support.profiles import examples
from txjoin.check.harness import Statement, TxPlan, Workload, run_check
from txjoin.join.plan import TableInfo, plan_output
from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.pg.names import QualifiedName
from txjoin.spec import build_spec
from txjoin.verify.oracle import oracle_for
from txjoin.verify.versions import check_versions

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


def _load(dsn: str, case: Case) -> None:
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute(case.schema.ddl())
        for t, row in case.initial:
            sql, args = op_sql(case.schema, ("insert", t, row))
            cur.execute(sql, args)
    conn.commit()
    conn.close()


def workload(case: Case) -> Workload:
    return Workload(
        transactions=tuple(
            TxPlan("src", tuple(Statement(*op_sql(case.schema, op)) for op in tx.ops), tx.rollback)
            for tx in case.transactions
        ),
        connections=case.connections,
        schedule=case.schedule,
        triggers=case.triggers,
    )


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
            result = run_check(spec, spark, workload(case))
            note(f"{result.versions} Delta versions checked, {result.committed} transactions committed")
            assert result.ok, "\n".join(str(v) for v in result.violations)
            assert result.versions["out"] >= 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pinned(test: Any) -> Any:
    for _, case in reversed(PINNED):
        test = example(case=case)(test)
    return test


@pytest.mark.slow(130)
@settings(max_examples=examples(ci=18, thorough=200))
@given(case=cases())
@_pinned
def test_every_delta_version_equals_the_sql_on_postgresql(
    case: Case, pg_server: EmbeddedPostgres, spark: Any
) -> None:
    check_case(case, pg_server, spark)


def test_version_check_reports_a_torn_version(pg_server: EmbeddedPostgres, tmp_path: Path) -> None:
    """The check is not vacuous: a version whose content is newer than the
    transaction its cut names is reported, and so is a cut going back."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    with scratch_database(pg_server) as dsn:
        execute(dsn, "CREATE TABLE t0 (id int PRIMARY KEY, v int)")
        sql = "SELECT id AS k0, v AS v0 FROM t0"
        spec = build_spec(
            {
                "name": "meta",
                "state_dir": str(tmp_path / "state"),
                "sources": {"src": {"dsn": dsn, "tables": ["t0"]}},
                "outputs": {"out": {"key": ["k0"], "sql": sql}},
            },
            tmp_path,
            "meta test spec",
        )
        t0 = QualifiedName("public", "t0")
        plans = {"out": plan_output("out", sql, ["k0"], {t0: TableInfo(t0, "src", ("id", "v"), ("id",), {"id": "int4", "v": "int4"})})}
        oracle = oracle_for(spec, plans)
        conn = psycopg2.connect(dsn)
        for xid, stmt in ((100, "INSERT INTO t0 VALUES (1, 1)"), (101, "UPDATE t0 SET v = 2")):
            with conn.cursor() as cur:
                cur.execute(stmt)
            with oracle.commit("src", xid):
                conn.commit()
        conn.close()
        path = spec.outputs["out"].path
        for lsn, xid in ((5, 101), (4, 100)):  # content of 101 both times; the second cut goes back
            write_deltalake(
                str(path),
                pa.Table.from_pylist(oracle.current("out")),
                mode="overwrite",
                commit_properties=CommitProperties(
                    custom_metadata={"txjoin.cut": json.dumps({"src": {"lsn": lsn, "xid": xid}})}
                ),
            )
        versions, violations = check_versions(plans, spec, oracle)
        oracle.close()
    assert versions == {"out": 2}
    assert [(v.version, v.detail.splitlines()[0]) for v in violations] == [
        (1, "the cut of source src went back"),
        (1, "differs from the SQL on PostgreSQL:"),
    ]
