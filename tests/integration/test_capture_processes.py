"""Capture in processes of its own (``CaptureProcesses``, as ``txjoin run`` runs it): what the child
captures reaches the changelog, its counters and errors reach the parent, and it never outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg2
import pytest

from tests.support.capture import execute, wait_for
from tests.support.specs import write_spec
from txjoin.changelog import ChangelogReader
from txjoin.errors import TxJoinError
from txjoin.runner import CaptureProcesses
from txjoin.spec import load_spec
from txjoin.verify.replay import read_transactions

pytestmark = pytest.mark.postgres


def _spec(tmp_path: Path, dsn: str, tables: list[str]) -> Path:
    return write_spec(
        tmp_path / "spec.toml", name="procs", state_dir=tmp_path / "state", source="s", dsn=dsn,
        tables=tables, outputs={"o": (["id"], "SELECT id, v FROM t")},
    )  # fmt: skip


def _slot_active(dsn: str) -> bool:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT bool_or(active) FROM pg_replication_slots WHERE slot_name = 'txjoin_s'")
            row = cur.fetchone()
            return bool(row and row[0])
    finally:
        conn.close()


def test_the_child_captures_and_reports_its_counters(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    spec = load_spec(_spec(tmp_path, pg_db, ["public.t"]))
    captures = CaptureProcesses(spec)
    captures.start()
    try:
        for i in range(3):
            execute(pg_db, f"INSERT INTO t VALUES ({i}, 'v{i}'), ({i + 10}, 'w{i}')")
        remote = captures.captures["s"]
        wait_for(lambda: remote.stats.transactions >= 3, what="the child's counters")
        assert remote.stats.events >= 6
        assert remote.streaming.is_set()
        captures.check()
    finally:
        captures.stop()
    assert all(p.returncode == 0 for p in captures._procs.values())
    ends = read_transactions(ChangelogReader(spec.changelog), "s")
    # The snapshot's END, then the three inserts of two rows each.
    assert [e.event_count for e in ends[-3:]] == [2, 2, 2], ends


def test_an_error_in_the_child_is_raised_by_the_parent(
    pg_db: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    spec = load_spec(_spec(tmp_path, pg_db, ["public.t", "public.no_such_table"]))
    captures = CaptureProcesses(spec)
    with pytest.raises(TxJoinError, match="no_such_table"):
        captures.start(timeout=60)
    with pytest.raises(TxJoinError, match="no_such_table"):
        captures.stop()  # stop() raises what the child reported, too
    # An exit, not an abort: a thread blocked reading stdin made the interpreter abort at exit.
    assert [p.returncode for p in captures._procs.values()] == [1]
    assert "Fatal Python error" not in capfd.readouterr().err


def test_the_child_stops_when_its_parent_is_killed(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    spec = _spec(tmp_path, pg_db, ["public.t"])
    parent = subprocess.Popen(  # a pipeline's process, as far as capture can tell
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from txjoin.runner import CaptureProcesses
            from txjoin.spec import load_spec
            captures = CaptureProcesses(load_spec({str(spec)!r}))
            captures.start()
            print(captures._procs["s"].pid, flush=True)
            time.sleep(600)
        """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _slot_active(pg_db)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)

        def gone() -> bool:
            try:  # a zombie nobody reaps is gone too
                return Path(f"/proc/{child}/stat").read_text().split(") ", 1)[1][0] == "Z"
            except (FileNotFoundError, ProcessLookupError):
                return True

        wait_for(gone, timeout=30, what="the capture process to stop after its parent's kill -9")
        wait_for(lambda: not _slot_active(pg_db), timeout=30, what="the slot to be released")
    finally:
        parent.kill()
        parent.wait()


def test_ctrl_c_reaches_the_pipeline_not_its_capture(pg_db: str, tmp_path: Path) -> None:
    """``txjoin run`` stops after its micro-batch on Ctrl-C, then stops capture itself."""
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    spec = _spec(tmp_path, pg_db, ["public.t"])
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import signal, time
            from txjoin.runner import CaptureProcesses
            from txjoin.spec import load_spec
            signal.signal(signal.SIGINT, lambda *a: None)  # txjoin run has a handler (not SIG_IGN, which a child inherits)
            captures = CaptureProcesses(load_spec({str(spec)!r}))
            captures.start()
            print(captures._procs["s"].pid, flush=True)
            time.sleep(600)
        """)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.killpg(parent.pid, signal.SIGINT)  # what a terminal sends its foreground group
        time.sleep(2)
        assert Path(f"/proc/{child}/stat").read_text().split(") ", 1)[1][0] != "Z"
        assert _slot_active(pg_db)
    finally:
        parent.kill()
        parent.wait()


def test_a_capture_process_that_dies_fails_the_pipeline(pg_db: str, tmp_path: Path) -> None:
    """Killed (the OOM killer, an operator), capture must not leave the pipeline idle and alive."""
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    captures = CaptureProcesses(load_spec(_spec(tmp_path, pg_db, ["public.t"])))
    captures.start()
    try:
        os.kill(captures._procs["s"].pid, signal.SIGKILL)
        wait_for(lambda: bool(captures.errors), timeout=30, what="the parent to notice")
        with pytest.raises(TxJoinError, match=r"source 's' exited \(code -9\)"):
            captures.check()
    finally:
        with pytest.raises(TxJoinError):
            captures.stop()


def _gone(pid: int) -> bool:
    try:  # a zombie nobody reaps is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_the_child_stops_when_its_parent_is_killed_during_the_snapshot(pg_db: str, tmp_path: Path) -> None:
    """The snapshot never looks at the stop flag: an orphan would hold the slot and the changelog's
    lock until it finished (hours on a large table), and refuse every restart meanwhile."""
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    spec = _spec(tmp_path, pg_db, ["public.t"])
    lock = psycopg2.connect(pg_db)
    parent: subprocess.Popen[str] | None = None
    try:
        with lock.cursor() as cur:
            cur.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")  # the snapshot's read waits
        parent = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                import threading, time
                from txjoin.runner import CaptureProcesses
                from txjoin.spec import load_spec
                captures = CaptureProcesses(load_spec({str(spec)!r}))
                threading.Thread(target=captures.start, daemon=True).start()
                while "s" not in captures._procs:
                    time.sleep(0.05)
                print(captures._procs["s"].pid, flush=True)
                time.sleep(600)
            """)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(3)  # into its slot set-up or snapshot, which wait for the lock
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: _gone(child), timeout=15, what="the capture process to stop while the lock is held")
    finally:
        lock.rollback()
        lock.close()
        if parent is not None:
            parent.kill()
            parent.wait()


def test_a_stop_signal_to_every_process_lets_the_pipeline_stop_capture(pg_db: str, tmp_path: Path) -> None:
    """A service manager's stop sends SIGTERM to the pipeline and its capture process alike; the
    pipeline then stops capture after its last batch, and that is a clean stop, not a failure."""
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    captures = CaptureProcesses(load_spec(_spec(tmp_path, pg_db, ["public.t"])))
    captures.start()
    try:
        child = captures._procs["s"]
        child.send_signal(signal.SIGTERM)
        execute(pg_db, "INSERT INTO t VALUES (1, 'after the signal')")
        remote = captures.captures["s"]
        wait_for(lambda: remote.stats.transactions >= 1, what="capture to go on until the pipeline stops it")
        assert child.poll() is None
        captures.check()
    finally:
        captures.stop()
    assert child.returncode == 0
