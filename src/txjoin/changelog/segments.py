"""The embedded changelog: append-only JSON-lines segment files per topic.

Layout (docs/design.md): ``<root>/<topic>/<first:020d>-<last:020d>.jsonl``,
one record per line, offsets counted from 0 per topic. A segment is written
under a hidden name, fsynced, renamed into place and the directory fsynced,
so a reader (Spark's file source ignores names starting with '.' or '_')
never sees a partial segment, and a crash leaves only hidden temp files,
removed on the next open.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from txjoin.errors import ChangelogError, ConfigError

__all__ = [
    "ChangelogReader",
    "ChangelogWriter",
    "Segment",
    "SegmentChangelog",
    "parse_segment_name",
    "validate_topic",
]

_SEGMENT_RE = re.compile(r"^(\d{20})-(\d{20})\.jsonl$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._$-]{0,248}$")
_LOCK = "_writer.lock"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first, last)`` offsets of a segment file name, or None if it is not one."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


def validate_topic(topic: str) -> str:
    if not _TOPIC_RE.match(topic):
        raise ConfigError(
            f"topic name {topic!r} is invalid: use letters, digits, '.', '_', '$' or '-', not "
            "starting with '.' or '_', at most 249 characters",
            topic=topic,
        )
    return topic


class ChangelogWriter(Protocol):
    """What capture writes through; a Kafka producer could implement it too."""

    def append(self, topic: str, value: bytes) -> int:
        """Buffer one record (a JSON value, no newline); return its offset."""
        ...

    def flush(self) -> None:
        """Make every appended record durable and visible.

        Data topics first, the transaction topic last: once an END marker is
        visible, so are its transaction's events.
        """
        ...

    def pending_bytes(self) -> int:
        """Bytes appended but not yet flushed."""
        ...

    def pending_age(self) -> float:
        """Seconds since the oldest unflushed append (0.0 if none)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Segment:
    topic: str
    first: int
    last: int
    path: Path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _scan_topic(root: Path, topic: str, *, clean: bool) -> list[Segment]:
    """Segments of ``topic`` in order; checks names and contiguity."""
    d = root / topic
    segments: list[Segment] = []
    for entry in os.scandir(d):
        if entry.name.startswith("."):
            if clean and entry.name.endswith(".tmp"):
                os.unlink(entry.path)  # a crashed writer's never-visible segment
            continue
        rng = parse_segment_name(entry.name)
        if rng is None:
            raise ChangelogError(
                f"{entry.path} is not a changelog segment (expected "
                "<first:020d>-<last:020d>.jsonl): Spark would read it as records; move it out "
                "of the changelog directory",
                path=entry.path,
            )
        segments.append(Segment(topic, rng[0], rng[1], Path(entry.path)))
    segments.sort(key=lambda s: s.first)
    expected = segments[0].first if segments else 0
    for s in segments:
        if s.first != expected or s.last < s.first:
            raise ChangelogError(
                f"segment {s.path} does not continue topic {topic} at offset {expected}: segments "
                "are missing, overlap or were renamed; the changelog is damaged. Restore the "
                "missing segments or start a new changelog",
                path=str(s.path),
                topic=topic,
                offset=expected,
            )
        expected = s.last + 1
    return segments


def _topics(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(("_", ".")))


class SegmentChangelog:
    """The writer of an embedded changelog directory (one per directory)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._lock_fd)
            raise ChangelogError(
                f"changelog {self.root} is being written by another process (pid {holder}): "
                "run one capture per changelog directory, or stop the other one",
                path=str(self.root),
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)
        self._next: dict[str, int] = {}
        for topic in _topics(self.root):
            segs = _scan_topic(self.root, topic, clean=True)
            self._next[topic] = segs[-1].last + 1 if segs else 0
        self._pending: dict[str, list[bytes]] = {}
        self._pending_bytes = 0
        self._oldest: float | None = None
        self._closed = False

    def append(self, topic: str, value: bytes) -> int:
        buf = self._pending.get(topic)
        if buf is None:
            validate_topic(topic)
            buf = self._pending[topic] = []
            self._next.setdefault(topic, 0)
        buf.append(value)
        self._pending_bytes += len(value) + 1
        if self._oldest is None:
            self._oldest = time.monotonic()
        return self._next[topic] + len(buf) - 1

    def pending_bytes(self) -> int:
        return self._pending_bytes

    def pending_age(self) -> float:
        return 0.0 if self._oldest is None else time.monotonic() - self._oldest

    def flush(self) -> None:
        if self._closed:
            raise ChangelogError(f"changelog {self.root} is closed")
        if not self._pending_bytes:
            return
        # The transaction topic last: an END must never be visible before
        # the events it counts.
        topics = sorted(self._pending, key=lambda t: (t.endswith(".transaction"), t))
        for topic in topics:
            records = self._pending[topic]
            if not records:
                continue
            self._write_segment(topic, records)
        self._pending = {}
        self._pending_bytes = 0
        self._oldest = None

    def _write_segment(self, topic: str, records: list[bytes]) -> None:
        d = self.root / topic
        created = not d.exists()
        if created:
            d.mkdir()
        first = self._next[topic]
        last = first + len(records) - 1
        tmp = d / f".{first:020d}.tmp"
        with open(tmp, "wb") as f:
            f.write(b"\n".join(records) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, d / f"{first:020d}-{last:020d}.jsonl")
        _fsync_dir(d)
        if created:
            _fsync_dir(self.root)
        self._next[topic] = last + 1

    def close(self) -> None:
        """Release the directory; unflushed records are discarded."""
        if self._closed:
            return
        self._closed = True
        self._pending = {}
        self._pending_bytes = 0
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def __enter__(self) -> SegmentChangelog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChangelogReader:
    """Reads an embedded changelog (while a writer may be appending)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def topics(self) -> list[str]:
        return _topics(self.root)

    def segments(self, topic: str) -> list[Segment]:
        if not (self.root / topic).is_dir():
            return []
        return _scan_topic(self.root, topic, clean=False)

    def read(self, topic: str, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` pairs of ``topic`` from ``start_offset`` on."""
        for seg in self.segments(topic):
            if seg.last < start_offset:
                continue
            with open(seg.path, "rb") as f:
                lines = f.read().split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            if len(lines) != seg.last - seg.first + 1:
                raise ChangelogError(
                    f"segment {seg.path} holds {len(lines)} records but its name says "
                    f"{seg.last - seg.first + 1}: the changelog is damaged",
                    path=str(seg.path),
                )
            for i, line in enumerate(lines):
                offset = seg.first + i
                if offset >= start_offset:
                    yield offset, line

    def last(self, topic: str) -> tuple[int, bytes] | None:
        segs = self.segments(topic)
        if not segs:
            return None
        seg = segs[-1]
        with open(seg.path, "rb") as f:
            data = f.read().rstrip(b"\n")
        return seg.last, data.rsplit(b"\n", 1)[-1]

    def end_offset(self, topic: str) -> int:
        segs = self.segments(topic)
        return segs[-1].last + 1 if segs else 0
