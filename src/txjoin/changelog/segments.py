"""The embedded changelog: append-only JSON-lines segment files, one directory per topic.

Layout (docs/design.md, "Changelog layout")::

    <root>/<topic>/<first:020d>-<last:020d>.jsonl   records first..last, one per line
    <root>/_writer.lock                              held by the one writer (its pid inside)
    <root>/_writer.<source>.lock                     or, one writer per source, each owning
                                                     the topics of its source only
    <root>/_index/<topic>                            the topic's segments, for readers (index.py)
    <root>/_*/                                       metadata of other components, not topics

Capture writes through its ``ChangelogWriter`` port
(:mod:`txjoin.capture.writer`); :class:`SegmentChangelog` implements it on a
local directory, and the pipeline reads it by offset (:mod:`.stream`, through
the index the writer keeps: :mod:`.index`), or, for checkpoints it began, as
Spark file streams (:func:`topic_glob`, :data:`SEGMENT_FILE_PATTERN`). Visibility is atomic per
segment: a segment is written under a hidden name (Spark's file source skips
names starting with '.' or '_'), fsynced, renamed into place, and the
directory fsynced. A writer killed at any
instant leaves only hidden temp files, which the next writer deletes.

Offsets count records per topic from 0 and are contiguous. A topic may start
past 0 when old segments were deleted on purpose (capture trims its heartbeat
topic), so only gaps *between* segments are damage.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.changelog import index, snapshots
from txjoin.changelog.schemas import SchemaLog
from txjoin.debezium.topics import DEBEZIUM_HEARTBEAT_PREFIX, TRANSACTION_SUFFIX
from txjoin.errors import ChangelogError, ConfigError
from txjoin.pg.catalog import Column

__all__ = [
    "LOCK_FILE",
    "SEGMENT_FILE_PATTERN",
    "SEGMENT_GLOB",
    "ChangelogReader",
    "Segment",
    "SegmentChangelog",
    "parse_segment_name",
    "segment_name",
    "topic_glob",
    "validate_topic",
]

#: The writer's lock file in the root; its name starts with '_' so it is never a topic.
LOCK_FILE = "_writer.lock"
#: A segment file's name, groups (first, last); valid as a Python and a Java regex.
SEGMENT_FILE_PATTERN = r"([0-9]{20})-([0-9]{20})\.jsonl"
#: Glob of segment file names (Spark's ``pathGlobFilter``).
SEGMENT_GLOB = "*.jsonl"

_SEGMENT_RE = re.compile(f"^{SEGMENT_FILE_PATTERN}$")
_TEMP_RE = re.compile(r"^\.\d{20}\.tmp$")
# Kafka's legal topic names, minus a leading '.' or '_' (hidden from Spark's file source).
_TOPIC_RE = re.compile(r"^[A-Za-z0-9-][A-Za-z0-9._-]{0,248}$")
_MAX_OFFSET = 10**20 - 1
_log = logging.getLogger(__name__)
# A directory listing can miss a segment renamed while it runs (and, with
# trimming, see an old segment deleted during it): list again before calling
# a gap damage.
_LIST_ATTEMPTS = 3


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first, last)`` offsets of a segment file name, or None if it is not one."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


def segment_name(first: int, last: int) -> str:
    """The file name of the segment holding offsets ``first..last``."""
    return f"{first:020d}-{last:020d}.jsonl"


def _temp_name(first: int) -> str:
    return f".{first:020d}.tmp"


def topic_glob(root: str | os.PathLike[str], prefixes: Sequence[str]) -> str:
    """A glob of the topic directories of sources ``prefixes`` under ``root``.

    Directories, not files: a file glob makes every segment a root path of
    Spark's file index, listed anew each trigger.
    """
    names = prefixes[0] if len(prefixes) == 1 else "{" + ",".join(prefixes) + "}"
    return f"{Path(root).absolute()}/{names}.*"


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a legal topic name, else raise ConfigError."""
    if not _TOPIC_RE.match(topic):
        raise ConfigError(
            f"topic name {topic!r} is invalid: use 1 to 249 letters, digits, '.', '_' or '-', "
            "not starting with '.' or '_' (Kafka's rule; such names are hidden from Spark)",
            topic=topic,
        )
    return topic


