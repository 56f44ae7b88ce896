"""The changelog: one topic per table, a transaction topic and heartbeats."""

from txjoin.changelog.segments import (
    ChangelogReader,
    ChangelogWriter,
    Segment,
    SegmentChangelog,
    parse_segment_name,
    validate_topic,
)

__all__ = [
    "ChangelogReader",
    "ChangelogWriter",
    "Segment",
    "SegmentChangelog",
    "parse_segment_name",
    "validate_topic",
]
