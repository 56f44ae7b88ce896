"""Running capture beside the Spark pipeline (CLI, checks, scenarios).

Capture writes through a port (:mod:`txjoin.capture.writer`); this is where it
is connected to the embedded changelog (:func:`open_capture`).
:class:`CaptureProcesses` (``txjoin run``, ``txjoin scenario run``) runs each
source's capture in a Python process of its own: capture decodes and encodes
every event in Python, and in the pipeline's process it held the GIL that the
driver's ``foreachBatch`` thread needs (bench/NOTES.md). :class:`CaptureThreads`
runs them in threads of the caller's process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from txjoin.capture.config import CaptureConfig
from txjoin.capture.snapshot import Progress
from txjoin.capture.stream import Capture, CaptureStats
from txjoin.changelog import SegmentChangelog
from txjoin.errors import TxJoinError
from txjoin.spec import PipelineSpec

__all__ = ["CaptureProcesses", "CaptureThreads", "open_capture"]

log = logging.getLogger(__name__)


def open_capture(config: CaptureConfig) -> Capture:
    """Capture of one source into the embedded changelog at ``config.changelog``.

    Takes the source's writer lock now (a second capture of the same source
    fails here); capture releases it when its run ends.
    """
    writer = SegmentChangelog(config.changelog, source=config.prefix)
    return Capture(config, writer, owns_writer=True)


def _capture_configs(spec: PipelineSpec, overrides: Mapping[str, Any]) -> dict[str, CaptureConfig]:
    """Each source's capture configuration, for the sources txjoin captures itself."""
    return {
        name: s.capture_config(spec.changelog, **overrides)
        for name, s in spec.sources.items()
        if s.format == "txjoin"  # Debezium topics are written by the team's own Debezium
    }


def _wait_streaming(captures: Mapping[str, Any], check: Callable[[], None], timeout: float) -> None:
    """Until every capture has finished its snapshot and streams; ``check`` raises what failed."""
    deadline = time.monotonic() + timeout
    for name, cap in captures.items():
        while not cap.streaming.wait(0.2):
            check()
            if time.monotonic() > deadline:
                raise TxJoinError(
                    f"capture of source {name!r} did not finish its snapshot within {timeout:.0f} s"
                )
        log.info("source %s: snapshot done, streaming", name)


class CaptureThreads:
    """One capture per source, in daemon threads; errors surface in ``check()``."""

    def __init__(self, spec: PipelineSpec, **overrides: Any) -> None:
        self.stop_event = threading.Event()
        self.captures = {name: open_capture(c) for name, c in _capture_configs(spec, overrides).items()}
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
        _wait_streaming(self.captures, self.check, timeout)

    def check(self) -> None:
        for e in self.errors.values():
            raise e

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)
        self.check()


class _Remote:
    """What a capture process last reported: the parts of :class:`Capture` callers read."""

    def __init__(self) -> None:
        self.stats = CaptureStats()
        self.streaming = threading.Event()
        self.snapshot_progress = Progress({}, {}, time.monotonic())