@dataclass(frozen=True)
class Segment:
    """One visible segment file of a topic: offsets ``first..last`` inclusive."""

    topic: str
    first: int
    last: int
    path: Path

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _list_segments(root: Path, topic: str, *, clean: bool) -> list[Segment]:
    """The segment files of ``topic`` sorted by first offset; refuses foreign files."""
    d = root / topic
    segments: list[Segment] = []
    try:
        entries = list(os.scandir(d))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise ChangelogError(
            f"{d} is a file where topic {topic} should be a directory: move it out of the "
            "changelog directory",
            path=str(d),
            topic=topic,
        ) from None
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            # Only our own temp names: a crashed writer's segment, never visible.
            # Other hidden files (editors, NFS) are not ours to delete; Spark skips them.
            if clean and _TEMP_RE.match(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            continue
        rng = parse_segment_name(name)
        if rng is None or not entry.is_file():
            raise ChangelogError(
                f"{entry.path} in topic {topic} is not a changelog segment (expected a file named "
                "<first:020d>-<last:020d>.jsonl): Spark would read it as records. Move it out of "
                "the changelog directory",
                path=entry.path,
                topic=topic,
            )
        segments.append(Segment(topic, rng[0], rng[1], Path(entry.path)))
    segments.sort(key=lambda s: (s.first, s.last))
    return segments


def _first_gap(segments: list[Segment]) -> tuple[Segment, int] | None:
    """The first segment that does not continue its predecessor, with the expected offset."""
    expected = segments[0].first if segments else 0
    for s in segments:
        if s.first != expected or s.last < s.first:
            return s, expected
        expected = s.last + 1
    return None


def _gap_error(topic: str, seg: Segment, expected: int) -> ChangelogError:
    if seg.last < seg.first:
        what = f"names a range that ends before it starts ({seg.first}..{seg.last})"
    elif seg.first < expected:
        what = f"overlaps the previous segment (it starts at {seg.first}, expected {expected})"
    else:
        what = f"leaves a gap (offsets {expected}..{seg.first - 1} are missing)"
    return ChangelogError(
        f"segment {seg.path} of topic {topic} {what}: the changelog is damaged. Restore the "
        "missing or conflicting segments from a backup, or move the changelog aside and capture "
        "again from a new slot",
        path=str(seg.path),
        topic=topic,
        offset=expected,
    )


def _scan_topic(root: Path, topic: str, *, clean: bool, attempts: int) -> list[Segment]:
    """Segments of ``topic`` in offset order, checked to be contiguous."""
    for attempt in range(attempts):
        segments = _list_segments(root, topic, clean=clean)
        gap = _first_gap(segments)
        if gap is None:
            return segments
        if attempt == attempts - 1:
            raise _gap_error(topic, *gap)
    raise AssertionError("unreachable")  # pragma: no cover


def _topics(root: Path) -> list[str]:
    """Topic directories of ``root``: '_' and '.' names are metadata; others are skipped
    when they cannot be topic names (``lost+found`` on a mounted volume)."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    return sorted(e.name for e in entries if e.is_dir() and _TOPIC_RE.match(e.name))


def _check_value(topic: str, value: bytes) -> None:
    # One record is one line; Spark's text source also splits lines at '\r'.
    if not value or b"\n" in value or b"\r" in value:
        what = "is empty" if not value else "contains a line break"
        raise ConfigError(
            f"record for topic {topic} {what}: a changelog record is one JSON value on one line "
            f"(serialize compactly, without indentation): {value[:80]!r}",
            topic=topic,
        )


class SegmentChangelog:
    """The writer of an embedded changelog directory; one per directory at a time,
    or, given ``source``, one per source: it then owns only that source's topics
    (``<source>.*`` and ``__debezium-heartbeat.<source>``), so the captures of
    several databases can share one changelog.

    ``append`` only buffers; ``flush`` writes one new segment per topic with
    pending records. Not thread-safe.
    """

    def __init__(self, root: str | os.PathLike[str], source: str | None = None) -> None:
        self.root = Path(root)
        self.source = source
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ChangelogError(
                f"cannot create the changelog directory {self.root}: {e.strerror}; check the path "
                "and its permissions",
                path=str(self.root),
            ) from e
        self._lock_fd = self._lock()
        self._index_warned: set[str] = set()
        self._index_broken: set[str] = set()  # topics whose index lacks a segment: no appends
        try:
            self._next: dict[str, int] = {}
            self._dirs: set[str] = set()  # topic directories known to exist
            for topic in _topics(self.root):
                if not self._owns(topic):
                    continue  # another source's writer cleans and extends it
                self._dirs.add(topic)
                segs = _scan_topic(self.root, topic, clean=True, attempts=1)
                self._next[topic] = segs[-1].last + 1 if segs else 0
                # A crash may have left the index a record short (or torn): readers list meanwhile.
                self._index(index.rewrite, topic, [(s.first, s.last) for s in segs])
        except BaseException:
            # A refused open must not keep the lock: the user fixes the store and retries.
            os.close(self._lock_fd)
            raise
        self._schemas = SchemaLog(self.root)
        self._pending: dict[str, list[bytes]] = {}
        self._pending_bytes = 0
        self._oldest = 0.0  # monotonic time of the oldest pending append; 0.0 if none
        self._closed = False

    def _owns(self, topic: str) -> bool:
        s = self.source
        return s is None or topic.startswith(s + ".") or topic == f"{DEBEZIUM_HEARTBEAT_PREFIX}{s}"

    def _lock(self) -> int:
        path = self.root / (LOCK_FILE if self.source is None else f"_writer.{self.source}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ChangelogError(
                f"changelog {self.root} is already being written by process {holder} (it holds "
                f"the lock {path}): run one capture per changelog directory and source; stop the "
                "other one or give this one another directory",
                path=str(self.root),
                pid=holder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # The lock dies with its process (kill -9 included); the pid is for the message only.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    # ---------------------------------------------------------------- writing
    def append(self, topic: str, value: bytes) -> int:
        """Buffer one record; return its offset in ``topic``."""
        if not value or b"\n" in value or b"\r" in value:
            _check_value(topic, value)
        buf = self._pending.get(topic)
        if buf is None:
            buf = self._start(topic)
        buf.append(value)
        self._pending_bytes += len(value) + 1
        if not self._oldest:
            self._oldest = time.monotonic()
        return self._next[topic] + len(buf) - 1

    def _start(self, topic: str) -> list[bytes]:
        """First pending record of ``topic`` since the last flush."""
        if self._closed:
            raise ChangelogError(
                f"changelog {self.root} is closed: open a new SegmentChangelog to write",
                path=str(self.root),
                topic=topic,
            )
        validate_topic(topic)
        if not self._owns(topic):
            raise ChangelogError(
                f"this writer of {self.root} owns the topics of source {self.source!r}, not {topic}",
                path=str(self.root),
                topic=topic,
            )
        buf: list[bytes] = []
        self._pending[topic] = buf
        self._next.setdefault(topic, 0)
        return buf

    def pending_bytes(self) -> int:
        return self._pending_bytes

    def pending_age(self) -> float:
        return time.monotonic() - self._oldest if self._oldest else 0.0

    def flush(self) -> None:
        """Write one segment per topic with pending records; the transaction topic last.

        On an I/O error the records of topics not yet written stay pending
        (offsets unchanged) and nothing partial is visible, so ``flush`` can be
        called again once the cause (a full disk) is fixed.
        """
        if self._closed:
            raise ChangelogError(f"changelog {self.root} is closed", path=str(self.root))
        if not self._pending:
            return
        # An END must never be visible before the events it counts: each data
        # segment is renamed and its directory fsynced before the transaction
        # topic's segment is written.
        order = sorted(self._pending, key=lambda t: (t.endswith(TRANSACTION_SUFFIX), t))
        for topic in order:
            records = self._pending[topic]
            if records:  # never an empty segment
                self._write_segment(topic, records)
            del self._pending[topic]
            self._pending_bytes -= sum(map(len, records)) + len(records)
        self._oldest = 0.0

    def _write_segment(self, topic: str, records: list[bytes]) -> None:
        d = self.root / topic
        first = self._next[topic]
        last = first + len(records) - 1
        if last > _MAX_OFFSET:
            raise ChangelogError(
                f"topic {topic} would pass offset {_MAX_OFFSET}, the largest a segment name holds",
                topic=topic,
                offset=first,
            )
        tmp = d / _temp_name(first)
        final = d / segment_name(first, last)
        try:
            created = topic not in self._dirs
            if created:
                d.mkdir(exist_ok=True)  # a failed flush may have made it
            with open(tmp, "wb") as f:
                # One write of the whole segment: per-record work stays in C.
                f.write(b"\n".join(records))
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, final)
            _fsync_dir(d)
            if created:
                _fsync_dir(self.root)
                self._dirs.add(topic)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise ChangelogError(
                f"cannot write segment {final} of topic {topic} (offsets {first}..{last}): "
                f"{e.strerror or e}. Free disk space or fix permissions of {self.root}, then flush "
                "again; the records are still pending and nothing partial is visible",
                path=str(final),
                topic=topic,
                offset=first,
            ) from e
        self._next[topic] = last + 1
        # After the rename, outside the try: the segment is visible, so a failed index write
        # must not fail the flush (whose retry would write the same offsets again).
        self._index(index.append, topic, first, last)

    def _index(self, op: Any, topic: str, *args: Any) -> None:
        """Update the index of ``topic``; on an I/O error it is discarded, and readers list the
        topic's directory until a rewrite (a writer's open or trim) succeeds."""
        if op is index.append and topic in self._index_broken:
            return
        try:
            op(self.root, topic, *args)
            self._index_broken.discard(topic)
        except OSError as e:
            self._index_broken.add(topic)
            try:
                index.discard(self.root, topic)
            except OSError as gone:
                # Not raised: the segment is visible, and a flush's retry would write it again.
                _log.error(
                    "cannot update or remove the segment index of topic %s in %s (%s; %s): readers "
                    "may miss its newest segments. Remove %s, fix the disk, and restart capture",
                    topic,
                    self.root,
                    e.strerror or e,
                    gone.strerror or gone,
                    self.root / index.INDEX_DIR / topic,
                )
            if topic in self._index_warned:
                return
            self._index_warned.add(topic)
            _log.warning(
                "cannot update the segment index of topic %s in %s (%s): readers list the topic "
                "directory instead, which is slower, until capture restarts",
                topic,
                self.root,
                e.strerror or e,
            )

    def read_backwards(self, topic: str) -> Iterator[bytes]:
        """The visible records of ``topic``, newest first (capture's restart reads its last END)."""
        for seg in reversed(_scan_topic(self.root, topic, clean=False, attempts=_LIST_ATTEMPTS)):
            yield from reversed(seg.path.read_bytes().rstrip(b"\n").split(b"\n"))

    def trim(self, topic: str, keep: int) -> None:
        """Delete all but the last ``keep`` segments of ``topic`` (old heartbeats are worthless)."""
        if not self._owns(topic):
            raise ChangelogError(
                f"this writer of {self.root} owns the topics of source {self.source!r}, not {topic}",
                path=str(self.root),
                topic=topic,
            )
        segs = _scan_topic(self.root, topic, clean=False, attempts=_LIST_ATTEMPTS)
        cut = max(0, len(segs) - keep)
        for seg in segs[:cut]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path)
        self._index(index.rewrite, topic, [(s.first, s.last) for s in segs[cut:]])

    def record_schema(
        self,
        topic: str,
        *,
        lsn: int,
        relation_oid: int,
        columns: Iterable[Column],
        primary_key: Sequence[str],
    ) -> None:
        """Record ``topic``'s columns in the schema side files when they changed."""
        self._schemas.record(
            topic, lsn=lsn, relation_oid=relation_oid, columns=list(columns), primary_key=primary_key
        )

    def snapshot_file(self, snapshot: str, topic: str, part: int) -> Path:
        """Where part ``part`` of ``topic``'s rows in ``snapshot`` goes (:mod:`.snapshots`)."""
        if not self._owns(topic):
            raise ChangelogError(
                f"this writer of {self.root} owns the topics of source {self.source!r}, not {topic}",
                path=str(self.root),
                topic=topic,
            )
        return snapshots.part_path(self.root, topic.split(".", 1)[0], snapshot, topic, part)

    def publish_snapshot(self, snapshot: str, manifest: dict[str, Any]) -> str:
        """Durably write ``snapshot``'s manifest (after its files); return its path in the changelog."""
        return snapshots.publish(self.root, str(manifest["source"]), snapshot, manifest)

    def close(self) -> None:
        """Release the directory; records not flushed are discarded."""
        if self._closed:
            return
        self._closed = True
        self._pending = {}
        self._pending_bytes = 0
        self._oldest = 0.0
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def __enter__(self) -> SegmentChangelog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -------------------------------------------------------------------- reading
def _damaged(seg: Segment, what: str) -> ChangelogError:
    return ChangelogError(
        f"segment {seg.path} of topic {seg.topic} {what}: the changelog is damaged (segments "
        "are only ever written whole). Restore it from a backup, or move the changelog aside and "
        "capture again from a new slot",
        path=str(seg.path),
        topic=seg.topic,
        offset=seg.first,
    )


