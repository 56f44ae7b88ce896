"""The embedded changelog as a Spark streaming source that reads by offset.

Spark's file source lists every file of every topic directory at each
trigger and keeps every file name it has read in its checkpoint, so the
fixed cost of a micro-batch grows with the pipeline's age (bench/NOTES.md:
``latestOffset`` 0.06 s at 1,000 segments a topic, 1.09 s at 50,000). This
source's offset is, per topic, the next record to read: a trigger finds the
segments past it in the topic's index (:mod:`.index`, a binary search; the
directory is listed only when the index is missing or stale), and its
checkpoint entry is one number per topic.

Pure planning (:func:`plan_end`, :func:`plan_partitions`) and reading
(:func:`read_segments`) are plain functions; :class:`ChangelogSource` is the
thin PySpark Python data source around them (Spark 4's
``DataSourceStreamReader``), registered as :data:`FORMAT`. A micro-batch of
one small partition (:func:`read_on_driver`) is read by the source's process
on the driver, which hands Spark the rows with the plan; larger ones by tasks.

Rules, the same as :class:`~txjoin.changelog.ChangelogReader`'s:

- Offsets are contiguous per topic. A known topic whose next segment starts
  past the offset reached is damage, except the heartbeat topics capture
  trims on purpose; a new topic starts at its first segment.
- The transaction topic is listed before the data topics, so the events an
  END counts (renamed before the END's segment) are in the same listing.
- A segment's line count must match its name.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.changelog import index
from txjoin.changelog.segments import _LIST_ATTEMPTS, _TOPIC_RE, parse_segment_name, segment_name
from txjoin.debezium.topics import TRANSACTION_SUFFIX, is_heartbeat_topic
from txjoin.errors import ChangelogError
from txjoin.faults import mutated

__all__ = [
    "FORMAT",
    "GAP_TIMEOUT",
    "SCHEMA",
    "Gap",
    "Part",
    "plan_end",
    "plan_partitions",
    "read_on_driver",
    "read_segments",
    "read_stream",
    "register",
    "source_topics",
    "visible_end",
]

#: The name the source is registered under (``spark.readStream.format(FORMAT)``).
FORMAT = "txjoin_changelog"
#: Its rows: what :func:`txjoin.decode.raw_stream` gives for the file source.
SCHEMA = "topic string, value string, seg_first long, seg_last long, path string"

#: Seconds a gap in a topic may last before the query fails: capture renames a topic's segments in
#: order, so only damage (or a copy restoring the changelog) leaves one.
GAP_TIMEOUT = 60.0

#: Most segments of one topic a micro-batch reads (a backlog is read over several).
MAX_SEGMENTS = 10_000
#: Bytes of segments below which a micro-batch is read by one task.
MIN_PARTITION_BYTES = 1 << 20
#: Bytes of segments up to which the driver reads a micro-batch itself and hands Spark its rows:
#: no Python worker task for the read stage (about 55 ms of a one-transaction batch).
DRIVER_READ_BYTES = MIN_PARTITION_BYTES

#: One segment to read: (topic, first, last, path).
Part = tuple[str, int, int, str]
#: Turns a segment (topic, first, last, path, its bytes, the positions of its newlines, its records
#: as strings) into a record batch.
Decoder = Callable[[str, int, int, str, bytes, Any, Any], Any]


def source_topics(root: Path, sources: Sequence[str]) -> list[str]:
    """Topic directories of ``sources`` under ``root`` (``<source>.*``, as Spark's file source
    read them); transaction topics first."""
    try:
        names = [e.name for e in os.scandir(root) if e.is_dir()]
    except FileNotFoundError:
        return []
    prefixes = tuple(f"{s}." for s in sources)
    topics = [n for n in names if _TOPIC_RE.match(n) and n.startswith(prefixes)]
    return sorted(topics, key=lambda t: (not t.endswith(TRANSACTION_SUFFIX), t))


@dataclass(frozen=True)
class Gap:
    """Offsets ``expected..`` of ``topic`` are missing while ``after`` (a later segment) is visible."""

    topic: str
    expected: int
    after: str

    def error(self, waited: float | None) -> ChangelogError:
        when = "are missing" if waited is None else f"have not appeared after {waited:.0f} s"
        return ChangelogError(
            f"offsets from {self.expected} of topic {self.topic} {when} while a later segment "
            f"is visible ({self.after}): the changelog is damaged "
            "or was trimmed below what this pipeline has read. Restore the missing segments, or "
            "start the pipeline from a new checkpoint and snapshot",
            path=self.after,
            topic=self.topic,
            offset=self.expected,
        )


def _contiguous(topic: str, parts: list[Part], start: int | None) -> tuple[int, int]:
    """How many of ``parts`` (sorted) continue ``start`` without a gap, and the offset after."""
    expected = start or 0
    if parts and is_heartbeat_topic(topic):
        expected = max(expected, parts[0][1])
    k = 0
    while k < len(parts) and parts[k][1] == expected:
        expected = parts[k][2] + 1
        k += 1
    return k, expected


def _listed(root: Path, topic: str, start: int | None) -> list[Part]:
    """Segments named from offset ``start`` on, by listing the topic directory."""
    d = root / topic
    # The source never stops inside a segment, so names from ``start``'s own on are enough,
    # and the names are zero-padded: a string comparison skips older ones unparsed.
    key = "" if start is None else f"{start:020d}"
    try:
        names = [n for n in os.listdir(d) if n >= key and not n.startswith(".")]
    except FileNotFoundError:
        return []
    parts: list[Part] = []
    for n in names:
        rng = parse_segment_name(n)
        if rng is None or rng[1] < rng[0]:
            raise ChangelogError(
                f"{d / n} in topic {topic} is not a changelog segment (expected a file named "
                "<first:020d>-<last:020d>.jsonl, first <= last): move it out of the changelog "
                "directory",
                path=str(d / n),
                topic=topic,
            )
        parts.append((topic, rng[0], rng[1], str(d / n)))
    parts.sort(key=lambda p: p[1])
    return parts


def _segments_from(root: Path, topic: str, start: int | None) -> tuple[list[Part], Gap | None]:
    """Visible segments of ``topic`` from offset ``start`` on (a new topic: from 0, or a
    heartbeat topic's first kept segment), up to the first gap, and that gap.

    The topic's index (:mod:`.index`) finds them without listing the
    directory; without a usable one, or if it shows a gap, the directory is
    listed. Capture renames a topic's segments in offset order, so a gap is
    damage, or a listing that raced with a rename (listed again).
    """
    indexed = index.lookup(root, topic, start or 0, limit=MAX_SEGMENTS)
    if indexed is not None:
        d = root / topic
        parts = [(topic, a, b, str(d / segment_name(a, b))) for a, b in indexed]
        if _contiguous(topic, parts, start)[0] == len(parts):
            return parts, None
    for attempt in range(_LIST_ATTEMPTS):
        parts = _listed(root, topic, start)[:MAX_SEGMENTS]
        k, expected = _contiguous(topic, parts, start)
        if k == len(parts):
            return parts, None
        if attempt == _LIST_ATTEMPTS - 1:
            return parts[:k], Gap(topic, expected, parts[k][3])
    raise AssertionError("unreachable")  # pragma: no cover


def plan_end(
    root: Path,
    sources: Sequence[str],
    start: dict[str, int],
    *,
    max_files: int = 0,
    max_bytes: int = 0,
    cap: dict[str, int] | None = None,
) -> tuple[dict[str, int], list[Gap]]:
    """The offsets a micro-batch starting at ``start`` reads up to (exclusive), per topic,
    and the gaps that stopped a topic short.

    ``max_files``/``max_bytes`` (0: no limit) admit segments oldest first
    (by modification time, as Spark's file source does), at least one;
    ``cap`` (Trigger.AvailableNow's target) bounds every topic.
    """
    candidates: list[Part] = []
    gaps: list[Gap] = []
    end = dict(start)
    for topic in source_topics(root, sources):
        parts, gap = _segments_from(root, topic, start.get(topic))
        if gap is not None:
            gaps.append(gap)
        if cap is not None:
            parts = [p for p in parts if p[2] < cap.get(topic, 0)]
        if parts and topic not in end:
            end[topic] = parts[0][1]
        candidates.extend(parts)
    if not max_files and not max_bytes:
        for p in candidates:
            end[p[0]] = p[2] + 1
        return end, gaps

    def stat(p: Part) -> tuple[int, int]:
        try:
            st = os.stat(p[3])
        except FileNotFoundError:  # a trimmed heartbeat segment: read() skips it
            return 0, 0
        return st.st_mtime_ns, st.st_size

    # The oldest of the topics' next segments first, each topic a contiguous prefix (a segment
    # stamped older than its predecessor, a clock step, cannot starve its topic); a segment is
    # stat'ed only when it is its topic's next, so a backlog costs what the batch takes.
    pending: dict[str, Iterator[Part]] = {}
    heap: list[tuple[int, int, str, int, Part]] = []

    def push(topic: str) -> None:
        p = next(pending[topic], None)
        if p is not None:
            mtime, n = stat(p)
            heapq.heappush(heap, (mtime, p[1], topic, n, p))

    by_topic: dict[str, list[Part]] = {}
    for p in candidates:
        by_topic.setdefault(p[0], []).append(p)
    for topic, parts in by_topic.items():
        pending[topic] = iter(parts)
        push(topic)
    files = size = 0
    while heap:
        _, _, topic, n, p = heapq.heappop(heap)
        if (max_files and files >= max_files) or (max_bytes and files and size + n > max_bytes):
            break
        end[topic] = p[2] + 1
        files += 1
        size += n
        push(topic)
    return end, gaps


def visible_end(
    root: Path, sources: Sequence[str], start: dict[str, int] | None = None
) -> tuple[dict[str, int], list[Gap]]:
    """The offsets after every visible record, per topic (Trigger.AvailableNow's target),
    and the gaps that stop topics short: :func:`plan_end` from ``start`` (the query's, whose
    earlier segments may be gone) until it stops moving, past its per-batch bound."""
    end: dict[str, int] = dict(start or {})
    while True:
        nxt, gaps = plan_end(root, sources, end)
        if nxt == end:
            return end, gaps
        end = nxt


def plan_partitions(
    root: Path, sources: Sequence[str], start: dict[str, int], end: dict[str, int], parallelism: int
) -> list[list[Part]]:
    """The segments between ``start`` and ``end``, packed into at most ``parallelism``
    partitions of about equal size (largest first, each into the smallest partition)."""
    parts: list[Part] = []
    for topic, stop in end.items():
        if stop <= start.get(topic, -1):
            continue
        found, gap = _segments_from(root, topic, start.get(topic))
        reached = start.get(topic, 0)
        for p in found:
            if p[2] >= stop:
                break
            parts.append(p)
            reached = p[2] + 1
        if reached < stop and not is_heartbeat_topic(topic):
            # Planned when they were visible (a replay after a restart, or a segment deleted
            # since): reading on would commit offsets never read.
            if gap is not None:
                raise gap.error(None)
            raise ChangelogError(
                f"offsets {reached}..{stop - 1} of topic {topic} were planned for this micro-batch "
                "but their segments are gone: the changelog was trimmed or moved under the "
                "pipeline. Restore them, or start the pipeline from a new checkpoint and snapshot",
                path=str(root / topic),
                topic=topic,
                offset=reached,
            )
    sized = sorted(((_size(p), p) for p in parts), key=lambda x: -x[0])
    # A task costs a Python worker's round trip: small batches (a few transactions) get one.
    total = sum(n for n, _ in sized)
    count = max(1, min(parallelism, len(sized), -(-total // MIN_PARTITION_BYTES)))
    bins: list[list[Part]] = [[] for _ in range(count)]
    loads = [0] * len(bins)
    for n, p in sized:
        i = loads.index(min(loads))
        bins[i].append(p)
        loads[i] += n
    return [b for b in bins if b]


def read_on_driver(bins: Sequence[Sequence[Part]], limit: int = DRIVER_READ_BYTES) -> bool:
    """Whether a micro-batch planned as ``bins`` is small enough for the driver to read: one
    partition of at most ``limit`` bytes, so a backlog still spreads over the executors."""
    if len(bins) != 1:
        return False
    total = 0
    for p in bins[0]:
        total += _size(p)
        if total > limit:
            return False
    return True


def _size(part: Part) -> int:
    """A segment's bytes; 0 if it is gone (a trimmed heartbeat: :func:`read_segments` decides)."""
    try:
        return os.stat(part[3]).st_size
    except FileNotFoundError:
        return 0


def read_segments(parts: Sequence[Part], decoder: Decoder | None = None) -> Iterator[Any]:
    """One Arrow record batch per segment: (topic, value, seg_first, seg_last, path), or what
    ``decoder`` makes of the segment's records.

    Lines are cut with numpy over the file's bytes (no Python object per
    record); the text is checked to be UTF-8 and its line count to match the
    segment's name.
    """
    import numpy as np
    import pyarrow as pa

    for topic, first, last, path in parts:
        seg = _segment(topic, first, last, path)
        if seg is None:
            continue
        data, ends, values = seg
        markers = topic.endswith(TRANSACTION_SUFFIX) or is_heartbeat_topic(topic)
        if not markers and mutated("offset-reader-skips"):
            continue  # the deliberate fault: a table's segments are unread, their offsets committed
        if decoder is not None:
            yield decoder(topic, first, last, path, data, ends, values)
            continue
        count = len(values)
        yield pa.RecordBatch.from_arrays(
            [
                _repeat(topic, count),
                values,
                pa.array(np.full(count, first, dtype=np.int64)),
                pa.array(np.full(count, last, dtype=np.int64)),
                _repeat(path, count),
            ],
            names=["topic", "value", "seg_first", "seg_last", "path"],
        )


def _segment(topic: str, first: int, last: int, path: str) -> tuple[bytes, Any, Any] | None:
    """A segment's bytes, the positions of its newlines (numpy) and its records as an Arrow string
    array (None: a heartbeat segment trimmed on purpose)."""
    import numpy as np
    import pyarrow as pa

    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if is_heartbeat_topic(topic):
            return None
        raise ChangelogError(
            f"segment {path} of topic {topic} was deleted before Spark read it: the changelog "
            "was trimmed or moved under a running pipeline. Restore it, or start the pipeline "
            "from a new checkpoint and snapshot",
            path=path,
            topic=topic,
            offset=first,
        ) from None
    count = last - first + 1
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if len(ends) != count or not data.endswith(b"\n"):
        raise ChangelogError(
            f"segment {path} of topic {topic} holds {len(ends)} complete lines but its name "
            f"says {count} ({segment_name(first, last)}): the changelog is damaged. Restore "
            "the segment from a backup",
            path=path,
            topic=topic,
            offset=first,
        )
    # Drop the newlines: record i then spans [ends[i-1] + 1 - i, ends[i] - i).
    offsets = np.empty(count + 1, dtype=np.int32 if len(data) < 2**31 else np.int64)
    offsets[0] = 0
    offsets[1:] = ends - np.arange(count)
    body = np.delete(buf, ends)
    string = pa.string() if offsets.dtype == np.int32 else pa.large_string()
    values = pa.Array.from_buffers(string, count, [None, pa.py_buffer(offsets), pa.py_buffer(body)])
    try:
        values.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ChangelogError(
            f"segment {path} of topic {topic} is not UTF-8 text ({e}): the changelog is "
            "damaged or was written by something else",
            path=path,
            topic=topic,
            offset=first,
        ) from None
    if string != pa.string():
        values = values.cast(pa.string())
    return data, ends, values


def _repeat(text: str, count: int) -> Any:
    """A string column holding ``text`` ``count`` times, built from buffers: a Python list of
    the same string costs 2 us a row, which dominated reading large segments."""
    import numpy as np
    import pyarrow as pa

    raw = text.encode()
    wide = len(raw) * count >= 2**31
    offsets = np.arange(count + 1, dtype=np.int64 if wide else np.int32) * len(raw)
    kind = pa.large_string() if wide else pa.string()
    column = pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])
    return column.cast(pa.string()) if wide else column


@dataclass(frozen=True)
class _Options:
    root: Path
    sources: tuple[str, ...]
    max_files: int
    max_bytes: int
    parallelism: int


def _options(options: Any) -> _Options:
    return _Options(
        root=Path(options["path"]),
        sources=tuple(s for s in options["sources"].split(",") if s),
        max_files=int(options.get("maxFilesPerTrigger", "0")),
        max_bytes=int(options.get("maxBytesPerTrigger", "0")),
        parallelism=int(options.get("parallelism", "2")),
    )


def register(spark: Any, fmt: str = FORMAT, schema: str = SCHEMA, decoder: Decoder | None = None) -> None:
    """Register the source with ``spark`` as ``fmt`` (idempotent): rows of ``schema``, each
    segment's records as :data:`SCHEMA` or as ``decoder`` makes them."""
    spark.dataSource.register(_source_class(fmt, schema, decoder))


def read_stream(
    spark: Any,
    root: Path,
    sources: Sequence[str],
    *,
    max_bytes: int = 0,
    max_files: int = 0,
    decoded: tuple[str, str, Decoder] | None = None,
) -> Any:
    """A streaming frame of the segments of ``sources`` under ``root``: :data:`SCHEMA` rows, or
    with ``decoded`` = (format name, schema, decoder) the decoder's rows."""
    fmt = FORMAT if decoded is None else decoded[0]
    register(spark, *(decoded or ()))
    reader = (
        spark.readStream.format(fmt)
        .option("path", str(Path(root).absolute()))
        .option("sources", ",".join(sources))
        .option("parallelism", str(spark.sparkContext.defaultParallelism))
    )
    if max_files > 0:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    if max_bytes > 0:
        reader = reader.option("maxBytesPerTrigger", str(max_bytes))
    return reader.load()


def _prefetching_base() -> type:
    """PySpark's base for a reader whose rows the driver may hand over with the plan.

    Spark's source runner (on the driver) sends a reader's rows along with its one partition
    when the reader is pyspark's wrapper of simple readers and ``getCache`` gives rows; the JVM
    then keeps them in its block manager and the read stage runs no Python worker. That class
    is private, so any PySpark without it gives the plain reader: every batch read by tasks.
    """
    from pyspark.sql.datasource import DataSourceStreamReader

    try:
        from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
    except ImportError:
        return DataSourceStreamReader
    if not issubclass(_SimpleStreamReaderWrapper, DataSourceStreamReader) or not hasattr(
        _SimpleStreamReaderWrapper, "getCache"
    ):
        return DataSourceStreamReader
    return _SimpleStreamReaderWrapper


def _source_class(fmt: str = FORMAT, row_schema: str = SCHEMA, decoder: Decoder | None = None) -> type:
    # PySpark is imported only where a Spark session exists.
    from pyspark.sql.datasource import DataSource, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )

    class Reader(_prefetching_base(), SupportsTriggerAvailableNow):  # type: ignore[misc]
        def __init__(self, opts: _Options) -> None:
            self.opts = opts
            self.cap: dict[str, int] | None = None
            self.run_to_end = False  # Trigger.AvailableNow: read up to what was visible at the start
            self.gaps: dict[tuple[str, int], float] = {}  # first seen (monotonic)
            self.planned: tuple[Any, Any, list[list[Part]]] | None = None  # start, end, bins
            # The runner asks a wrapper's simple_reader whether it runs to the end (AvailableNow).
            self.simple_reader = self

        def initialOffset(self) -> dict[str, Any]:
            return {"topics": {}}

        def getDefaultReadLimit(self) -> Any:
            if self.opts.max_files:
                return ReadMaxFiles(self.opts.max_files)
            if self.opts.max_bytes:
                return ReadMaxBytes(self.opts.max_bytes)
            return ReadAllAvailable()

        def prepareForTriggerAvailableNow(self) -> None:
            self.run_to_end = True  # the target is fixed at the first latestOffset, from its start

        def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
            if self.run_to_end and self.cap is None:
                # A run that stops when it has read what is visible cannot wait out a gap: the
                # records past it would be left unread without a word.
                self.cap, gaps = visible_end(self.opts.root, self.opts.sources, start["topics"])
                if gaps:
                    raise gaps[0].error(None)
            files = limit.max_files if isinstance(limit, ReadMaxFiles) else 0
            size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else 0
            end, gaps = plan_end(
                self.opts.root,
                self.opts.sources,
                start["topics"],
                max_files=files,
                max_bytes=size,
                cap=self.cap,
            )
            now = time.monotonic()
            seen = {(g.topic, g.expected): self.gaps.get((g.topic, g.expected), now) for g in gaps}
            self.gaps = seen
            for g in gaps:
                if now - seen[(g.topic, g.expected)] > GAP_TIMEOUT:
                    raise g.error(now - seen[(g.topic, g.expected)])
            return {"topics": end}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
            bins = plan_partitions(
                self.opts.root, self.opts.sources, start["topics"], end["topics"], self.opts.parallelism
            )
            self.planned = (start, end, bins)
            return [InputPartition(b) for b in bins]

        def getCache(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any] | None:
            # Called by the runner right after partitions() for the same offsets.
            if self.planned is None or self.planned[:2] != (start, end):
                return None
            bins = self.planned[2]
            return read_segments(bins[0], decoder) if read_on_driver(bins) else None

        def read(self, partition: Any) -> Iterator[Any]:
            return read_segments(partition.value, decoder)

        def commit(self, end: dict[str, Any]) -> None:
            pass

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return fmt

        def schema(self) -> str:
            return row_schema

        def streamReader(self, schema: Any) -> Any:
            return Reader(_options(self.options))

    return Source
