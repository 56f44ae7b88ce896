"""Replay applies a redelivered event once when its value is equal, and refuses it otherwise.

Capture's encoder changed from json to orjson, which spell some floats
differently (``1e-05`` and ``0.00001``), so a transaction resent after an
upgrade can carry the same event in other bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from txjoin.changelog.schemas import SchemaLog
from txjoin.changelog.segments import SegmentChangelog
from txjoin.debezium import envelope
from txjoin.debezium.envelope import Op, SourceInfo
from txjoin.debezium.topics import table_topic, transaction_topic
from txjoin.errors import ChangelogError
from txjoin.pg.catalog import Column
from txjoin.pg.types import ColumnType
from txjoin.verify.replay import replay

SOURCE = SourceInfo(name="s", db="db")
TABLE = "public.t"


def _changelog(root: Path, second: bytes) -> None:
    topic = table_topic("s", TABLE)
    SchemaLog(root).record(
        topic,
        lsn=1,
        relation_oid=1,
        columns=[Column("id", ColumnType(23, "int4")), Column("x", ColumnType(701, "float8"))],
        primary_key=["id"],
    )
    first = envelope.dumps(_event(1e-05))
    with SegmentChangelog(root) as w:
        w.append(transaction_topic("s"), envelope.dumps(envelope.begin_event(7, 100, 1_000_000)))
        w.append(topic, first)
        w.append(topic, second)  # the same event resent
        w.append(
            transaction_topic("s"),
            envelope.dumps(envelope.end_event(7, 100, 1_000_000, [(TABLE, 1)])),
        )
        w.flush()  # closing discards what is pending, as a crash would


def _event(x: float) -> dict[str, object]:
    return envelope.change_event(
        SOURCE, schema="public", table="t", op=Op.CREATE, before=None, after={"id": 1, "x": x},
        xid=7, lsn=100, prev_commit_lsn=None, commit_ts_us=1_000_000, snapshot="false",
        total_order=1, data_collection_order=1,
    )  # fmt: skip


def test_a_resent_event_spelled_by_json_instead_of_orjson_is_applied_once(tmp_path: Path) -> None:
    old = json.dumps(_event(1e-05), ensure_ascii=False, separators=(",", ":")).encode()
    assert old != envelope.dumps(_event(1e-05))  # the spellings differ: 1e-05 and 0.00001
    _changelog(tmp_path, old)
    r = replay(tmp_path, "s", [TABLE])
    assert r.tables[TABLE] == {(1,): {"id": 1, "x": 1e-05}}
    assert len(r.duplicates) == 1


def test_a_resent_event_with_another_value_is_refused(tmp_path: Path) -> None:
    _changelog(tmp_path, envelope.dumps(_event(2e-05)))
    with pytest.raises(ChangelogError, match="delivered twice with different contents"):
        replay(tmp_path, "s", [TABLE])