def _last_line(seg: Segment) -> bytes:
    """The last record of ``seg``, read backwards from the end of the file."""
    with open(seg.path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        if pos == 0:
            raise _damaged(seg, "is empty")
        tail = b""
        chunk = 1 << 14
        while True:
            n = min(chunk, pos)
            pos -= n
            f.seek(pos)
            tail = f.read(n) + tail
            if not tail.endswith(b"\n"):
                raise _damaged(seg, "does not end with a newline")
            i = tail.rfind(b"\n", 0, len(tail) - 1)
            if i >= 0:
                return tail[i + 1 : -1]
            if pos == 0:
                return tail[:-1]
            chunk *= 2  # long records: keep the number of reads logarithmic


class ChangelogReader:
    """Reads an embedded changelog, also while its writer is appending.

    Only visible (renamed) segments are read; listings that race with the
    writer are retried before a gap is called damage.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def topics(self) -> list[str]:
        """Topic names, sorted; metadata directories (``_schemas`` ...) are not topics."""
        return _topics(self.root)

    def segments(self, topic: str) -> list[Segment]:
        """Visible segments of ``topic`` in offset order (empty for an unknown topic)."""
        validate_topic(topic)
        return _scan_topic(self.root, topic, clean=False, attempts=_LIST_ATTEMPTS)

    def read(self, topic: str, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` pairs of ``topic`` from ``start_offset`` on, in order.

        Reads the segments visible when it starts. A trimmed topic starts at
        its first kept offset.
        """
        yielded = False
        for seg in self.segments(topic):
            if seg.last < start_offset:
                continue
            try:
                with open(seg.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                if not yielded:
                    continue  # trimmed since the listing: the topic now starts later
                raise ChangelogError(
                    f"segment {seg.path} of topic {topic} was deleted while it was being read "
                    "(trimmed by another process?): read again from the offset reached",
                    path=str(seg.path),
                    topic=topic,
                    offset=seg.first,
                ) from None
            if not data.endswith(b"\n"):
                raise _damaged(seg, "does not end with a newline")
            lines = data[:-1].split(b"\n")
            if len(lines) != seg.count:
                raise _damaged(seg, f"holds {len(lines)} records but its name says {seg.count}")
            skip = max(0, start_offset - seg.first)
            for i in range(skip, len(lines)):
                yielded = True
                yield seg.first + i, lines[i]

    def last(self, topic: str) -> tuple[int, bytes] | None:
        """The last record of ``topic`` and its offset, or None if it has none."""
        for attempt in range(_LIST_ATTEMPTS):
            segs = self.segments(topic)
            if not segs:
                return None
            try:
                return segs[-1].last, _last_line(segs[-1])
            except FileNotFoundError:
                if attempt == _LIST_ATTEMPTS - 1:
                    raise ChangelogError(
                        f"the last segment of topic {topic} keeps disappearing ({segs[-1].path}): "
                        "another process is deleting segments; stop it and read again",
                        path=str(segs[-1].path),
                        topic=topic,
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def end_offset(self, topic: str) -> int:
        """The offset the next record of ``topic`` will get."""
        segs = self.segments(topic)
        return segs[-1].last + 1 if segs else 0
