"""Debezium PostgreSQL connector event values (plain JSON, schemas.enable=false).

Field names and order follow Debezium's Envelope and PostgreSQL Source
structs (shared/docs/protocol.md, section B). Deviations, documented in
docs/types.md:

- the envelope's ``ts_ms``/``ts_us``/``ts_ns`` carry the commit time, not the
  time capture processed the event, so a redelivered event is byte-identical;
- snapshot rows carry a ``transaction`` block like streamed rows (Debezium
  sends null), and the snapshot unit has BEGIN/END markers.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from txjoin import __version__
from txjoin.errors import ProtocolError

__all__ = [
    "Op",
    "SourceInfo",
    "begin_event",
    "change_event",
    "dumps",
    "end_event",
    "heartbeat_event",
    "parse_tx_id",
]


class Op(enum.StrEnum):
    """Debezium's ``op`` codes."""

    CREATE = "c"
    """A row was inserted (or a primary-key update's new row)."""
    UPDATE = "u"
    """A row was updated in place."""
    DELETE = "d"
    """A row was deleted (or a primary-key update's old row)."""
    READ = "r"
    """A row read by the initial snapshot."""
    TRUNCATE = "t"
    """The table was truncated."""


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """The constant part of ``source``: connector, topic prefix, database."""

    name: str
    db: str
    version: str = f"txjoin-{__version__}"


def change_event(
    source: SourceInfo,
    *,
    schema: str,
    table: str,
    op: Op,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    xid: int,
    lsn: int,
    prev_commit_lsn: int | None,
    commit_ts_us: int,
    snapshot: str,
    total_order: int,
    data_collection_order: int,
) -> dict[str, Any]:
    """One change event value. Timestamps are microseconds since the Unix epoch."""
    ts_ms = commit_ts_us // 1000
    ts_ns = commit_ts_us * 1000
    seq = f'["{prev_commit_lsn}","{lsn}"]' if prev_commit_lsn is not None else f'[null,"{lsn}"]'
    src = {
        "version": source.version,
        "connector": "postgresql",
        "name": source.name,
        "ts_ms": ts_ms,
        "ts_us": commit_ts_us,
        "ts_ns": ts_ns,
        "snapshot": snapshot,
        "db": source.db,
        "sequence": seq,
        "schema": schema,
        "table": table,
        "txId": xid,
        "lsn": lsn,
        "xmin": None,
    }
    tx = {
        "id": f"{xid}:{lsn}",
        "total_order": total_order,
        "data_collection_order": data_collection_order,
    }
    body = {
        "source": src, "op": op.value,
        "ts_ms": ts_ms, "ts_us": commit_ts_us, "ts_ns": ts_ns,
        "transaction": tx,
    }  # fmt: skip
    if op == Op.TRUNCATE:
        return body  # Debezium's truncate events have neither before nor after.
    return {"before": before, "after": after, **body}


def begin_event(xid: int, lsn: int, commit_ts_us: int) -> dict[str, Any]:
    return {
        "status": "BEGIN",
        "id": f"{xid}:{lsn}",
        "ts_ms": commit_ts_us // 1000,
        "event_count": None,
        "data_collections": None,
    }


def end_event(
    xid: int,
    end_lsn: int,
    commit_ts_us: int,
    collections: Sequence[tuple[str, int]],
    snapshot_manifest: str | None = None,
) -> dict[str, Any]:
    """END marker; ``collections`` are ("schema.table", events) in first-seen order.

    A columnar snapshot's END carries no events but ``snapshot_manifest``: the
    path of its manifest in the changelog (:mod:`txjoin.changelog.snapshots`).
    """
    out: dict[str, Any] = {
        "status": "END",
        "id": f"{xid}:{end_lsn}",
        "ts_ms": commit_ts_us // 1000,
        "event_count": sum(n for _, n in collections),
        "data_collections": [{"data_collection": c, "event_count": n} for c, n in collections],
    }
    if snapshot_manifest is not None:
        out["snapshot_manifest"] = snapshot_manifest
    return out


def heartbeat_event(ts_ms: int) -> dict[str, Any]:
    return {"ts_ms": ts_ms}


# Python objects other than JSON's own types are refused, as json.dumps refuses them.
_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _non_finite(value: Any) -> bool:
    """Whether a change event's row holds NaN or an infinity, which orjson would write as null."""
    for row in (value.get("before"), value.get("after")):
        if row:
            for v in row.values():
                if type(v) is float and not math.isfinite(v):
                    return True
                if type(v) is list and any(type(x) is float and not math.isfinite(x) for x in v):
                    return True
    return False


def dumps(value: Any) -> bytes:
    """Compact, deterministic JSON on one line (no newline), UTF-8.

    orjson, not json: capture spent about 30 us an event in json's encoder, 3 in orjson's.
    The two differ only in how they spell some floats (json ``1e-05``, orjson ``0.00001``),
    the same double either way. Non-finite floats never reach here (the converters write
    Debezium's "NaN" strings); if one did, this refuses it instead of writing null.
    """
    if type(value) is dict and _non_finite(value):
        raise ProtocolError("cannot encode event as JSON: a row holds NaN or an infinity as a float")
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError as e:
        raise ProtocolError(f"cannot encode event as JSON: {e}") from None


def parse_tx_id(tx_id: str) -> tuple[int, int]:
    """``(xid, lsn)`` of a Debezium PostgreSQL transaction id ``"xid:lsn"``."""
    xid, sep, lsn = str(tx_id).partition(":")
    try:
        if not sep:
            raise ValueError
        return int(xid), int(lsn)
    except ValueError:
        raise ProtocolError(
            f"transaction id {tx_id!r} is not of Debezium's PostgreSQL form 'xid:lsn'"
        ) from None
