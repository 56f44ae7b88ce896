"""Kill -9 of the capture process at random points while a workload runs
(issue [1 of 5], acceptance 3), and the snapshot/stream hand-off (acceptance 4)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from tests.support.capture import (
    current_xid,
    execute,
    make_config,
    running_capture,
    source_rows,
    wait_for,
    wait_for_xids,
)
from tests.support.profiles import THOROUGH
from txjoin.changelog import ChangelogReader
from txjoin.verify.replay import replay

pytestmark = pytest.mark.postgres

TABLES = ["public.accounts", "public.orders"]
SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text);
CREATE TABLE orders (id int PRIMARY KEY, account_id int, amount numeric(10,2), items int[]);
"""


class Workload:
    """Two threads committing small multi-statement transactions until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.committed: list[int] = []
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(i, seed + i), daemon=True) for i in range(2)]

    def _run(self, me: int, seed: int) -> None:
        rng = random.Random(seed)
        conn = psycopg2.connect(self.dsn)
        keys: list[int] = []
        next_id = me
        try:
            while not self.stop.is_set():
                with conn.cursor() as cur:
                    xid = current_xid(cur)
                    if rng.random() < 0.03:
                        # A big transaction: its events reach the changelog
                        # in several flushes before its END does.
                        base = 1_000_000 * (me + 1) + next_id * 1000
                        cur.execute(
                            "INSERT INTO accounts SELECT g, 0, 'bulk' FROM generate_series(%s, %s) g",
                            (base, base + 2999),
                        )
                        cur.execute("DELETE FROM accounts WHERE id BETWEEN %s AND %s", (base, base + 2999))
                    for _ in range(rng.randint(1, 4)):
                        r = rng.random()
                        if r < 0.4 or not keys:
                            next_id += 2
                            cur.execute(
                                "INSERT INTO accounts VALUES (%s, %s, %s)",
                                (next_id, rng.randint(0, 99), "x" * rng.randint(0, 50)),
                            )
                            cur.execute(
                                "INSERT INTO orders VALUES (%s, %s, %s, %s)",
                                (next_id, next_id, rng.randint(0, 9999) / 100, [1, 2]),
                            )
                            keys.append(next_id)
                        elif r < 0.8:
                            k = rng.choice(keys)
                            cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (k,))
                            cur.execute(
                                "UPDATE orders SET amount = amount + 0.01, items = items || 3 WHERE id = %s",
                                (k,),
                            )
                        else:
                            k = keys.pop(rng.randrange(len(keys)))
                            cur.execute("DELETE FROM orders WHERE id = %s", (k,))
                            cur.execute("DELETE FROM accounts WHERE id = %s", (k,))
                conn.commit()
                with self.lock:
                    self.committed.append(xid)
                time.sleep(rng.random() * 0.004)
        except BaseException as e:  # surfaced by the test
            self.errors.append(e)
        finally:
            conn.close()

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        if self.errors:
            raise self.errors[0]


def _slot_state(dsn: str, slot: str) -> tuple[bool, int]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT active, pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            )
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return bool(row[0]), int(row[1])


def _capture_cmd(dsn: str, changelog: Path) -> list[str]:
    return [
        sys.executable, "-m", "txjoin.cli", "capture", "--dsn", dsn,
        "--tables", ",".join(TABLES), "--changelog", str(changelog), "--source", "shop",
        "--roll-interval", "0.02", "--heartbeat-interval", "0.2", "--quiet",
        # Acknowledge rarely and flush big transactions early, so kills land
        # both between flush and acknowledgement and inside a transaction.
        "--ack-interval", "0.5", "--roll-bytes", "65536",
    ]  # fmt: skip


def test_kill_9_loses_nothing_and_duplicates_only_unacknowledged_transactions(
    pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, SCHEMA)
    changelog = tmp_path / "changelog"
    rng = random.Random(1123)
    iterations = 20 if THOROUGH else 4
    work = Workload(pg_db, seed=5)
    kills: list[tuple[int, dict[str, int]]] = []  # (confirmed flush after the kill, topic end offsets)
    try:
        for i in range(iterations):
            proc = subprocess.Popen(
                _capture_cmd(pg_db, changelog), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            if i == 0:
                # Start writing once the snapshot is taken, so every workload
                # transaction is streamed (none folded into the snapshot).
                wait_for(
                    lambda: ChangelogReader(changelog).end_offset("shop.transaction") > 0,
                    60,
                    "the snapshot unit",
                )
                work.start()
            time.sleep(0.3 + rng.random() * 1.5)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            wait_for(
                lambda: not _slot_state(pg_db, "txjoin_shop")[0], 30, "the walsender to release the slot"
            )
            reader = ChangelogReader(changelog)
            kills.append(
                (_slot_state(pg_db, "txjoin_shop")[1], {t: reader.end_offset(t) for t in reader.topics()})
            )
    finally:
        work.finish()
    assert len(work.committed) > 50

    config = make_config(pg_db, changelog, TABLES, prefix="shop")
    with running_capture(config) as ct:
        wait_for_xids(changelog, "shop", set(work.committed), ct)

    result = replay(changelog, "shop", TABLES)
    for table in TABLES:
        assert result.tables[table] == source_rows(pg_db, table), f"{table} differs after {iterations} kills"
    streamed = result.transactions[1:]
    assert sorted(e.xid for e in streamed) == sorted(work.committed)
    assert len({e.xid for e in streamed}) == len(streamed), "an END was written twice"
    assert [e.end_lsn for e in streamed] == sorted(e.end_lsn for e in streamed)

    # Every duplicate is of a transaction that was not acknowledged when the
    # capture that first wrote it was killed.
    end_of = {e.xid: e.end_lsn for e in result.transactions}
    first_offset: dict[tuple[str, int, int], int] = {}
    reader = ChangelogReader(changelog)
    for topic in (f"shop.{t}" for t in TABLES):
        for offset, raw in reader.read(topic):
            import json

            v = json.loads(raw)
            first_offset.setdefault((topic, v["source"]["txId"], v["transaction"]["total_order"]), offset)
    for topic, _offset, xid, order in result.duplicates:
        first = first_offset[(topic, xid, order)]
        kill = next(k for k in kills if k[1].get(topic, 0) > first)
        assert end_of[xid] > kill[0], f"xid {xid} was acknowledged (<= {kill[0]}) but written again"


def test_rows_written_during_the_snapshot_appear_exactly_once(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    execute(
        pg_db,
        "INSERT INTO accounts SELECT g, g, repeat('n', 20) FROM generate_series(1, 60000) g;"
        "INSERT INTO orders SELECT g, g, g / 100.0, ARRAY[g] FROM generate_series(1, 60000) g;",
    )
    changelog = tmp_path / "changelog"
    stop = threading.Event()
    committed: list[int] = []

    def writer() -> None:
        conn = psycopg2.connect(pg_db)
        rng = random.Random(3)
        k = 100_000
        while not stop.is_set():
            with conn.cursor() as cur:
                xid = current_xid(cur)
                k += 1
                cur.execute("INSERT INTO accounts VALUES (%s, 0, 'during')", (k,))
                cur.execute(
                    "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (rng.randint(1, 60000),)
                )
                cur.execute("DELETE FROM orders WHERE id = %s", (rng.randint(1, 60000),))
            conn.commit()
            committed.append(xid)
        conn.close()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    time.sleep(0.3)
    config = make_config(pg_db, changelog, TABLES, prefix="shop")
    with running_capture(config) as ct:
        time.sleep(0.5)  # writes keep going after the stream starts, too
        stop.set()
        t.join(30)
        # Transactions that committed before the slot's consistent point are
        # in the snapshot; the rest must be streamed. Wait for the last one.
        wait_for_xids(changelog, "shop", {committed[-1]}, ct)
    assert ct.capture.stats.snapshot_rows >= 120_000
    # Replay is strict: a row seen twice (create of an existing key) or an
    # update of a row the snapshot missed raises.
    result = replay(changelog, "shop", TABLES)
    for table in TABLES:
        assert result.tables[table] == source_rows(pg_db, table)
    streamed = {e.xid for e in result.transactions[1:]}
    snapshot_position = result.transactions[0].end_lsn
    assert all(e.end_lsn > snapshot_position for e in result.transactions[1:])
    # Writes ran before, during and after the snapshot: some transactions are
    # in the snapshot, the rest streamed, none lost.
    assert streamed < set(committed)
    assert len(streamed) > 0
