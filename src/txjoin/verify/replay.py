"""Replay a source's changelog into table states, optionally up to a cut.

Used by ``verify`` (rebuild the source as of an output's cut) and by the
capture tests (the changelog must reproduce every table exactly). Replay is
strict: a create for a key that exists, or an update/delete for a key that
does not, is an error, because it means an event was lost or duplicated.
Redelivered events (same ``(xid, total_order)``) must be equal and are
applied once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from txjoin.changelog import ChangelogReader, read_columns, read_table
from txjoin.changelog.snapshots import read_manifest
from txjoin.debezium.arrow import to_values
from txjoin.debezium.envelope import parse_tx_id
from txjoin.debezium.topics import table_topic, transaction_topic
from txjoin.debezium.values import UNAVAILABLE
from txjoin.errors import ChangelogError
from txjoin.pg.names import parse_table_name

__all__ = ["Replay", "TxEnd", "read_transactions", "replay"]

Row = dict[str, Any]
Key = tuple[Any, ...]


@dataclass(frozen=True)
class TxEnd:
    """One END marker of the transaction topic."""

    offset: int
    xid: int
    end_lsn: int
    ts_ms: int
    event_count: int
    counts: dict[str, int]  # "schema.table" -> events
    #: A columnar snapshot's manifest (its rows are in Parquet, not in the topics).
    manifest: str | None = None


def read_transactions(reader: ChangelogReader, prefix: str) -> list[TxEnd]:
    """The END markers of ``prefix``'s transaction topic, in topic order."""
    out = []
    for offset, raw in reader.read(transaction_topic(prefix)):
        v = json.loads(raw)
        if v.get("status") != "END":
            continue
        xid, lsn = parse_tx_id(v["id"])
        counts = {d["data_collection"]: int(d["event_count"]) for d in v.get("data_collections") or []}
        manifest = v.get("snapshot_manifest")
        out.append(TxEnd(offset, xid, lsn, int(v["ts_ms"]), int(v["event_count"]), counts, manifest))
    return out


@dataclass
class Replay:
    """Table states after replay, with what was seen on the way."""

    tables: dict[str, dict[Key, Row]] = field(default_factory=dict)
    transactions: list[TxEnd] = field(default_factory=list)
    #: (topic, offset) of every redelivered copy that was skipped.
    duplicates: list[tuple[str, int, int, int]] = field(default_factory=list)
    #: events per (xid, "schema.table") actually applied.
    applied: dict[tuple[int, str], int] = field(default_factory=dict)


def _key(row: Row, key_cols: list[str], topic: str, offset: int) -> Key:
    try:
        return tuple(row[c] for c in key_cols)
    except KeyError as e:
        raise ChangelogError(
            f"event at {topic} offset {offset} lacks key column {e.args[0]!r}",
            topic=topic,
            offset=offset,
        ) from None


def replay(
    root: Path,
    prefix: str,
    tables: Iterable[str],
    *,
    until_lsn: int | None = None,
) -> Replay:
    """Replay ``tables`` ("schema.table") of source ``prefix`` up to ``until_lsn``.

    Only transactions whose END is in the transaction topic (and at or below
    ``until_lsn``) are applied; events of unfinished transactions are ignored.
    """
    reader = ChangelogReader(root)
    result = Replay()
    ends = read_transactions(reader, prefix)
    result.transactions = [e for e in ends if until_lsn is None or e.end_lsn <= until_lsn]
    included = {e.xid for e in result.transactions}
    for table in tables:
        topic = table_topic(prefix, table)
        key_cols = [c["name"] for c in read_columns(root, topic) if c["key"]]
        state: dict[Key, Row] = {}
        for end in result.transactions:
            if end.manifest is not None:
                for row in snapshot_rows(root, end.manifest, prefix, table):
                    state[_key(row, key_cols, topic, -1)] = row
                k = (end.xid, table)
                result.applied[k] = result.applied.get(k, 0) + len(state)
        seen: dict[tuple[int, int], bytes] = {}
        for offset, raw in reader.read(topic):
            v = json.loads(raw)
            if v is None:  # tombstone
                continue
            src = v["source"]
            xid = int(src["txId"])
            if xid not in included:
                continue
            tx = v.get("transaction")
            order = int(tx["total_order"]) if tx else offset
            ident = (xid, order)
            if ident in seen:
                # Equal values, not equal bytes: captures of different txjoin versions may spell
                # a float differently (json's 1e-05, orjson's 0.00001).
                if seen[ident] != raw and json.loads(seen[ident]) != v:
                    raise ChangelogError(
                        f"event ({xid}, {order}) at {topic} offset {offset} was delivered twice "
                        "with different contents: the changelog is inconsistent",
                        topic=topic,
                        offset=offset,
                    )
                result.duplicates.append((topic, offset, xid, order))
                continue
            seen[ident] = raw
            _apply(state, v, key_cols, topic, offset)
            k = (xid, table)
            result.applied[k] = result.applied.get(k, 0) + 1
        result.tables[table] = state
    return result


def snapshot_rows(root: Path, manifest: str, source: str, table: str) -> list[Row]:
    """A columnar snapshot's rows of ``table`` ("schema.table"), as Debezium JSON values."""
    m = read_manifest(root, manifest)
    files = m.files.get(table)
    if not files:
        return []
    types = read_table(root, table_topic(source, table), source, parse_table_name(table)).types
    data = pq.read_table([str(f) for f in files]) if len(files) > 1 else pq.read_table(str(files[0]))
    columns = {c: to_values(data.column(c), types[c]) for c in data.column_names}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _apply(state: dict[Key, Row], v: dict[str, Any], key_cols: list[str], topic: str, offset: int) -> None:
    op = v["op"]
    where = f"{topic} offset {offset} (xid {v['source'].get('txId')}, op {op!r})"
    if op in ("c", "r"):
        k = _key(v["after"], key_cols, topic, offset)
        if k in state:
            raise ChangelogError(f"replay: create of existing key {k} at {where}", topic=topic, offset=offset)
        state[k] = dict(v["after"])
    elif op == "u":
        k = _key(v["after"], key_cols, topic, offset)
        old = state.get(k)
        if old is None:
            raise ChangelogError(f"replay: update of missing key {k} at {where}", topic=topic, offset=offset)
        state[k] = {c: (old[c] if val == UNAVAILABLE else val) for c, val in v["after"].items()}
    elif op == "d":
        k = _key(v["before"], key_cols, topic, offset)
        if k not in state:
            raise ChangelogError(f"replay: delete of missing key {k} at {where}", topic=topic, offset=offset)
        del state[k]
    elif op == "t":
        state.clear()
    else:
        raise ChangelogError(f"replay: unknown op {op!r} at {where}", topic=topic, offset=offset)
