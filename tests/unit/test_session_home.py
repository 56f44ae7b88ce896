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
