"""What capture writes through: its port to the changelog.

Capture only appends and flushes records, reads back its own last records
when it restarts, records a table's columns when they change, writes the
initial snapshot as Parquet files beside the topics, and trims its heartbeat
topic. :class:`txjoin.changelog.SegmentChangelog` implements this on
a local directory; a Kafka producer could implement it too. Whoever starts
capture chooses the writer (:func:`txjoin.runner.open_capture`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from txjoin.pg.catalog import Column

__all__ = ["ChangelogWriter"]


class ChangelogWriter(Protocol):
    """Not thread-safe: one thread appends and flushes."""

    def append(self, topic: str, value: bytes) -> int:
        """Buffer one record (a JSON value, no newline); return its offset in ``topic``."""
        ...

    def flush(self) -> None:
        """Make every appended record durable and visible.

        Data topics first, the transaction topic (name ending in
        ``.transaction``) last: once an END marker is visible, so are its
        transaction's events. Heartbeat topics may go any time.
        """
        ...

    def pending_bytes(self) -> int:
        """Bytes appended but not yet flushed."""
        ...

    def pending_age(self) -> float:
        """Seconds since the oldest unflushed append (0.0 if none)."""
        ...

    def read_backwards(self, topic: str) -> Iterator[bytes]:
        """The durable records of ``topic``, newest first."""
        ...

    def record_schema(
        self,
        topic: str,
        *,
        lsn: int,
        relation_oid: int,
        columns: Iterable[Column],
        primary_key: Sequence[str],
    ) -> None:
        """Keep ``topic``'s columns (as of ``lsn``) beside the changelog, when they changed."""
        ...

    def snapshot_file(self, snapshot: str, topic: str, part: int) -> Path:
        """Where capture writes part ``part`` (Parquet) of ``topic``'s rows in snapshot ``snapshot``."""
        ...

    def publish_snapshot(self, snapshot: str, manifest: dict[str, Any]) -> str:
        """Durably record a finished snapshot's manifest; return the reference its END marker carries."""
        ...

    def trim(self, topic: str, keep: int) -> None:
        """Drop old records of ``topic`` (its heartbeats), keeping about the last ``keep`` flushes."""
        ...

    def close(self) -> None:
        """Release the changelog; records not flushed are discarded."""
        ...
