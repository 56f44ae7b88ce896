"""The changelog: one topic per table, a transaction topic and heartbeats.

Capture writes through :class:`ChangelogWriter` (implemented on local files by
:class:`SegmentChangelog`); restart logic, tests, verify and replay read with
:class:`ChangelogReader`; the Spark reader learns a record's segment range from
its file name with :func:`parse_segment_name`.
"""

from txjoin.changelog.segments import (
    LOCK_FILE,
    TRANSACTION_SUFFIX,
    ChangelogReader,
    ChangelogWriter,
    Segment,
    SegmentChangelog,
    parse_segment_name,
    segment_name,
    validate_topic,
)

__all__ = [
    "LOCK_FILE",
    "TRANSACTION_SUFFIX",
    "ChangelogReader",
    "ChangelogWriter",
    "Segment",
    "SegmentChangelog",
    "parse_segment_name",
    "segment_name",
    "validate_topic",
]
