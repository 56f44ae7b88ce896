"""Shared benchmark helpers: a throwaway PostgreSQL and Spark, timing, medians, figures."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
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
    # synchronous_commit stays on (as on a production server) even without fsync: with it off, a
    # commit returns before its WAL is flushed, and logical decoding only sees it when the WAL
    # writer flushes, up to wal_writer_delay (200 ms) later: not txjoin's latency.
    settings = {"max_wal_size": "'4GB'", "shared_buffers": "'512MB'", "synchronous_commit": "on"}
    pg = EmbeddedPostgres(base / "data", fsync=fsync, settings=settings)
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
    try:
        with bench_dir(prefix) as home:
            yield spark, home
    finally:
        spark.stop()


@contextmanager
def bench_dir(prefix: str) -> Iterator[Path]:
    """A scratch directory, gone afterwards."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)  # embedded PostgreSQL may run as another user below it
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants (from /proc)."""
    return sum(tree_rss_by_name(root).values())


def _pss(pid: int) -> int | None:
    """Proportional set size: resident bytes, with pages shared among processes split between them."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1


def _shares_memory(a: int, b: int) -> bool:
    """Whether processes ``a`` and ``b`` have one address space (Linux kcmp).

    Java starts a process with vfork: until the child's exec, it runs in its
    parent's memory (named after the spawning thread, e.g. "Executor task l"),
    and /proc reports that memory for both.
    """
    if _SYS_KCMP is None:
        return False
    return int(_libc().syscall(_SYS_KCMP, a, b, _KCMP_VM, 0, 0)) == 0


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def tree_rss_by_name(root: int) -> dict[str, int]:
    """Resident bytes of ``root`` and its descendants, per process name (java, python...).

    Counted as PSS where the kernel reports it: Spark forks its JVM to start
    Python workers, and plain RSS would count the fork's shared pages twice.
    """
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            names[int(entry)] = stat[stat.index("(") + 1 : stat.rindex(")")]
        except (OSError, ValueError, IndexError):
            continue
    out: dict[str, int] = {}
    todo, seen = [root], set()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo += children.get(pid, [])
        if pid != root and _shares_memory(pid, parents[pid]):
            continue  # a vfork child before its exec: its parent's memory, counted there
        name = names.get(pid, "?")
        name = "python" if name.startswith("python") or name.startswith("txjoin") else name
        pss = _pss(pid)
        if pss is None and not Path(f"/proc/{pid}").exists():
            continue  # exited since the listing (its stat RSS was a vfork child's: the JVM's)
        out[name] = out.get(name, 0) + (pss if pss is not None else rss.get(pid, 0))
    return out


class PeakMemory:
    """Peak resident memory of a process tree, sampled every ``interval`` seconds."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.peak = 0
        #: Resident bytes per process name at the peak.
        self.split: dict[str, int] = {}
        self._interval = interval
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            by_name = tree_rss_by_name(self.root)
            total = sum(by_name.values())
            if total > self.peak:
                self.peak, self.split = total, by_name
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> PeakMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def describe(self) -> str:
        """'5.14 GiB (java 3.90, python 1.24)': the peak and who held it."""
        by_size = sorted(self.split.items(), key=lambda kv: -kv[1])
        parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in by_size)
        return f"{self.peak / 2**30:.2f} GiB ({parts})"


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
