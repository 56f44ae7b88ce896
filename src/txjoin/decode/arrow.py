"""Decode a segment of txjoin's changelog in the Python reader, with Arrow instead of Spark.

Spark's ``from_json`` and the projections around it cost about 30 us of CPU a
record, 2.7 times the read itself (bench/NOTES.md); Arrow's JSON parser does the
same work in about 4 us. :func:`decode_segment` gives the rows
:func:`txjoin.decode.decode` gives for the same records, with one difference:
it is stricter. A record Spark's decoder would read leniently (a number where a
string belongs, a marker id that is not ``xid:lsn``, a ``sequence`` that is not
an array of decimal strings, a wrapper it cannot unwrap) becomes a ``bad`` row,
which assembly turns into an error naming the segment: loud, never a different
answer. ``tests/property/test_decode_arrow_props.py`` runs both decoders on the
same records.

Only txjoin's own changelog is read this way (capture writes compact JSON
objects, one per line); Debezium's topics and Kafka keep Spark's decoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from txjoin.debezium.topics import DEBEZIUM_HEARTBEAT_PREFIX, TRANSACTION_SUFFIX, is_heartbeat_topic
from txjoin.decode.columns import EVENT_COLUMNS

__all__ = ["DECODED_SCHEMA", "decode_segment"]

_EVENT_TYPES: dict[str, pa.DataType] = {"int64": pa.int64(), "object": pa.string()}

_SOURCE = pa.struct(
    [
        ("name", pa.string()),
        ("snapshot", pa.string()),
        ("sequence", pa.string()),
        ("schema", pa.string()),
        ("table", pa.string()),
        ("txId", pa.int64()),
        ("lsn", pa.int64()),
        ("ts_ms", pa.int64()),
    ]
)
_TX = pa.struct([("id", pa.string()), ("total_order", pa.int64()), ("data_collection_order", pa.int64())])
_DC = pa.list_(pa.struct([("data_collection", pa.string()), ("event_count", pa.int64())]))
_INNER = [
    ("op", pa.string()),
    ("ts_ms", pa.int64()),
    ("source", _SOURCE),
    ("transaction", _TX),
    ("status", pa.string()),
    ("id", pa.string()),
    ("event_count", pa.int64()),
    ("data_collections", _DC),
    ("snapshot_manifest", pa.string()),
]
#: What the parser reads of a record; everything else (``before``, ``after``, a wrapper's
#: ``schema``) is skipped, as Spark's decoder skips it.
_PARSE = pa.schema([*_INNER, ("payload", pa.struct(_INNER))])
_LEAVES = [
    "op",
    "ts_ms",
    "status",
    "id",
    "event_count",
    "snapshot_manifest",
    "data_collections",
    *(f"source.{f.name}" for f in _SOURCE),
    *(f"transaction.{f.name}" for f in _TX),
]
_OPTIONS = pj.ParseOptions(explicit_schema=_PARSE, unexpected_field_behavior="ignore")
_ID = r"^(?P<xid>[0-9]{1,19}):(?P<lsn>[0-9]{1,19})$"
_SEQUENCE = r'^\[\s*(?:"(?P<prev>[0-9]{1,19})"|(?P<none>null))\s*[,\]]'
_OPEN, _CLOSE = ord("{"), ord("}")


def _decoded_schema() -> pa.Schema:
    return pa.schema([("source", pa.string())] + [(c, _EVENT_TYPES[t]) for c, t in EVENT_COLUMNS.items()])


#: The rows :func:`decode_segment` gives: ``source``, then assembly's columns.
DECODED_SCHEMA = _decoded_schema()


def _leaves(table: pa.Table, prefix: str = "") -> dict[str, pa.Array]:
    """Each leaf of :data:`_INNER` under ``prefix`` (``""`` or ``"payload."``), with the validity
    of the structs above it."""
    out: dict[str, pa.Array] = {}
    top = table.column(prefix[:-1]).combine_chunks() if prefix else None
    parents = (
        dict(zip([f.name for f in top.type], top.flatten(), strict=True))
        if top is not None
        else {name: table.column(name).combine_chunks() for name in table.column_names}
    )
    for leaf in _LEAVES:
        head, _, rest = leaf.partition(".")
        arr = parents[head]
        if rest:
            arr = dict(zip([f.name for f in arr.type], arr.flatten(), strict=True))[rest]
        out[leaf] = arr
    return out


def _parse(data: bytes, count: int) -> pa.Table | None:
    """``data``, ``count`` lines of JSON objects, parsed one row a line; None if any does not parse.
    Only lines that start with ``{`` may reach Arrow's parser: a top-level ``null`` crashes it."""
    try:
        table = pj.read_json(
            pa.py_buffer(data),
            read_options=pj.ReadOptions(
                use_threads=False, block_size=max(1 << 20, min(len(data) + 1, 1 << 30))
            ),
            parse_options=_OPTIONS,
        )
    except pa.ArrowInvalid:
        return None
    return table if table.num_rows == count else None


def _to_int64(text: pa.Array, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal ``text`` (1-19 digits where ``ok``) as int64; ``ok`` cleared where it overflows."""
    values = np.full(len(text), -1, dtype=np.int64)
    if not ok.any():
        return values, ok
    picked = pc.if_else(pa.array(ok), text, "0")
    try:
        values[:] = pc.cast(picked, pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, OverflowError):
        ok = ok.copy()
        for i in np.flatnonzero(ok):
            v = int(text[i].as_py())
            if v < 2**63:
                values[i] = v
            else:
                ok[i] = False
    values[~ok] = -1
    return values, ok


def _parse_lines(
    data: bytes, starts: np.ndarray, ends: np.ndarray, parsed: np.ndarray, tombstone: np.ndarray
) -> pa.Table:
    """A segment that is not all compact objects (tombstones, bad records): its object lines
    parsed together, or, if one of them does not parse, one at a time. Sets ``parsed`` and
    ``tombstone`` per line; a line that did not parse is a row of nulls."""
    lines = [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    # What Jackson skips around a value (Spark's parser), and Spark's trim (spaces only).
    stripped = [line.strip(b" \t\r\n") for line in lines]
    tombstone[:] = [line.strip(b" ") == b"null" for line in lines]
    objects = [i for i, s in enumerate(stripped) if s[:1] == b"{" and s[-1:] == b"}"]
    parsed[:] = False
    together = _parse(b"\n".join(stripped[i] for i in objects) + b"\n", len(objects)) if objects else None
    if together is not None or not objects:
        parsed[objects] = True
        row = np.full(len(lines), len(objects), dtype=np.int64)  # the row of nulls after them
        row[objects] = np.arange(len(objects))
        rows = [together] if together is not None else []
        return pa.concat_tables([*rows, _NULL_ROW]).take(pa.array(row))
    one_by_one: list[pa.Table] = []
    shaped = set(objects)
    for i, s in enumerate(stripped):
        one = _parse(s + b"\n", 1) if i in shaped else None
        parsed[i] = one is not None
        one_by_one.append(one if one is not None else _NULL_ROW)
    return pa.concat_tables(one_by_one)


def _groups(text: pa.Array, pattern: str) -> dict[str, pa.Array]:
    """``pattern``'s named groups in ``text``: null where it does not match (an optional group
    that did not take part is "")."""
    found = pc.extract_regex(pc.fill_null(text, ""), pattern)
    return dict(zip([f.name for f in found.type], found.flatten(), strict=True))


def _mask(arr: pa.Array) -> np.ndarray:
    """A boolean array's true positions as numpy (null is false)."""
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def _longs(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def decode_segment(
    topic: str, first: int, last: int, path: str, data: bytes, ends: np.ndarray, values: pa.Array
) -> pa.RecordBatch:
    """The decoded rows (:data:`DECODED_SCHEMA`) of one segment: its bytes ``data`` (one record
    a line, each ending in a newline), the positions of those newlines ``ends`` (the reader found
    them already) and the same records as strings ``values``."""
    n = len(values)
    buf = np.frombuffer(data, dtype=np.uint8)
    starts = np.concatenate([[0], ends[:-1] + 1]) if n else ends
    # Objects on one line each go to the parser whole; anything else is a tombstone or a bad record.
    obj = (
        (ends - starts > 1) & (buf[starts] == _OPEN) & (buf[np.maximum(ends - 1, 0)] == _CLOSE)
        if n
        else ends > 0
    )
    table = _parse(data, n) if n and obj.all() else None
    parsed = np.ones(n, dtype=bool)
    tombstone = np.zeros(n, dtype=bool)
    if table is None:
        table = _parse_lines(data, starts, ends, parsed, tombstone)
    leaf = _leaves(table)
    payload = table.column("payload").combine_chunks()
    wrapped = np.asarray(payload.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if wrapped.any():
        inner = _leaves(table, "payload.")
        pick = pa.array(np.where(wrapped, np.arange(n) + n, np.arange(n)))
        leaf = {k: pa.concat_arrays([v, inner[k]]).take(pick) for k, v in leaf.items()}

    op = leaf["op"]
    status = leaf["status"]
    has_op = np.asarray(op.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    is_m = _mask(pc.equal(op, "m"))
    change = has_op & ~is_m
    begin = ~has_op & _mask(pc.equal(status, "BEGIN"))
    end = ~has_op & _mask(pc.equal(status, "END"))
    heartbeat_topic = is_heartbeat_topic(topic)
    rest = ~has_op & ~begin & ~end
    bad = parsed & ~tombstone & rest & (not heartbeat_topic)
    bad |= ~parsed & ~tombstone

    marker = begin | end
    ids = _groups(leaf["id"], _ID)
    id_ok = _mask(pc.not_equal(ids["xid"], "")) & marker
    m_xid, ok_x = _to_int64(ids["xid"], id_ok)
    m_lsn, ok_l = _to_int64(ids["lsn"], id_ok)
    bad |= marker & ~(ok_x & ok_l)

    seq_text = leaf["source.sequence"]
    seq = _groups(seq_text, _SEQUENCE)
    seq_given = np.asarray(seq_text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    seq_null = _mask(pc.equal(seq["none"], "null"))
    prev, seq_ok = _to_int64(seq["prev"], _mask(pc.not_equal(seq["prev"], "")) & change)
    bad |= change & seq_given & ~(seq_ok | seq_null)

    snap = leaf["source.snapshot"]
    bad |= ~_mask(pc.fill_null(pc.string_is_ascii(snap), True))
    # ``bad`` rows carry nothing of the record but its start, as Spark's unparsed ones do.
    good = ~bad & ~tombstone
    change &= good
    begin &= good
    end &= good
    marker = begin | end
    kind = np.full(n, None, dtype=object)
    kind[change] = "change"
    kind[begin] = "begin"
    kind[end] = "end"
    kind[good & rest & heartbeat_topic] = "heartbeat"
    kind[bad] = "bad"

    def keep(arr: pa.Array, where: np.ndarray) -> pa.Array:
        return pc.if_else(pa.array(where), arr, pa.nulls(n, arr.type))

    tx_topic = topic.endswith(TRANSACTION_SUFFIX)
    xid = np.where(change, _longs(leaf["source.txId"]), np.where(marker, m_xid, -1))
    lsn = np.where(change, _longs(leaf["source.lsn"]), np.where(marker, m_lsn, -1))
    ts = pc.coalesce(leaf["source.ts_ms"], leaf["ts_ms"])
    # Spark's concat_ws skips nulls (pyarrow's null_handling="skip" returned a short array).
    sch, tab = leaf["source.schema"], leaf["source.table"]
    schema_table = pc.coalesce(pc.binary_join_element_wise(sch, tab, "."), sch, tab, "")
    start = pa.nulls(n, pa.string())
    if bad.any():
        where = np.flatnonzero(bad)
        texts: list[str | None] = [None] * n
        for i in where.tolist():
            texts[i] = values[i].as_py()[:200]
        start = pa.array(texts, pa.string())
    # A data topic's segment is all changes: its records are the values as they are (no copy).
    value = values
    if not change.all():
        value = pc.if_else(
            pa.array(bad), start, pc.if_else(pa.array(change), values, keep(leaf["snapshot_manifest"], end))
        )
    columns: dict[str, Any] = {
        "kind": pa.array(kind, pa.string()),
        "seg_first": np.full(n, first if tx_topic else -1, dtype=np.int64),
        "seg_last": np.full(n, last if tx_topic else -1, dtype=np.int64),
        "xid": xid,
        "lsn": lsn,
        "seq_prev": np.where(change & seq_ok, prev, -1),
        "total_order": np.where(good, _longs(leaf["transaction.total_order"]), -1),
        "dc_order": np.where(good, _longs(leaf["transaction.data_collection_order"]), -1),
        "op": keep(op, good),
        "snapshot": pc.if_else(pa.array(good), pc.fill_null(pc.ascii_lower(snap), "false"), "false"),
        "table": pc.if_else(pa.array(bad), path, keep(schema_table, good)),
        "ts_ms": np.where(good, _longs(ts), -1),
        "event_count": np.where(good, _longs(leaf["event_count"]), -1),
    }
    columns["table"] = pc.if_else(pa.array(bad | good), columns["table"], "")
    return _explode(topic, columns, value, leaf["data_collections"], end, n)


def _explode(
    topic: str, columns: dict[str, Any], value: pa.Array, dc: pa.ListArray, end: np.ndarray, n: int
) -> pa.RecordBatch:
    """One row per ``data_collections`` entry of an END, one row for every other record."""
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(dc), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    spread = end & (lengths > 0)
    reps = np.where(spread, lengths, 1)
    rows = np.repeat(np.arange(n), reps)
    starts = np.cumsum(reps) - reps
    offsets = (
        np.asarray(dc.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)[:-1]
        if n
        else np.zeros(0, np.int64)
    )
    within = np.arange(len(rows)) - starts[rows]
    element = np.where(spread[rows], offsets[rows] + within, -1)
    entries = dc.values
    fields = dict(zip([f.name for f in entries.type], entries.flatten(), strict=True))
    pick = pa.array(element, mask=element < 0)
    dc_table = fields["data_collection"].take(pick)
    dc_count = _longs(fields["event_count"].take(pick))
    take = pa.array(rows)
    source = _source_name(topic)
    out: dict[str, Any] = {"source": pa.repeat(pa.scalar(source, pa.string()), len(rows))}
    # Only a transaction topic's ENDs spread over rows; other segments keep theirs (no copy).
    same = not spread.any()
    for name, col in [*columns.items(), ("value", value)]:
        if same:
            out[name] = col
        else:
            out[name] = col[rows] if isinstance(col, np.ndarray) else col.take(take)
    out["dc_table"] = dc_table
    out["dc_count"] = dc_count
    return pa.RecordBatch.from_arrays(
        [
            pa.array(out[f.name], f.type) if isinstance(out[f.name], np.ndarray) else out[f.name]
            for f in DECODED_SCHEMA
        ],
        schema=DECODED_SCHEMA,
    )


def _source_name(topic: str) -> str:
    if topic.startswith(DEBEZIUM_HEARTBEAT_PREFIX):
        return topic[len(DEBEZIUM_HEARTBEAT_PREFIX) :]
    head, dot, _ = topic.partition(".")
    return head if dot and head else ""


#: A record that did not parse: every field null.
_NULL_ROW = pa.Table.from_pylist([{}], schema=_PARSE)
