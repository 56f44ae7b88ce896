"""kill -9 of ``txjoin run`` at random points of a long mixed workload with schema
changes and a resync (issue [5 of 7]).

A workload thread commits transactions without pause (inserts, updates,
deletes, key moves over two tables), changes columns no output reads, then
changes the type of a column an output reads. ``txjoin run`` (Spark, with
capture in a child process that stops when it dies) runs as a child and is
SIGKILLed after random delays;
when it stops by itself on the schema change, ``txjoin resync`` copies the
table and the run is started again. Every Delta version of every output must
equal the output's SQL on PostgreSQL at the version's cut, each micro-batch
is committed at most once per output, and the last versions reach the last
transaction. Two kills in ``make test``; 20 in ``make test-thorough``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.support.capture import current_xid, execute
from tests.support.oracle import Oracle, check_every_version
from tests.support.profiles import THOROUGH
from tests.support.specs import write_spec
from txjoin.capture.resync import resync_table
from txjoin.changelog.snapshots import ResyncDir
from txjoin.join.planned import plan_outputs
from txjoin.pg.names import QualifiedName
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import load_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

KILLS = 20 if THOROUGH else 2  # the schedule below changes the schema after kills 0 and 1

SCHEMA = """
CREATE TABLE a (id int PRIMARY KEY, v numeric(10,2), junk int);
CREATE TABLE b (id int PRIMARY KEY, a_id int, w int);
INSERT INTO a SELECT g, g * 1.25, 0 FROM generate_series(1, 8) g;
INSERT INTO b SELECT g, 1 + g % 8, g FROM generate_series(1, 20) g;
"""
OUTPUTS = {
    "per_a": "SELECT a.id, a.v, count(b.id) AS k, sum(b.w) AS w FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id, a.v",
    "bs": "SELECT b.id, b.a_id, b.w FROM b",
}
KEYS = {"per_a": ["id"], "bs": ["id"]}


def _spec_file(tmp: Path, dsn: str) -> Path:
    outputs = {name: (KEYS[name], sql) for name, sql in OUTPUTS.items()}
    return write_spec(
        tmp / "kills.toml", name="kills", state_dir=tmp / "state", source="s", dsn=dsn,
        tables=["public.a", "public.b"], outputs=outputs,
    )  # fmt: skip


class Workload:
    """Commits one transaction at a time and records the oracle after each, under ``lock``."""

    def __init__(self, dsn: str, oracle: Oracle, seed: int) -> None:
        self.conn = psycopg2.connect(dsn)
        self.oracle = oracle
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.phase = "plain"  # 'unread' changes unread columns, 'read' retypes a.v once
        self.xids: list[int] = []
        #: Transactions that changed rows: PostgreSQL 15's pgoutput sends no empty
        #: transaction, so only these can be a cut.
        self.changed: list[int] = []
        self.error: BaseException | None = None
        self.next_id = 100

    def _one(self, cur: object) -> int:
        """One transaction's statements; the number of rows they changed."""
        rng = self.rng
        ops = [
            ("UPDATE b SET w = w + %s WHERE id = %s", (rng.randint(1, 9), rng.randint(1, 20))),
            ("UPDATE b SET a_id = %s WHERE id = %s", (rng.randint(1, 9), rng.randint(1, 20))),
            ("UPDATE a SET v = v + 0.25 WHERE id = %s", (rng.randint(1, 9),)),
            ("INSERT INTO b VALUES (%s, %s, %s)", (self.next_id, rng.randint(1, 9), rng.randint(1, 50))),
            ("DELETE FROM b WHERE id = (SELECT max(id) FROM b WHERE id >= 100)", None),
            ("UPDATE a SET id = id + 1000 WHERE id = %s", (rng.randint(1, 8),)),  # a key move
            ("UPDATE a SET id = id - 1000 WHERE id > 1000", None),
        ]
        rows = 0
        for sql, args in rng.sample(ops, rng.randint(1, 3)):
            cur.execute(sql, args)  # type: ignore[attr-defined]
            rows += cur.rowcount  # type: ignore[attr-defined]
        self.next_id += 1
        return rows

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.lock, self.conn.cursor() as cur:
                    xid = current_xid(cur)
                    if self.phase == "unread":
                        cur.execute("ALTER TABLE a ALTER COLUMN junk TYPE text")
                        cur.execute("ALTER TABLE b ADD COLUMN note text DEFAULT 'n'")
                        self.phase = "plain"
                    elif self.phase == "read":
                        cur.execute("ALTER TABLE a ALTER COLUMN v TYPE numeric(12,3)")
                        self.phase = "plain"
                    rows = self._one(cur)
                    self.conn.commit()
                    self.oracle.record(xid)
                    self.xids.append(xid)
                    if rows:
                        self.changed.append(xid)
                time.sleep(self.rng.uniform(0.05, 0.3))
        except BaseException as e:
            self.error = e

    def close(self) -> None:
        self.conn.close()


