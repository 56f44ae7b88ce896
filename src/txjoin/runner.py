"""Running capture beside the Spark pipeline in one process (CLI, checks, scenarios).

Capture writes through a port (:mod:`txjoin.capture.writer`); this is where it
is connected to the embedded changelog (:func:`open_capture`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from txjoin.capture.config import CaptureConfig
from txjoin.capture.stream import Capture
from txjoin.changelog import SegmentChangelog
from txjoin.errors import TxJoinError
from txjoin.spec import PipelineSpec

__all__ = ["CaptureThreads", "open_capture"]

log = logging.getLogger(__name__)


def open_capture(config: CaptureConfig) -> Capture:
    """Capture of one source into the embedded changelog at ``config.changelog``.

    Takes the source's writer lock now (a second capture of the same source
    fails here); capture releases it when its run ends.
    """
    writer = SegmentChangelog(config.changelog, source=config.prefix)
    return Capture(config, writer, owns_writer=True)


class CaptureThreads:
    """One capture per source, in daemon threads; errors surface in ``check()``."""

    def __init__(self, spec: PipelineSpec, **overrides: Any) -> None:
        self.stop_event = threading.Event()
        self.captures = {
            name: open_capture(s.capture_config(spec.changelog, **overrides))
            for name, s in spec.sources.items()
            if s.format == "txjoin"  # Debezium topics are written by the team's own Debezium
        }
        self.errors: dict[str, BaseException] = {}
        self.threads = [
            threading.Thread(target=self._run, args=(name,), name=f"capture-{name}", daemon=True)
            for name in self.captures
        ]

    def _run(self, name: str) -> None:
        try:
            self.captures[name].run(self.stop_event)
        except BaseException as e:
            self.errors[name] = e
            self.stop_event.set()

    def start(self, timeout: float = 600) -> None:
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + timeout
        for name, cap in self.captures.items():
            while not cap.streaming.wait(0.2):
                self.check()
                if time.monotonic() > deadline:
                    raise TxJoinError(
                        f"capture of source {name!r} did not finish its snapshot within {timeout:.0f} s"
                    )
            log.info("source %s: snapshot done, streaming", name)

    def check(self) -> None:
        for e in self.errors.values():
            raise e

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)
        self.check()
