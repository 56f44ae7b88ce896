"""The SPARK_HOME txjoin launches Spark's driver with (txjoin.session._python_home)."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
import pytest

from txjoin.session import _python_home

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
        assert (home / "jars").resolve() == (PACKAGE / "jars").resolve()
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
    assert home.parent == tmp_path / "tmp"
    assert (home / "jars").resolve() == (PACKAGE / "jars").resolve()
