"""Faults and bad input at the source: each a clear error (or a recovery) with a test."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extras import LogicalReplicationConnection

from tests.support.capture import (
    CaptureThread,
    current_xid,
    execute,
    make_config,
    running_capture,
    source_rows,
    wait_for,
    wait_for_xids,
)
from txjoin.changelog import ChangelogReader
from txjoin.errors import ConfigError, SlotInUse, SourceError
from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.runner import open_capture
from txjoin.verify.replay import replay

pytestmark = pytest.mark.postgres

SCHEMA = "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE u (id int PRIMARY KEY, w int);"


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    """A server of this test's own, for faults that would disturb others."""
    base = Path(tempfile.mkdtemp(prefix="txjoin-fault-pg-"))
    base.chmod(0o755)
    pg = EmbeddedPostgres(base / "data", fsync=False)
    try:
        yield pg
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


def test_wal_level_not_logical_is_refused_with_the_fix(own_server: EmbeddedPostgres, tmp_path: Path) -> None:
    own_server.extra_settings["wal_level"] = "replica"
    own_server.start(stop_with_parent=True)
    execute(own_server.dsn(), SCHEMA)
    with pytest.raises(SourceError, match="wal_level is 'replica'") as err:
        open_capture(make_config(own_server.dsn(), tmp_path / "cl", ["public.t"])).run()
    assert "ALTER SYSTEM SET wal_level = logical" in str(err.value)


def test_missing_table_and_table_without_primary_key(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA + "CREATE TABLE nopk (a int);")
    with pytest.raises(SourceError, match=r"table public\.nope does not exist"):
        open_capture(make_config(pg_db, tmp_path / "cl", ["public.t", "public.nope"])).run()
    with pytest.raises(SourceError, match="has no primary key") as err:
        open_capture(make_config(pg_db, tmp_path / "cl", ["public.nopk"])).run()
    assert "ADD PRIMARY KEY" in str(err.value)
    execute(pg_db, "ALTER TABLE u REPLICA IDENTITY NOTHING")
    with pytest.raises(SourceError, match="REPLICA IDENTITY NOTHING"):
        open_capture(make_config(pg_db, tmp_path / "cl", ["public.u"])).run()


def test_table_not_in_an_existing_publication(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA + "CREATE PUBLICATION txjoin_src FOR TABLE t;")
    with pytest.raises(SourceError, match=r"public\.u not published by publication 'txjoin_src'") as err:
        open_capture(make_config(pg_db, tmp_path / "cl", ["public.t", "public.u"])).run()
    assert 'ALTER PUBLICATION "txjoin_src" ADD TABLE "public"."u"' in str(err.value)


