"""The driver JVM's class data sharing archive (txjoin.session): one writer at a time, only a
whole archive put in place, and the next session started with it; and the JVM options
txjoin adds from TXJOIN_SPARK_JAVA_OPTIONS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.profiles import THOROUGH
from txjoin.errors import ConfigError
from txjoin.session import (
    _archive_loads,
    _archive_lock,
    _class_archive,
    _extra_java_options,
    _java_ok,
    launch_java_options,
)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_one_live_writer_holds_the_lock_and_a_dead_one_s_leftovers_are_removed(tmp_path: Path) -> None:
    archive = tmp_path / "spark-classes.jsa"
    lock = tmp_path / "spark-classes.jsa.lock"
    lock.write_text(str(os.getppid()))  # a live process writes it
    assert _archive_lock(archive) is None
    assert lock.read_text() == str(os.getppid())

    lock.write_text(str(_dead_pid()))  # its writer was killed mid-way
    leftover = tmp_path / f"spark-classes.jsa.{_dead_pid()}.tmp"
    leftover.write_bytes(b"half an archive")
    assert _archive_lock(archive) == lock
    assert lock.read_text() == str(os.getpid())
    assert not leftover.exists()
    assert _archive_lock(archive) is None  # now this process holds it

    lock.unlink()
    # A writer that died and left no lock: its half archive goes; a live one's stays.
    orphan = tmp_path / f"spark-classes.jsa.{_dead_pid()}.tmp"
    orphan.write_bytes(b"half an archive")
    live = tmp_path / f"spark-classes.jsa.{os.getppid()}.tmp"
    live.write_bytes(b"being written")
    assert _archive_lock(archive) == lock
    assert not orphan.exists()
    assert live.exists()

    lock.unlink()
    archive.write_bytes(b"")
    assert _archive_lock(archive) is None  # nothing to write


def test_an_archive_that_would_crash_the_jvm_is_not_put_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a crashing JVM would leave hs_err_pid*.log
    java = _java_ok()
    good = tmp_path / "good.jsa"
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={good}", "-version"], check=True, capture_output=True)
    assert _archive_loads(java, good)
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # a writer that died mid-way
    assert not _archive_loads(java, cut)  # Java 17 crashes on it rather than starting without it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.jsa", "good.jsa"]


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXJOIN_SPARK_CDS", "0")
    assert _class_archive(_java_ok()) is None


_SESSION = """
import sys
from pathlib import Path
from txjoin.session import spark_session
spark = spark_session("txjoin-archive-test", cores=1)
assert spark.range(5).selectExpr("sum(id)").first()[0] == 10
print(Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/cmdline").read_bytes().replace(b"\\0", b" ").decode())
"""


@pytest.mark.spark
def test_the_suite_s_sessions_start_with_the_archive_make_setup_wrote(spark: Any) -> None:
    archive = _class_archive(_java_ok())
    assert archive is not None
    assert archive.is_file(), (
        f"no class archive at {archive}: make setup writes it (python -m txjoin.session)"
    )
    pid = spark.sparkContext._gateway.proc.pid
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert f"-XX:SharedArchiveFile={archive} " in cmdline
    # make test sets C1 only (Makefile); whatever the variable holds reaches the JVM.
    extra = os.environ.get("TXJOIN_SPARK_JAVA_OPTIONS", "").strip()
    jvm_args = cmdline.split(" org.apache.spark.deploy.SparkSubmit ")[0]
    assert f" {extra} " in jvm_args if extra else "TieredStopAtLevel" not in jvm_args, cmdline


def test_java_options_the_jvm_refuses_are_named_before_spark_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXJOIN_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+NoSuchOption")
    with pytest.raises(ConfigError, match=r"TXJOIN_SPARK_JAVA_OPTIONS=.*NoSuchOption.*correct or unset"):
        _extra_java_options(_java_ok())
    monkeypatch.setenv("TXJOIN_SPARK_JAVA_OPTIONS", " -XX:TieredStopAtLevel=1 ")
    assert _extra_java_options(_java_ok()) == " -XX:TieredStopAtLevel=1"
    monkeypatch.setenv("TXJOIN_SPARK_JAVA_OPTIONS", "")
    assert _extra_java_options(_java_ok()) == ""


def _flag(java: str, options: str, name: str = "TieredStopAtLevel") -> int:
    """A JVM flag as the JVM takes it from ``options`` (the last occurrence wins)."""
    out = subprocess.run(
        [java, *options.split(), "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in out.splitlines() if f" {name} " in x)
    return int(line.split("=")[1].split()[0])


def test_a_short_lived_session_compiles_with_c1_only_unless_the_variable_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    java = _java_ok()
    monkeypatch.setenv("TXJOIN_SPARK_JAVA_OPTIONS", "")
    assert _flag(java, launch_java_options(java)) == 4  # a pipeline: both tiers
    assert _flag(java, launch_java_options(java, short_lived=True)) == 1
    # C1 alone would get a 48 MB code cache, which the suite's sessions filled (one JVM died of it).
    assert _flag(java, launch_java_options(java, short_lived=True), "ReservedCodeCacheSize") == 240 << 20
    monkeypatch.setenv("TXJOIN_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=4 -XX:+UseParallelGC")
    short = launch_java_options(java, short_lived=True)
    assert _flag(java, short) == 4, short  # the user's options come last and win
    assert short.endswith(" -XX:+UseParallelGC")


@pytest.mark.spark
@pytest.mark.skipif(not THOROUGH, reason="about 45 s: make test-thorough runs it")
def test_the_first_session_writes_the_archive_as_it_exits_and_the_next_starts_with_it(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    env.pop("TXJOIN_SPARK_CDS", None)

    def session() -> str:
        out = subprocess.run(
            [sys.executable, "-c", _SESSION], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    first = session()
    archives = sorted((tmp_path / "cache" / "txjoin").glob("spark-classes-*"))
    assert [a.suffix for a in archives] == [".jsa"], archives  # no lock or temporary file left
    assert f"-XX:ArchiveClassesAtExit={archives[0]}." in first
    assert archives[0].stat().st_size > 10 << 20  # Spark's classes, not only the JDK's
    second = session()
    assert f"-XX:SharedArchiveFile={archives[0]} " in second
    assert "ArchiveClassesAtExit" not in second


def test_the_txjoin_command_finishes_the_archive_before_it_exits(tmp_path: Path) -> None:
    # The command leaves by os._exit, which skips atexit: a session's archive was never put in
    # place, and its JVM went on writing 180 MB after the command had returned.
    done = tmp_path / "finished"
    script = (
        "import sys, txjoin.session as s\n"
        f"s._finishers.append(lambda: open({str(done)!r}, 'w').write('archive'))\n"
        f"sys.argv = ['txjoin', 'run', {str(tmp_path / 'missing.toml')!r}]\n"
        "from txjoin.cli import command\n"
        "command()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr  # no such spec: main returned, then os._exit
    assert done.read_text() == "archive"
