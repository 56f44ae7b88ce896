"""Running capture beside the Spark pipeline in one process (CLI, checks, scenarios)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from txjoin.errors import TxJoinError
from txjoin.spec import PipelineSpec

__all__ = ["CaptureThreads"]

log = logging.getLogger(__name__)


class CaptureThreads:
    """One capture per source, in daemon threads; errors surface in ``check()``."""

    def __init__(self, spec: PipelineSpec, **overrides: Any) -> None:
        from txjoin.capture.stream import Capture

        self.stop_event = threading.Event()
        self.captures = {
            name: Capture(s.capture_config(spec.changelog, **overrides)) for name, s in spec.sources.items()
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
