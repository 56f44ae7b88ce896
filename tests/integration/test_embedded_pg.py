"""The embedded PostgreSQL launcher against the real server binaries."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from txjoin.errors import MissingDependency
from txjoin.pg.embedded import EmbeddedPostgres

pytestmark = pytest.mark.postgres


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="txjoin-pgtest-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_session_server_is_configured_for_logical_replication(pg_server: EmbeddedPostgres) -> None:
    conn = psycopg2.connect(pg_server.dsn())
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('wal_level', 'max_replication_slots', 'max_wal_senders', 'listen_addresses')"
            )
            settings = dict(cur.fetchall())
            cur.execute("SELECT current_user, usesuper FROM pg_user WHERE usename = current_user")
            user, superuser = cur.fetchone()  # type: ignore[misc]
    finally:
        conn.close()
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) >= 10
    assert int(settings["max_wal_senders"]) >= 10
    assert settings["listen_addresses"] == "127.0.0.1"
    assert (user, superuser) == ("txjoin", True)


def test_start_stop_status_and_restart_keep_data(scratch_dir: Path) -> None:
    pg = EmbeddedPostgres(scratch_dir / "data", fsync=False)
    assert not pg.status().running
    pg.start()
    try:
        st = pg.status()
        assert st.running
        assert st.port == pg.port
        assert st.pid
        conn = psycopg2.connect(pg.dsn())
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE kept (id int primary key); INSERT INTO kept VALUES (7)")
        conn.close()
        # start() on a running server reuses it instead of failing.
        again = EmbeddedPostgres(scratch_dir / "data").start()
        assert again.port == pg.port
    finally:
        pg.stop()
    assert not pg.status().running
    pg.start()
    try:
        conn = psycopg2.connect(pg.dsn())
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM kept")
            assert cur.fetchall() == [(7,)]
        conn.close()
    finally:
        pg.destroy()
    assert not (scratch_dir / "data").exists()


def test_server_stops_when_the_starting_process_is_killed(scratch_dir: Path) -> None:
    data = scratch_dir / "data"
    code = (
        "import sys, time\n"
        "from txjoin.pg.embedded import EmbeddedPostgres\n"
        f"pg = EmbeddedPostgres({str(data)!r}, fsync=False).start(stop_with_parent=True)\n"
        "print(pg.port, flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    port = int(child.stdout.readline())
    pg = EmbeddedPostgres(data)
    assert pg.status().running
    assert pg.status().port == port
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 20
    while pg.status().running and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pg.status().running, "watchdog did not stop the server after its parent died"


def test_missing_binaries_name_the_package(monkeypatch: pytest.MonkeyPatch, scratch_dir: Path) -> None:
    monkeypatch.setenv("TXJOIN_PG_BINDIR", str(scratch_dir))
    with pytest.raises(MissingDependency) as err:
        EmbeddedPostgres(scratch_dir / "data")
    assert "apt-get install -y postgresql" in str(err.value)
    assert str(scratch_dir) in str(err.value)
