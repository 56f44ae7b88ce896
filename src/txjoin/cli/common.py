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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txjoin.errors import ConfigError

__all__ = ["DEFAULT_HOME", "Progress", "dsn_of", "install_stop_signals", "progress_wanted", "spark_for"]

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
    """A status line on stderr every few seconds while long work runs."""

    def __init__(self, line: Callable[[], str], *, quiet: bool = False, every: float = 5.0) -> None:
        self.line = line
        self.quiet = quiet or not progress_wanted()
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(f"  {time.strftime('%H:%M:%S')} {self.line()}", file=sys.stderr, flush=True)

    def __enter__(self) -> Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def spark_for(spec: Any) -> Any:
    """The Spark session a pipeline spec asks for."""
    from txjoin.session import spark_session
    from txjoin.spec import memory

    return spark_session(
        f"txjoin-{spec.name}", cores=spec.options.spark_cores, driver_memory=memory(spec.options).driver
    )
