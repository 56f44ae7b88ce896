"""kill -9 during the initial load and during a large transaction (issue [2 of 7], acceptance 5).

Capture and the pipeline run as child processes (``txjoin capture``,
``txjoin run --once``) with ``TXJOIN_FAULT`` set, which SIGKILLs them at the
chosen point: while the snapshot's chunks are written, while its files are
loaded into the replicas, after Spark wrote a first version's files but
before Delta commits them; then, for a transaction updating every order
(staged, applied in chunks), while its chunks are applied and before its
full recompute is committed. After restarts: every version equals the SQL on
PostgreSQL at its cut (the total moves by the whole transaction at one
version, or not at all), each batch is committed at most once per output,
no key twice, and the last versions equal the source.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from tests.support.capture import current_xid, execute, query, running_capture, wait_for_xids
from tests.support.profiles import THOROUGH
from tests.support.specs import write_spec
from txjoin.changelog import ChangelogReader
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import load_spec
from txjoin.verify.compare import compare_rows
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

ORDERS, CLIENTS = 30_000, 1_500
OUTPUTS = {
    "enriched": (
        ["order_id"],
        "SELECT o.id AS order_id, o.amount, c.name AS client FROM orders o JOIN clients c ON c.id = o.client_id",
    ),
    "total": (["one"], "SELECT 1 AS one, sum(amount) AS total, count(*) AS n FROM orders"),
}
# Faults per phase, in order: each restart must still have the work the next
# point interrupts (after-output-commit: the first of the two outputs is in,
# the next restart writes the second). make test-thorough tries 10 points.
LOAD_FAULTS = (
    ["load-file@1", "load-file@2", "full-files-written@1", "after-output-commit@1", "full-files-written@1"]
    if THOROUGH
    else ["load-file@1"]  # make test: full-files-written@1 comes in the large transaction's faults
)
BIG_FAULTS = (
    ["staged-chunk@1", "staged-chunk@2", "full-files-written@1", "after-output-commit@1"]
    if THOROUGH
    else ["staged-chunk@2", "full-files-written@1"]
)


def _spec_file(tmp: Path, dsn: str) -> Path:
    options = {
        "distributed_rows": 1000,  # the first versions and the large transaction: Spark jobs
        "stage_transaction_events": 2000,
        "stage_chunk_rows": 5000,
        "max_batch_bytes": 1000000,
    }
    return write_spec(
        tmp / "bigload.toml", name="bigload", state_dir=tmp / "state", source="shop", dsn=dsn,
        tables=["public.orders", "public.clients"], outputs=OUTPUTS, options=options,
    )  # fmt: skip


def _child(args: list[str], fault: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TXJOIN_FAULT", None)
    if fault:
        env["TXJOIN_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "txjoin.cli", *args], env=env, capture_output=True, text=True, timeout=600
    )


def _crash(spec_path: Path, faults: list[str]) -> None:
    for fault in faults:
        r = _child(["run", str(spec_path), "--once", "--quiet"], fault)
        assert r.returncode == -9, f"{fault}: expected a SIGKILL, got {r.returncode}:\n{r.stderr[-3000:]}"


@pytest.mark.slow(150)
def test_kill_9_during_the_initial_load_and_a_large_transaction(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE clients (id int PRIMARY KEY, name text);"
        "CREATE TABLE orders (id bigint PRIMARY KEY, client_id int, amount numeric(12,2));"
        f"INSERT INTO clients SELECT g, 'client ' || g FROM generate_series(1, {CLIENTS}) g;"
        f"INSERT INTO orders SELECT g, 1 + g % {CLIENTS}, (g % 1000) / 100.0 FROM generate_series(1, {ORDERS}) g;",
    )
    spec_path = _spec_file(tmp_path, pg_db)
    spec = load_spec(spec_path)
    expected = {name: query(pg_db, sql) for name, (_, sql) in OUTPUTS.items()}

    # The snapshot: capture killed after its first chunk, then run again.
    capture = ["capture", "--dsn", pg_db, "--tables", "public.orders,public.clients", "--changelog",
               str(spec.changelog), "--source", "shop", "--quiet"]  # fmt: skip
    r = _child(capture, "snapshot-chunk@1")
    assert r.returncode == -9, r.stderr[-3000:]
    config = spec.sources["shop"].capture_config(spec.changelog, roll_interval=0.02, roll_bytes=256 << 10)
    with running_capture(config) as ct:
        snapshot = read_transactions(ChangelogReader(spec.changelog), "shop")[0]
        assert snapshot.manifest is not None

        # The initial load, killed at each point. The run after the last one finishes it and goes on
        # to the large transaction below (one Spark start fewer than a run of its own).
        _crash(spec_path, LOAD_FAULTS)
        before = query(pg_db, OUTPUTS["total"][1])[0]

        # A transaction updating every order: staged, then applied whole.
        conn = psycopg2.connect(pg_db)
        with conn.cursor() as cur:
            big = current_xid(cur)
            cur.execute("UPDATE orders SET amount = amount + 1")
            cur.execute(f"INSERT INTO orders VALUES ({ORDERS + 1}, 1, 5.00)")
        conn.commit()
        conn.close()
        wait_for_xids(spec.changelog, "shop", {big}, ct, timeout=120)
        _crash(spec_path, BIG_FAULTS)
        r = _child(["run", str(spec_path), "--once", "--quiet"], None)
        assert r.returncode == 0, r.stderr[-3000:]
    delta = DeltaRsStore()
    for name in OUTPUTS:
        first = delta.history(spec.outputs[name].path)[0]
        assert first.cut["shop"].xid == snapshot.xid, f"{name}: its first version is not at the snapshot"
        diff = compare_rows(delta.read(spec.outputs[name].path, first.version).to_pylist(), expected[name],
                            list(expected[name][0]))  # fmt: skip
        assert not diff, f"{name} first version:\n{diff.describe()}"
    after = query(pg_db, OUTPUTS["total"][1])[0]
    assert after["total"] == before["total"] + ORDERS + 5

    for name in OUTPUTS:
        path = spec.outputs[name].path
        history = delta.history(path)
        batches = [c.batch for c in history if c.batch is not None]
        assert len(batches) == len(set(batches)), f"{name}: a batch was committed twice"
        lsns = [c.cut["shop"].lsn for c in history]
        assert lsns == sorted(lsns), f"{name}: a cut went back"
        last = delta.read(path).to_pylist()
        key = OUTPUTS[name][0]
        assert len({tuple(r[k] for k in key) for r in last}) == len(last), f"{name}: a key twice"
        diff = compare_rows(last, query(pg_db, OUTPUTS[name][1]), list(last[0]))
        assert not diff, f"{name} last version:\n{diff.describe()}"
    # Every version of the total holds none or all of the large transaction.
    for c in delta.history(spec.outputs["total"].path):
        (row,) = delta.read(spec.outputs["total"].path, c.version).to_pylist()
        state = "before" if c.cut["shop"].xid == snapshot.xid else "after"
        want = before if state == "before" else after
        assert (row["total"], row["n"]) == (want["total"], want["n"]), f"version {c.version} is torn"