def _versions(delta: DeltaRsStore, spec: Any) -> int:
    return sum(len(delta.history(o.path)) for o in spec.outputs.values() if delta.exists(o.path))


def _start(spec_path: Path, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 (the child writes it)
    return subprocess.Popen(
        [sys.executable, "-m", "txjoin.cli", "run", str(spec_path), "--quiet"], stdout=out, stderr=out
    )


@pytest.mark.slow(125)
def test_kill_9_at_random_points_with_schema_changes_and_a_resync(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    spec_path = _spec_file(tmp_path, pg_db)
    spec = load_spec(spec_path)
    oracle = Oracle(pg_db, OUTPUTS)
    work = Workload(pg_db, oracle, seed=int(os.environ.get("TXJOIN_KILL_SEED", "7")))
    rng = random.Random(11)
    log = tmp_path / "run.log"
    delta = DeltaRsStore()
    thread = threading.Thread(target=work.run, daemon=True)
    kills = resyncs = started = 0
    t0 = time.monotonic()
    timeline: list[str] = []
    child = _start(spec_path, log)
    try:
        # The snapshot's own xid is a cut too: record the state it sees before any change.
        deadline = time.monotonic() + 120
        while not any((spec.changelog / "_snapshots" / "s").glob("*/manifest.json")):
            assert child.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no snapshot within 120 s"
            time.sleep(0.2)
        manifest = next((spec.changelog / "_snapshots" / "s").glob("*/manifest.json"))
        oracle.record(int(json.loads(manifest.read_text())["xid"]))
        thread.start()
        schedule = {0: "unread", 1: "read"}  # after the k-th kill
        while kills < KILLS or resyncs == 0:
            if kills in schedule:
                work.phase = schedule.pop(kills)
            # Kill at a random point after the run has published something: the first
            # kills may land in the snapshot's load or a batch, later ones anywhere.
            before = _versions(delta, spec)
            end = time.monotonic() + 120
            while _versions(delta, spec) == before and child.poll() is None and time.monotonic() < end:
                time.sleep(0.2)
            end = time.monotonic() + rng.uniform(0, 3)
            while time.monotonic() < end and child.poll() is None:
                time.sleep(0.1)
            assert work.error is None, work.error
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                child.wait()
                kills += 1
                timeline.append(f"{time.monotonic() - t0:.0f}s kill {kills}")
            else:
                text = log.read_text()[started:]
                assert "txjoin resync" in text, text[-3000:]
                with work.lock:
                    done = resync_table(
                        spec.sources["s"].capture_config(spec.changelog),
                        QualifiedName("public", "a"),
                        ResyncDir(spec.changelog, "s"),
                    )
                    oracle.record(done.xid)
                    work.changed.append(done.xid)  # its marker is a cut: the last one if no change follows
                resyncs += 1
                timeline.append(f"{time.monotonic() - t0:.0f}s resync")
            started = log.stat().st_size
            child = _start(spec_path, log)
        work.stop.set()
        thread.join(30)
        assert work.error is None, work.error
        # The last transaction may have changed nothing (a key move back with none
        # moved): no cut names it, so wait for the last one that changed rows.
        last = work.changed[-1]

        def caught_up() -> bool:
            assert child.poll() is None, log.read_text()[-3000:]
            return all(
                delta.exists(spec.outputs[n].path)
                and delta.history(spec.outputs[n].path)[-1].cut["s"].xid == last
                for n in OUTPUTS
            )

        deadline = time.monotonic() + 180
        while not caught_up():
            assert time.monotonic() < deadline, (
                f"outputs did not reach xid {last}, the last transaction that changed rows, in 180 s; "
                f"last cuts {[delta.history(o.path)[-1].cut for o in spec.outputs.values() if delta.exists(o.path)]}"
                f"; the run's log ends:\n{log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
        caught = time.monotonic() - t0
    finally:
        work.stop.set()
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
        work.close()
    plans = plan_outputs(spec).plans
    checked = {
        n: check_every_version(plans[n], spec.outputs[n].path, "s", oracle.results[n]) for n in OUTPUTS
    }
    oracle.close()
    for n in OUTPUTS:
        batches = [c.batch for c in delta.history(spec.outputs[n].path) if c.batch is not None]
        dup = [b for b, k in Counter(batches).items() if k > 1]
        assert not dup, f"{n}: batches committed twice: {dup}"
    empty = len(work.xids) - len(work.changed)
    print(
        f"{kills} kills, {resyncs} resync, {len(work.xids)} transactions ({empty} changed no row), "
        f"versions checked: {checked}"
    )
    print("timeline:", ", ".join(timeline), f"; caught up at {caught:.0f}s")
    assert resyncs == 1
