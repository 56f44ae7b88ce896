"""The decoded rows' columns: what both decoders give and assembly reads."""

from __future__ import annotations

__all__ = ["EVENT_COLUMNS", "EVENT_SCHEMA"]

#: Columns of the decoded rows, in order after ``source``: assembly's input.
#: Integers use -1 for "absent" so columns stay int64.
EVENT_COLUMNS: dict[str, str] = {
    "kind": "object",  # 'change' | 'begin' | 'end' | 'heartbeat' | 'bad' | None
    "seg_first": "int64",  # transaction topic: first offset of the record's segment, else -1
    "seg_last": "int64",
    "xid": "int64",
    "lsn": "int64",  # change: its LSN; begin/end: the id's LSN (END: commit end LSN)
    "seq_prev": "int64",  # change: source.sequence[0]; -1 if null
    "total_order": "int64",  # change: transaction.total_order; -1 if absent
    "dc_order": "int64",  # change: transaction.data_collection_order (position within its table); -1
    "op": "object",
    "snapshot": "object",  # source.snapshot ('false' when streaming)
    "table": "object",  # "schema.table"
    "ts_ms": "int64",
    "event_count": "int64",  # END: total events
    # END rows come once per data_collections entry (exploded by the reader,
    # so no list columns cross into Python): its table and count, else null/-1.
    "dc_table": "object",
    "dc_count": "int64",
    "value": "object",  # change: the whole record's JSON text; END: snapshot manifest; bad rows: its start
}

_SPARK = {"int64": "long", "object": "string"}
#: The decoded rows as a Spark schema: ``source``, then :data:`EVENT_COLUMNS`.
EVENT_SCHEMA = ", ".join(["source string", *(f"{c} {_SPARK[t]}" for c, t in EVENT_COLUMNS.items())])
