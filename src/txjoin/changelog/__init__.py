"""The changelog: one topic per table, a transaction topic and heartbeats.

Capture writes through its ``ChangelogWriter`` port, implemented on local files
by :class:`SegmentChangelog`; restart logic, tests, verify and replay read with
:class:`ChangelogReader`; the pipeline reads by offset through the Spark source
in :mod:`.stream`, which finds segments in the writer's per-topic index
(:mod:`.index`). Checkpoints begun by Spark's file source keep it: topics by
:func:`topic_glob`, a record's segment range from its file name
(:data:`SEGMENT_FILE_PATTERN`).
The changelog also keeps each table topic's columns (:mod:`.schemas`).
"""

from txjoin.changelog.schemas import SCHEMAS_DIR, SchemaLog, read_columns, read_table
from txjoin.changelog.segments import (
    LOCK_FILE,
    SEGMENT_FILE_PATTERN,
    SEGMENT_GLOB,
    ChangelogReader,
    Segment,
    SegmentChangelog,
    parse_segment_name,
    segment_name,
    topic_glob,
    validate_topic,
)

__all__ = [
    "LOCK_FILE",
    "SCHEMAS_DIR",
    "SEGMENT_FILE_PATTERN",
    "SEGMENT_GLOB",
    "ChangelogReader",
    "SchemaLog",
    "Segment",
    "SegmentChangelog",
    "parse_segment_name",
    "read_columns",
    "read_table",
    "segment_name",
    "topic_glob",
    "validate_topic",
]