def test_role_without_replication_privilege(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    execute(
        pg_db, "DROP ROLE IF EXISTS plain_user; CREATE ROLE plain_user LOGIN; GRANT SELECT ON t TO plain_user"
    )
    dsn = pg_db.replace("user=txjoin", "user=plain_user")
    with pytest.raises(SourceError, match="has no REPLICATION privilege") as err:
        open_capture(make_config(dsn, tmp_path / "cl", ["public.t"])).run()
    assert 'ALTER ROLE "plain_user" WITH REPLICATION' in str(err.value)


def test_invalid_slot_and_publication_names(pg_db: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="only lower-case letters, digits and underscores"):
        make_config(pg_db, tmp_path / "cl", ["public.t"], slot="Bad-Slot")
    with pytest.raises(ConfigError, match="publication name"):
        make_config(pg_db, tmp_path / "cl", ["public.t"], publication="x; DROP TABLE t")


def test_slot_active_for_another_process(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    config = make_config(pg_db, tmp_path / "cl", ["public.t"], slot_busy_wait=0.5)
    with running_capture(config):
        pass  # creates the slot and the publication
    other = psycopg2.connect(pg_db, connection_factory=LogicalReplicationConnection)
    try:
        other.cursor().start_replication(
            slot_name="txjoin_src",
            decode=False,
            options={"proto_version": "1", "publication_names": "txjoin_src"},
        )
        with pytest.raises(SlotInUse, match="is active for PID") as err:
            open_capture(config).run()
        assert "pg_terminate_backend" in str(err.value)
    finally:
        other.close()


def test_resume_after_the_walsender_is_terminated(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    changelog = tmp_path / "cl"
    config = make_config(pg_db, changelog, ["public.t", "public.u"])
    conn = psycopg2.connect(pg_db)
    conn.autocommit = False
    xids: set[int] = set()
    with running_capture(config) as ct:
        for i in range(30):
            with conn.cursor() as cur:
                xids.add(current_xid(cur))
                cur.execute("INSERT INTO t VALUES (%s, 'x'); INSERT INTO u VALUES (%s, %s)", (i, i, i))
            conn.commit()
            if i in (10, 20):
                execute(
                    pg_db,
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'txjoin_src'",
                )
        wait_for_xids(changelog, "src", xids, ct)
        assert ct.capture.stats.reconnects >= 1
    conn.close()
    result = replay(changelog, "src", ["public.t", "public.u"])
    assert result.tables["public.t"] == source_rows(pg_db, "public.t")
    assert result.tables["public.u"] == source_rows(pg_db, "public.u")


def test_resume_after_the_server_restarts_mid_stream(own_server: EmbeddedPostgres, tmp_path: Path) -> None:
    own_server.start(stop_with_parent=True)
    own_server._requested_port = own_server.port  # come back on the same port
    dsn = own_server.dsn()
    execute(dsn, SCHEMA)
    changelog = tmp_path / "cl"
    ct = CaptureThread(make_config(dsn, changelog, ["public.t"])).start()
    try:
        execute(dsn, "INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
        wait_for(
            lambda: ChangelogReader(changelog).end_offset("src.public.t") >= 100, 30, "events before restart"
        )
        own_server.stop("fast")
        time.sleep(1.5)  # capture retries with backoff meanwhile
        own_server.start(stop_with_parent=True)
        execute(
            dsn,
            "INSERT INTO t SELECT g, 'after' FROM generate_series(101, 200) g; UPDATE t SET v = 'upd' WHERE id <= 50",
        )
        wait_for(
            lambda: ChangelogReader(changelog).end_offset("src.public.t") >= 250, 60, "events after restart"
        )
        ct.check()
        assert ct.capture.stats.reconnects >= 1
    finally:
        ct.stop()
    assert replay(changelog, "src", ["public.t"]).tables["public.t"] == source_rows(dsn, "public.t")


def test_idle_source_keeps_its_slot_moving_and_writes_heartbeats(
    pg_server: EmbeddedPostgres, pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, SCHEMA)
    changelog = tmp_path / "cl"
    other_db = pg_server.create_database("heartbeat_noise")
    execute(other_db, "CREATE TABLE IF NOT EXISTS noise (x int)")

    def confirmed() -> int:
        conn = psycopg2.connect(pg_db)
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'txjoin_src'"
            )
            row = cur.fetchone()
        conn.close()
        assert row is not None
        return int(row[0])

    with running_capture(make_config(pg_db, changelog, ["public.t"], heartbeat_interval=0.2)) as ct:
        start = confirmed()
        # WAL from another database only: nothing to capture, but the slot
        # must not hold the WAL back (seed 000's warning).
        for _ in range(20):
            execute(other_db, "INSERT INTO noise SELECT g FROM generate_series(1, 1000) g")
            time.sleep(0.05)
        wait_for(lambda: confirmed() > start + 100_000, 30, "the idle slot to advance")
        ct.check()
    heartbeats = list(ChangelogReader(changelog).read("src.heartbeat"))
    assert len(heartbeats) >= 3
    assert ChangelogReader(changelog).end_offset("src.public.t") == 0


def test_replica_identity_full_option_sets_it(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    with running_capture(make_config(pg_db, tmp_path / "cl", ["public.t"], replica_identity_full=True)):
        pass
    conn = psycopg2.connect(pg_db)
    with conn.cursor() as cur:
        cur.execute("SELECT relreplident FROM pg_class WHERE relname = 't'")
        assert cur.fetchone() == ("f",)
    conn.close()