class CaptureProcesses:
    """One capture per source, each in a process of its own (``python -m txjoin.runner``).

    The same interface as :class:`CaptureThreads`. The configuration, DSN included, goes
    to the child on its stdin (never on its command line); the child reports its
    counters, snapshot progress and errors on its stdout, and logs to the same stderr.
    It stops when its stdin closes: on :meth:`stop`, or when this process dies (kill -9
    included), so no capture outlives the pipeline.
    """

    #: Seconds between a child's reports.
    REPORT_INTERVAL = 0.1

    def __init__(self, spec: PipelineSpec, **overrides: Any) -> None:
        self.configs = _capture_configs(spec, overrides)
        self.captures = {name: _Remote() for name in self.configs}
        self.errors: dict[str, BaseException] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._readers: list[threading.Thread] = []
        self._stopping = False

    def start(self, timeout: float = 600) -> None:
        root = logging.getLogger()
        fmt = next((h.formatter._fmt for h in root.handlers if h.formatter is not None), None)
        setup = (logging.getLogger("txjoin").getEffectiveLevel(), fmt or "txjoin: %(message)s")
        for name, config in self.configs.items():
            proc = subprocess.Popen(  # this interpreter, a fixed module
                [sys.executable, "-m", "txjoin.runner"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Out of the terminal's process group: Ctrl-C stops the pipeline after its
                # micro-batch, and the pipeline then stops capture (as it did its threads).
                start_new_session=True,
            )
            self._procs[name] = proc
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps((config, *setup)))
            proc.stdin.flush()  # stdin stays open: its end is the child's signal to stop
            t = threading.Thread(target=self._read, args=(name, proc), name=f"capture-{name}", daemon=True)
            t.start()
            self._readers.append(t)
        _wait_streaming(self.captures, self.check, timeout)

    def _read(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        remote = self.captures[name]
        assert proc.stdout is not None
        try:
            while True:
                kind, *body = pickle.load(proc.stdout)
                if kind == "status":
                    remote.stats, remote.snapshot_progress, streaming = body
                    if streaming:
                        remote.streaming.set()
                else:
                    self.errors[name] = body[0]
        except EOFError:
            pass
        except Exception as e:  # a report that does not unpickle: stop on it, do not guess
            self.errors[name] = TxJoinError(
                f"the capture process of source {name!r} sent a report this process cannot read "
                f"({type(e).__name__}: {e}); is txjoin the same version in both?",
                source=name,
            )
            proc.kill()
        code = proc.wait()
        if name not in self.errors and not self._stopping:  # even code 0: nothing is captured now
            self.errors[name] = TxJoinError(
                f"the capture process of source {name!r} exited (code {code}) without an error "
                "message before the pipeline stopped it (killed, or out of memory?); its stderr above "
                "may say more. Start the pipeline again: capture resumes from its slot",
                source=name,
            )

    def check(self) -> None:
        for e in list(self.errors.values()):
            raise e

    def stop(self) -> None:
        self._stopping = True
        for proc in self._procs.values():
            if proc.stdin is not None and not proc.stdin.closed:
                with contextlib.suppress(OSError):  # the child is gone already; _read recorded why
                    proc.stdin.close()
        for name, proc in self._procs.items():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                log.warning("capture of source %s did not stop within 60 s: killing it", name)
                proc.kill()
                proc.wait()
        for t in self._readers:
            t.join(10)
        self.check()


#: Seconds a capture process waits, after SIGTERM or SIGINT, for its pipeline to stop it.
_SIGNAL_GRACE = 90.0


def _child(messages: IO[bytes]) -> int:
    """A capture process's body: configuration on stdin, reports on ``messages``."""
    config, level, fmt = pickle.load(sys.stdin.buffer)
    logging.basicConfig(level=level, format=fmt, datefmt="%H:%M:%S")
    stop = threading.Event()
    lock = threading.Lock()

    def send(*msg: Any) -> None:
        with lock:
            messages.write(pickle.dumps(msg))
            messages.flush()

    capture: Capture | None = None

    def until_stdin_closes() -> None:
        # EOF: stop(), or the parent's death. os.read, not sys.stdin: a daemon thread blocked in
        # a buffered read makes the interpreter abort at exit ("could not acquire lock").
        while os.read(0, 1 << 16):
            pass
        if capture is None or not capture.streaming.is_set():
            # Slot set-up and the snapshot never look at ``stop``, and nothing of them is kept
            # before its manifest: exit now rather than hold the slot and changelog for hours.
            os._exit(1)
        stop.set()

    def signalled(signum: int, frame: Any) -> None:
        # A service manager's stop signals every process of the unit: the pipeline stops this
        # one by closing stdin after its last batch. Stop anyway if that does not come.
        timer = threading.Timer(_SIGNAL_GRACE, stop.set)
        timer.daemon = True  # never what keeps the process alive
        timer.start()

    signal.signal(signal.SIGTERM, signalled)
    signal.signal(signal.SIGINT, signalled)
    threading.Thread(target=until_stdin_closes, daemon=True).start()

    def status() -> None:
        if capture is not None:
            send("status", capture.stats, capture.snapshot_progress, capture.streaming.is_set())

    def report() -> None:
        while not stop.wait(CaptureProcesses.REPORT_INTERVAL):
            status()

    try:
        capture = open_capture(config)
        threading.Thread(target=report, daemon=True).start()
        capture.run(stop)
    except BaseException as e:  # the parent raises it from check()
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            e = TxJoinError(f"capture of source {config.prefix!r} failed: {type(e).__name__}: {e}")
        with contextlib.suppress(OSError):  # the parent is gone
            send("error", e)
        return 1
    with contextlib.suppress(OSError):
        status()
    return 0


if __name__ == "__main__":
    # Reports go on a copy of stdout; fd 1 then points at stderr, so a stray print cannot
    # break the stream of reports.
    _messages = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.exit(_child(_messages))
