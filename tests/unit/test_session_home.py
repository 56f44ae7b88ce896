"""The SPARK_HOME txjoin launches Spark's driver with (txjoin.session._python_home)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pyspark
import pytest

from txjoin.session import _cache_dir, _class_archive, _python_home, _shadow_home

PACKAGE = Path(pyspark.__file__).parent


@pytest.mark.parametrize("before", [None, str(PACKAGE)])
def test_the_driver_gets_the_installed_spark_without_its_python_zips(
    before: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if before is None:
        monkeypatch.delenv("SPARK_HOME", raising=False)
    else:
        monkeypatch.setenv("SPARK_HOME", before)
    with _python_home():
        home = Path(os.environ["SPARK_HOME"])
        assert home != PACKAGE
        jars = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "jars").rglob("*") if p.is_file())
        assert sorted(str(p.relative_to(home)) for p in (home / "jars").rglob("*") if p.is_file()) == jars
        # The same files (another checkout's venv may have made the home: equal, not the same inodes).
        assert all((home / j).stat().st_size == (PACKAGE / j).stat().st_size for j in jars)
        smallest = min(jars, key=lambda j: (PACKAGE / j).stat().st_size)
        assert (home / smallest).read_bytes() == (PACKAGE / smallest).read_bytes()
        assert (home / "bin" / "spark-submit").exists()
        assert not (home / "python" / "lib" / "pyspark.zip").exists()
        assert (PACKAGE / "python" / "lib" / "pyspark.zip").exists()  # what Spark would have used
    assert os.environ.get("SPARK_HOME") == before


def test_a_spark_home_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    with _python_home():
        assert os.environ["SPARK_HOME"] == str(tmp_path)
    assert os.environ["SPARK_HOME"] == str(tmp_path)


def test_the_links_live_in_the_user_s_cache_not_in_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A /tmp cleaner would remove links the JVM still opens jars through, months into a run.
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with _python_home():
        home = Path(os.environ["SPARK_HOME"])
    assert home.parent == tmp_path / "cache" / "txjoin"
    with _python_home():
        assert Path(os.environ["SPARK_HOME"]) == home  # made once
    assert [p.name for p in home.parent.iterdir()] == [home.name]  # no leftovers


def test_an_unwritable_cache_falls_back_to_the_temp_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file" / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    with _python_home():
        home = Path(os.environ["SPARK_HOME"])
    assert home.parent == tmp_path / "tmp" / f"txjoin-{os.getuid()}"
    assert home.parent.stat().st_mode & 0o777 == 0o700  # this user's alone
    jar = next(p for p in (PACKAGE / "jars").iterdir() if p.is_file())
    assert os.path.samefile(home / "jars" / jar.name, jar)  # made here, from this install


@pytest.mark.parametrize("planted", ["symlink", "open to others"])
def test_a_temp_directory_others_could_write_is_never_launched_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, planted: str
) -> None:
    # Spark's launcher runs what it finds in the home: another user who made the fallback
    # directory (a predictable name in /tmp) could run code as this one.
    (tmp_path / "file").write_text("")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file" / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "theirs").mkdir()
    fallback = tmp_path / "tmp" / f"txjoin-{os.getuid()}"
    if planted == "symlink":
        fallback.symlink_to(tmp_path / "theirs")
    else:
        fallback.mkdir()
        fallback.chmod(0o777)
    assert _cache_dir() is None
    assert _class_archive("/bin/sh") is None
    with _python_home():
        assert "SPARK_HOME" not in os.environ  # PySpark's launcher then uses its own install
    assert not list((tmp_path / "theirs").iterdir())


def test_spark_settings_in_the_install_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # spark-defaults.conf and the like of a PySpark install: a home shared between installs
    # would leave them out.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    package = _install(tmp_path / "a" / "pyspark", b"classes")
    (package / "conf").mkdir()
    (package / "conf" / "spark-defaults.conf").write_text("spark.txjoin.marker yes\n")
    home = _shadow_home(package, "4.0.0")
    assert home is not None
    assert (home / "conf" / "spark-defaults.conf").read_text() == "spark.txjoin.marker yes\n"
    assert not (home / "python").exists()


def _install(at: Path, jar: bytes) -> Path:
    """A PySpark install's layout at ``at``: bin, jars, sbin and a python directory."""
    for d, name, data in [("bin", "spark-submit", b"#!/bin/sh"), ("jars", "spark-core.jar", jar),
                          ("sbin", "start-master.sh", b"#!/bin/sh"), ("python", "setup.py", b"")]:  # fmt: skip
        (at / d).mkdir(parents=True)
        (at / d / name).write_bytes(data)
    return at


def test_installs_of_the_same_pyspark_share_one_home_that_outlives_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Each checkout's venv installs PySpark at its own path; the driver's class path, and so its
    # class archive, must not depend on it (a fresh clone would write another 180 MB archive).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = _shadow_home(_install(tmp_path / "a" / "pyspark", b"classes"), "4.0.0")
    second = _shadow_home(_install(tmp_path / "b" / "pyspark", b"classes"), "4.0.0")
    assert first is not None
    assert first == second
    assert sorted(p.name for p in first.iterdir()) == ["bin", "jars", "sbin"]
    shutil.rmtree(tmp_path / "a")
    assert (first / "jars" / "spark-core.jar").read_bytes() == b"classes"
    other = _shadow_home(_install(tmp_path / "c" / "pyspark", b"other classes"), "4.0.0")
    assert other is not None
    assert other != first
    assert (other / "jars" / "spark-core.jar").read_bytes() == b"other classes"
    assert _shadow_home(tmp_path / "b" / "pyspark", "4.0.1") not in (first, other)
    (tmp_path / "b" / "pyspark" / "jars" / "connect").mkdir()  # jars in a subdirectory count too
    (tmp_path / "b" / "pyspark" / "jars" / "connect" / "repl.jar").write_bytes(b"repl")
    grown = _shadow_home(tmp_path / "b" / "pyspark", "4.0.0")
    assert grown is not None
    assert grown not in (first, other)
    assert (grown / "jars" / "connect" / "repl.jar").read_bytes() == b"repl"
    assert not [p for p in first.parent.iterdir() if "." in p.name]  # no half-made home left


def test_without_hard_links_the_home_links_to_the_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A cache on another file system than the venv: links to this install, its own home.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def cross_device(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link", src)

    monkeypatch.setattr("os.link", cross_device)
    package = _install(tmp_path / "a" / "pyspark", b"classes")
    home = _shadow_home(package, "4.0.0")
    assert home is not None
    assert (home / "jars").resolve() == package / "jars"
    assert not (home / "python").exists()
    assert _shadow_home(_install(tmp_path / "b" / "pyspark", b"classes"), "4.0.0") != home
    assert not [p for p in home.parent.iterdir() if "." in p.name]
