"""What the command-line commands share: defaults, the DSN option, the one
stop-signal handler, progress lines and the Spark session of a spec."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from txjoin.errors import ConfigError

__all__ = [
    "DEFAULT_HOME",
    "Progress",
    "add_spark_options",
    "conf_pairs",
    "dsn_of",
    "install_stop_signals",
    "option_pairs",
    "progress_wanted",
    "spark_for",
]

log = logging.getLogger("txjoin")

DEFAULT_HOME = Path(os.environ.get("TXJOIN_HOME", ".txjoin"))


def dsn_of(args: argparse.Namespace) -> str:
    """The ``--dsn`` option, else ``$TXJOIN_DSN``."""
    dsn: str | None = args.dsn or os.environ.get("TXJOIN_DSN")
    if not dsn:
        raise ConfigError("no database given: pass --dsn 'host=... dbname=...' or set TXJOIN_DSN")
    return dsn


def install_stop_signals(stop: threading.Event, doing: str = "stopping") -> None:
    """SIGINT and SIGTERM set ``stop``; a second Ctrl-C aborts (KeyboardInterrupt)."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C: leave now
            raise KeyboardInterrupt
        log.info("%s (signal %d); press Ctrl-C again to abort", doing, signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def progress_wanted() -> bool:
    """Progress lines go to a terminal, or anywhere with ``TXJOIN_PROGRESS=1``."""
    return sys.stderr.isatty() or os.environ.get("TXJOIN_PROGRESS") == "1"


class Progress:
    """A status line on stderr while long work runs: redrawn in place on a terminal, a plain
    line every ``every`` seconds otherwise. ``line()`` returning "" shows nothing; ``done()``
    returning true ends the display."""

    def __init__(
        self,
        line: Callable[[], str],
        *,
        quiet: bool = False,
        every: float = 10.0,
        done: Callable[[], bool] = lambda: False,
    ) -> None:
        self.line = line
        self.quiet = quiet
        self.done = done
        self.tty = sys.stderr.isatty()
        self.every = 0.5 if self.tty else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._width = 0

    def _run(self) -> None:
        while not self._stop.wait(self.every) and not self.done():
            try:
                text = self.line()
            except Exception as e:  # a display must never stop the work it shows
                text = f"(progress unavailable: {e})"
            if not text:
                continue
            if self.tty:
                text = text[:200]
                print("\r  " + text.ljust(self._width), end="", file=sys.stderr, flush=True)
                self._width = len(text)
            else:
                print(f"  {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)
        self._end()

    def _end(self) -> None:
        if self.tty and self._width:
            print(file=sys.stderr, flush=True)
            self._width = 0

    def __enter__(self) -> Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)


def spark_for(
    spec: Any, master: str | None = None, conf: Sequence[str] = (), *, short_lived: bool = False
) -> Any:
    """The Spark session a pipeline spec asks for; ``master`` and ``conf`` ("k=v") from the
    command line override the spec's ``[spark]``. ``short_lived``: a scenario run or a check
    (C1-only JIT, :data:`txjoin.session.SHORT_LIVED_JIT`), not a pipeline."""
    from txjoin.session import spark_session
    from txjoin.spec import memory

    settings = spec.spark.merged(master, conf_pairs(conf))
    return spark_session(
        f"txjoin-{spec.name}",
        cores=spec.options.spark_cores,
        driver_memory=memory(spec.options).driver,
        conf=settings.conf,
        master=settings.master,
        executor_memory=settings.executor_memory,
        short_lived=short_lived,
    )


def conf_pairs(items: Sequence[str]) -> dict[str, str]:
    """``--conf spark.x=y`` options as a dict."""
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.startswith("spark."):
            raise ConfigError(f"--conf {item!r}: write spark.setting=value")
        out[k] = v
    return out


def option_pairs(items: Sequence[str]) -> dict[str, Any]:
    """``--option name=value`` as pipeline options, each value typed like its default."""
    from txjoin.spec import Options

    defaults = Options()
    out: dict[str, Any] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or k not in Options.__dataclass_fields__:
            raise ConfigError(
                f"--option {item!r}: write name=value with a pipeline option: "
                f"{', '.join(sorted(Options.__dataclass_fields__))}"
            )
        kind = type(getattr(defaults, k))
        try:
            out[k] = (v.lower() in ("1", "true", "yes")) if kind is bool else kind(v)
        except ValueError:
            raise ConfigError(f"--option {item!r}: {k} takes a {kind.__name__}") from None
    return out


def add_spark_options(p: Any) -> None:
    """``--master`` and ``--conf`` on a command that starts Spark."""
    p.add_argument("--master", help="Spark master: local[N] (default), spark://host:port, yarn, k8s://...")
    p.add_argument(
        "--conf", action="append", default=[], metavar="spark.K=V", help="a Spark setting (repeatable)"
    )
