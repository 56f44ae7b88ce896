"""A per-topic index of segments, so a reader finds the segments past an offset without
listing a directory that grows by a file per flush for as long as the pipeline runs.

``<root>/_index/<topic>`` holds one fixed-width record per segment,
``{first:020d}-{last:020d}\\n`` (:data:`RECORD` bytes), in offset order. The
writer appends a segment's record after renaming the segment into place, and
rewrites the index from a listing when it opens (a crash can leave the last
record missing or torn) and after trimming. A reader finds an offset by
binary search, so a trigger reads O(log n + new) bytes.

The index only speeds reading up; the segment files stay the truth. A reader
uses it only while its last write is not well behind the topic directory's
last change (:data:`STALE_AFTER`): a writer that died between a rename and
its append leaves the directory newer, and readers list the directory until
the next writer repairs the index.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["INDEX_DIR", "RECORD", "STALE_AFTER", "append", "discard", "lookup", "rewrite"]

#: Directory of the index files in the changelog root ('_': never a topic).
INDEX_DIR = "_index"
#: Bytes of one record.
RECORD = 42
#: Nanoseconds the topic directory may have changed after the index's last write before
#: readers stop trusting it (an append follows its rename within milliseconds).
STALE_AFTER = 2_000_000_000


def _path(root: Path, topic: str) -> Path:
    return root / INDEX_DIR / topic


def _record(first: int, last: int) -> bytes:
    return f"{first:020d}-{last:020d}\n".encode()


def append(root: Path, topic: str, first: int, last: int) -> None:
    """Add segment ``first..last`` of ``topic`` (already renamed into place)."""
    path = _path(root, topic)
    try:
        f = open(path, "ab")  # noqa: SIM115 - one write, closed below
    except FileNotFoundError:
        path.parent.mkdir(exist_ok=True)
        f = open(path, "ab")  # noqa: SIM115
    with f:
        f.write(_record(first, last))


def discard(root: Path, topic: str) -> None:
    """Make readers of ``topic`` list its directory until the next :func:`rewrite`: after a
    failed :func:`append` the index would lack a visible segment and still look fresh. Removed,
    or, if it cannot be, dated to 1970 (stale); raises only if neither works."""
    path = _path(root, topic)
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return  # no index: readers list already
    except OSError:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.utime(path, ns=(0, 0))


def rewrite(root: Path, topic: str, segments: Sequence[tuple[int, int]]) -> None:
    """Make the index of ``topic`` list ``segments`` (a fresh listing, in order), and fresh:
    newer than any change of the directory before the listing.

    An index of the right size whose first and last records match is kept
    (its middle is written only by :func:`append`; a reader that finds a gap
    there lists the directory): checking it costs two reads, not the index.
    """
    path = _path(root, topic)
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == RECORD * len(segments) and (
            not segments
            or (
                os.pread(f.fileno(), RECORD, 0) == _record(*segments[0])
                and os.pread(f.fileno(), RECORD, size - RECORD) == _record(*segments[-1])
            )
        ):
            os.utime(path)  # e.g. a temp file cleaned up changed the directory, not the segments
            return
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{topic}.tmp")
    with open(tmp, "wb") as f:
        for i in range(0, len(segments), 1 << 16):  # memory stays bounded on a long history
            f.write(b"".join(_record(a, b) for a, b in segments[i : i + (1 << 16)]))
    os.replace(tmp, path)


def lookup(root: Path, topic: str, start: int, limit: int = 0) -> list[tuple[int, int]] | None:
    """Segments of ``topic`` whose last offset is ``start`` or later, in order (the first
    ``limit`` of them if > 0); None when the index cannot be used (missing, or stale) and the
    directory must be listed."""
    path = _path(root, topic)
    try:
        changed = os.stat(root / topic).st_mtime_ns
    except FileNotFoundError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # missing, or unreadable: the listing is the truth anyway
        return None
    try:
        st = os.fstat(fd)
        if st.st_mtime_ns + STALE_AFTER < changed:
            return None
        n = st.st_size // RECORD  # a torn last record is ignored
        lo, hi = 0, n
        while lo < hi:  # the first record whose last offset is >= start
            mid = (lo + hi) // 2
            last = _parse(os.pread(fd, RECORD, mid * RECORD))
            if last is None:
                return None
            if last[1] < start:
                lo = mid + 1
            else:
                hi = mid
        count = n - lo if limit <= 0 else min(n - lo, limit)
        data = os.pread(fd, count * RECORD, lo * RECORD) if count > 0 else b""
    finally:
        os.close(fd)
    out: list[tuple[int, int]] = []
    for i in range(0, len(data) - RECORD + 1, RECORD):
        rec = _parse(data[i : i + RECORD])
        if rec is None:
            return None
        out.append(rec)
    return out


def _parse(rec: bytes) -> tuple[int, int] | None:
    """A record's (first, last), or None if it is not one this module wrote (then list)."""
    if len(rec) != RECORD or rec[20:21] != b"-" or rec[41:42] != b"\n":
        return None
    try:
        return int(rec[:20]), int(rec[21:41])
    except ValueError:
        return None
