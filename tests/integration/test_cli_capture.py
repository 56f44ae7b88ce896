"""The capture-side commands: txjoin db, txjoin slots, txjoin capture."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg2
import pytest

from tests.support.capture import execute, source_rows, wait_for
from txjoin.changelog import ChangelogReader
from txjoin.cli import main
from txjoin.verify.replay import replay

pytestmark = pytest.mark.postgres


def test_db_start_status_stop(capsys: pytest.CaptureFixture[str]) -> None:
    base = Path(tempfile.mkdtemp(prefix="txjoin-cli-db-"))
    base.chmod(0o755)
    data = str(base / "pg")
    try:
        assert main(["db", "status", "--data-dir", data]) == 3
        assert "stopped" in capsys.readouterr().out
        assert main(["db", "start", "--data-dir", data]) == 0
        out = capsys.readouterr().out
        assert "running on port" in out
        assert main(["db", "status", "--data-dir", data]) == 0
        dsn = next(
            line.split("dsn: ", 1)[1]
            for line in capsys.readouterr().out.splitlines()
            if line.startswith("dsn: ")
        )
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            assert cur.fetchone() == ("logical",)
        conn.close()
        assert main(["db", "stop", "--data-dir", data]) == 0
        assert main(["db", "status", "--data-dir", data]) == 3
    finally:
        main(["db", "stop", "--data-dir", data])
        shutil.rmtree(base, ignore_errors=True)


def test_slots_list_shows_retained_wal_and_drop_refuses_an_active_slot(
    pg_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    execute(pg_db, "SELECT pg_create_logical_replication_slot('txjoin_idle', 'pgoutput')")
    execute(pg_db, "INSERT INTO t SELECT g FROM generate_series(1, 20000) g")  # WAL the slot retains
    assert main(["slots", "list", "--dsn", pg_db]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("txjoin_idle"))
    assert "pgoutput" in line
    assert "KiB" in line or "MiB" in line
    assert main(["slots", "drop", "txjoin_idle", "--dsn", pg_db]) == 0
    assert "dropped replication slot txjoin_idle" in capsys.readouterr().out
    assert main(["slots", "drop", "txjoin_idle", "--dsn", pg_db]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["slots", "drop", "Not-Valid", "--dsn", pg_db]) == 2
    assert "only lower-case letters" in capsys.readouterr().err


def test_capture_command_runs_until_sigterm_and_never_prints_the_password(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
    changelog = tmp_path / "cl"
    dsn = pg_db + " password=s3cr3t-pw"  # trust auth ignores it; it must not be echoed
    proc = subprocess.Popen(
        [sys.executable, "-m", "txjoin.cli", "capture", "--dsn", dsn, "--tables", "public.t",
         "--changelog", str(changelog), "--source", "shop"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TXJOIN_PROGRESS": "1"},
    )  # fmt: skip
    try:
        wait_for(lambda: ChangelogReader(changelog).end_offset("shop.transaction") > 0, 60, "the snapshot")
        execute(pg_db, "INSERT INTO t VALUES (2, 'b'); UPDATE t SET v = 'c' WHERE id = 1")
        wait_for(lambda: ChangelogReader(changelog).end_offset("shop.transaction") >= 4, 30, "the change")
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "capture stopped: 1 transactions, 2 events" in out
    assert "s3cr3t" not in out + err
    assert replay(changelog, "shop", ["public.t"]).tables["public.t"] == source_rows(pg_db, "public.t")


def test_errors_are_one_line_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["capture", "--dsn", "host=127.0.0.1 port=9 dbname=x user=u password=hunter2", "--tables", "t",
               "--changelog", "/tmp/never", "--source", "s"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("txjoin: error: cannot connect to u@127.0.0.1:9/x")
    assert "hunter2" not in err
    assert "Traceback" not in err
