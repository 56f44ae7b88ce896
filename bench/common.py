"""Shared benchmark helpers: a throwaway PostgreSQL and Spark, timing, medians, figures."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.session import spark_session


@contextmanager
def bench_postgres(fsync: bool = False) -> Iterator[EmbeddedPostgres]:
    base = Path(tempfile.mkdtemp(prefix="txjoin-bench-pg-"))
    base.chmod(0o755)
    pg = EmbeddedPostgres(
        base / "data", fsync=fsync, settings={"max_wal_size": "'4GB'", "shared_buffers": "'512MB'"}
    )
    pg.start(stop_with_parent=True)
    try:
        yield pg
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def bench_spark(app: str, prefix: str, **spark_conf: Any) -> Iterator[tuple[Any, Path]]:
    """A Spark session and a scratch directory, both gone afterwards."""
    spark = spark_session(app, **spark_conf)
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)  # embedded PostgreSQL may run as another user below it
    try:
        yield spark, home
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)


def write_figures(path: Path | None, figures: Any) -> None:
    """``--json PATH``: the stage's figures for ``make bench`` (bench/__main__.py)."""
    if path is not None:
        path.write_text(json.dumps(figures, indent=2))


@dataclass
class Stat:
    """Median of several runs with their range."""

    values: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def fmt(self, unit: str = "", digits: int = 0) -> str:
        lo, hi = min(self.values), max(self.values)
        d = digits
        return f"{self.median:,.{d}f}{unit} (min {lo:,.{d}f}, max {hi:,.{d}f}, n={len(self.values)})"


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
