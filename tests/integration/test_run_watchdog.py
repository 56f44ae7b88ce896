"""A dead Spark driver never leaves `txjoin run` hanging.

When Spark's JVM exits under a running pipeline (out of memory: the JVM runs
with -XX:+ExitOnOutOfMemoryError; or killed), `txjoin run` stops with a
non-zero status and one line saying what happened and, for memory, which
setting to raise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.capture import execute, wait_for
from txjoin.errors import SparkDied
from txjoin.session import jvm_connection_lost, jvm_died, process_exit_code

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def test_out_of_memory_names_the_setting_to_raise() -> None:
    e = jvm_died(3, driver_memory="1024m", batch_bytes=64 << 20)
    assert isinstance(e, SparkDied)
    assert "ran out of memory" in str(e)
    assert "options.driver_memory" in str(e)
    assert "1024m" in str(e)
    assert "max_batch_bytes (now 64 MB)" in str(e)
    assert "exited with code 137" in str(jvm_died(137, driver_memory="1g", batch_bytes=1))


def test_a_lost_connection_waits_for_the_dying_jvm_to_exit() -> None:
    """A killed JVM's socket can close before the process can be reaped: a call that lost
    its connection waits for the exit code instead of reporting the connection error."""
    from py4j.protocol import Py4JNetworkError

    proc = subprocess.Popen(["sleep", "1"])
    try:
        assert process_exit_code(proc) is None
        assert process_exit_code(proc, wait=0.05) is None
        assert process_exit_code(proc, wait=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert jvm_connection_lost(ConnectionRefusedError(111, "Connection refused"))
    assert jvm_connection_lost(Py4JNetworkError("Error while sending or receiving"))
    assert jvm_connection_lost(EOFError())
    assert not jvm_connection_lost(RuntimeError("the streaming query failed"))


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of ``pid``'s direct children."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append((int(entry.name), name))
    return out


def test_run_exits_with_one_line_when_spark_dies(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 100) g",
    )
    spec = tmp_path / "dies.toml"
    spec.write_text(
        "\n".join(
            [
                'name = "dies"',
                f'state_dir = "{tmp_path / "state"}"',
                "[sources.src]",
                f'dsn = "{pg_db}"',
                'tables = ["public.t"]',
                "[outputs.o]",
                'key = ["id"]',
                'sql = "SELECT t.id, t.v FROM t"',
                "[options]",
                'driver_memory = "1g"',
            ]
        )
    )
    out_table = tmp_path / "state" / "delta" / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "txjoin.cli", "run", str(spec), "--quiet"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for(lambda: (out_table / "_delta_log").exists() or proc.poll() is not None, 120, "a first version")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        java = [pid for pid, name in _children(proc.pid) if name == "java"]
        assert java, "no Spark JVM under txjoin run"
        os.kill(java[0], signal.SIGKILL)
        started = time.monotonic()
        code = proc.wait(60)
        assert time.monotonic() - started < 30, "txjoin run took too long to notice"
        assert code != 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "txjoin: error: Spark's driver process exited with code -9" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
