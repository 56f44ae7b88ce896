"""Crashes of the Spark pipeline between the replica update and the output
commits (issue [3 of 5], acceptance 2).

The pipeline runs as ``txjoin run SPEC --once`` in a child process with
``TXJOIN_FAULT`` set, which SIGKILLs it at the chosen point: after the
micro-batch's replica changes are durable but before any output commit, and
after the first output's commit but before the second's. A restart from the
checkpoint must then finish the batch: no torn version (every version equals
the SQL on PostgreSQL at its cut), no duplicate commit (each batch id at
most once per output), nothing lost (the last version equals the source).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.support.capture import current_xid, execute, running_capture, wait_for_xids
from tests.support.oracle import Oracle, check_every_version
from tests.support.specs import write_spec
from txjoin.changelog import ChangelogReader
from txjoin.join.replica import ReplicaStore
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import load_spec
from txjoin.verify.compare import compare_rows
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE owners (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE accounts (id int PRIMARY KEY, owner_id int, balance bigint NOT NULL);
INSERT INTO owners SELECT g, 'owner ' || g FROM generate_series(1, 5) g;
INSERT INTO accounts SELECT g, 1 + g % 5, 100 FROM generate_series(1, 20) g;
"""
OUTPUTS = {
    # Outputs are committed in name order: 'balances' first, then 'total'.
    "balances": (
        ["account_id"],
        "SELECT accounts.id AS account_id, owners.name AS owner, accounts.balance "
        "FROM accounts LEFT JOIN owners ON owners.id = accounts.owner_id",
    ),
    "total": (["one"], "SELECT 1 AS one, sum(balance) AS total, count(*) AS n FROM accounts"),
}


def _spec_file(tmp: Path, dsn: str) -> Path:
    return write_spec(
        tmp / "crash.toml", name="crash", state_dir=tmp / "state", source="bank", dsn=dsn,
        tables=["public.owners", "public.accounts"], outputs=OUTPUTS,
    )  # fmt: skip


def _transactions(dsn: str, oracle: Oracle, n: int, seed: int) -> list[int]:
    conn = psycopg2.connect(dsn)
    xids = []
    for i in range(n):
        a, b = 1 + (seed * 7 + i * 3) % 20, 1 + (seed * 11 + i * 5) % 20
        with conn.cursor() as cur:
            xid = current_xid(cur)
            cur.execute("UPDATE accounts SET balance = balance - 7 WHERE id = %s", (a,))
            cur.execute("UPDATE accounts SET balance = balance + 7 WHERE id = %s", (b,))
            if i % 3 == 0:
                cur.execute("UPDATE accounts SET owner_id = %s WHERE id = %s", (1 + i % 5, b))
            if i % 4 == 1:
                cur.execute("UPDATE owners SET name = name || '+' WHERE id = %s", (1 + i % 5,))
        conn.commit()
        oracle.record(xid)
        xids.append(xid)
    conn.close()
    return xids


def _run_child(spec_path: Path, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TXJOIN_FAULT", None)
    if fault:
        env["TXJOIN_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "txjoin.cli", "run", str(spec_path), "--once", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _batches(path: Path) -> list[int]:
    return [c.batch for c in DeltaRsStore().history(path) if c.batch is not None]


def _last_batch(spec: Any) -> int:
    replicas = ReplicaStore(spec.replicas, [])
    try:
        return replicas.last_batch
    finally:
        replicas.close()


def _restart(spec: Any, spark: Any) -> None:
    pipeline = Pipeline(spec, spark)
    try:
        pipeline.run_available()
    finally:
        pipeline.close()


@pytest.mark.slow(75)
def test_crash_between_replica_update_and_output_commits(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    spec_path = _spec_file(tmp_path, pg_db)
    spec = load_spec(spec_path)
    oracle = Oracle(pg_db, {name: sql for name, (_, sql) in OUTPUTS.items()})
    paths = {name: spec.outputs[name].path for name in OUTPUTS}
    with running_capture(spec.sources["bank"].capture_config(spec.changelog, roll_interval=0.02)) as ct:
        oracle.record(read_transactions(ChangelogReader(spec.changelog), "bank")[0].xid)

        # The snapshot and a few transactions, no fault.
        wait_for_xids(spec.changelog, "bank", set(_transactions(pg_db, oracle, 5, seed=1)), ct)
        _restart(spec, spark)
        first = _batches(paths["balances"])
        assert first == _batches(paths["total"])
        assert len(first) == 1

        # A batch dies after its replica commit: no output has it yet.
        wait_for_xids(spec.changelog, "bank", set(_transactions(pg_db, oracle, 6, seed=2)), ct)
        child = _run_child(spec_path, "after-replica-commit")
        assert child.returncode == -9, child.stderr[-2000:]
        killed = _last_batch(spec)
        assert killed > first[0]
        assert {n: _batches(p) for n, p in paths.items()} == {"balances": first, "total": first}
        _restart(spec, spark)  # replays the killed batch from the replica store
        # (Batch ids are not consecutive: capture's heartbeat files make batches that release nothing.)
        after_first = [*first, killed]
        assert {n: _batches(p) for n, p in paths.items()} == {"balances": after_first, "total": after_first}

        # A batch dies after 'balances' committed it, before 'total' did.
        xids = _transactions(pg_db, oracle, 7, seed=3)
        wait_for_xids(spec.changelog, "bank", set(xids), ct)
        child = _run_child(spec_path, "after-output-commit")
        assert child.returncode == -9, child.stderr[-2000:]
        killed = _last_batch(spec)
        assert {n: _batches(p) for n, p in paths.items()} == {
            "balances": [*after_first, killed],
            "total": after_first,
        }
        _restart(spec, spark)
        # No second commit of the batch to 'balances'; 'total' got its own.
        final = [*after_first, killed]
        assert {n: _batches(p) for n, p in paths.items()} == {"balances": final, "total": final}

    store = DeltaRsStore()
    pipeline = Pipeline(spec, spark)
    pipeline.close()
    for name in OUTPUTS:
        pipeline_plan = pipeline.plans[name]
        assert check_every_version(pipeline_plan, paths[name], "bank", oracle.results[name]) == 3
        last = store.history(paths[name])[-1]
        assert last.cut["bank"].xid == xids[-1]
        diff = compare_rows(
            store.read(paths[name]).to_pylist(),
            oracle.query(name),
            pipeline_plan.columns,
            json_columns=pipeline_plan.json_columns,
        )
        assert not diff, diff.describe()
    oracle.close()
