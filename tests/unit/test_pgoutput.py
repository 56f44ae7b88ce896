"""pgoutput decoding of hand-built messages (layouts from PostgreSQL's proto.c)."""

from __future__ import annotations

import struct

import pytest

from txjoin.capture.pgoutput import (
    PG_EPOCH_OFFSET_US,
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    Relation,
    Truncate,
    TypeInfo,
    Update,
    decode,
)
from txjoin.errors import ProtocolError


def cstr(s: str) -> bytes:
    return s.encode() + b"\x00"


def tup(*values: object) -> bytes:
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        elif isinstance(v, bytes):
            out += b"b" + struct.pack(">I", len(v)) + v
        else:
            data = str(v).encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


def test_begin_and_commit_convert_timestamps_to_unix_microseconds() -> None:
    b = decode(b"B" + struct.pack(">QqI", 0x1_0000_0010, 5, 4_000_000_000))
    assert b == Begin(final_lsn=0x1_0000_0010, commit_ts=5 + PG_EPOCH_OFFSET_US, xid=4_000_000_000)
    c = decode(b"C" + struct.pack(">BQQq", 0, 100, 148, -1))
    assert c == Commit(flags=0, commit_lsn=100, end_lsn=148, commit_ts=PG_EPOCH_OFFSET_US - 1)


def test_relation_with_key_flags_and_catalog_namespace() -> None:
    payload = (
        b"R"
        + struct.pack(">I", 16390)
        + cstr("")
        + cstr("orders")
        + b"f"
        + struct.pack(">H", 2)
        + b"\x01"
        + cstr("id")
        + struct.pack(">Ii", 23, -1)
        + b"\x00"
        + cstr("price")
        + struct.pack(">Ii", 1700, (10 << 16 | 2) + 4)
    )
    rel = decode(payload)
    assert isinstance(rel, Relation)
    assert (rel.oid, rel.namespace, rel.name, rel.replica_identity) == (16390, "", "orders", "f")
    assert [c.name for c in rel.columns] == ["id", "price"]
    assert [c.is_key for c in rel.columns] == [True, False]
    assert rel.columns[1].typmod == (10 << 16 | 2) + 4


def test_insert_with_null_toast_and_utf8_text() -> None:
    msg = decode(b"I" + struct.pack(">I", 7) + b"N" + tup("1", None, UNCHANGED_TOAST, "héllo\ttab"))
    assert msg == Insert(7, ("1", None, UNCHANGED_TOAST, "héllo\ttab"))


def test_update_forms() -> None:
    plain = decode(b"U" + struct.pack(">I", 7) + b"N" + tup("1", "x"))
    assert plain == Update(7, None, None, ("1", "x"))
    keyed = decode(b"U" + struct.pack(">I", 7) + b"K" + tup("1", None) + b"N" + tup("2", "x"))
    assert keyed == Update(7, "K", ("1", None), ("2", "x"))
    full = decode(b"U" + struct.pack(">I", 7) + b"O" + tup("1", "old") + b"N" + tup("1", "new"))
    assert full == Update(7, "O", ("1", "old"), ("1", "new"))


def test_delete_truncate_type_origin_message() -> None:
    assert decode(b"D" + struct.pack(">I", 9) + b"K" + tup("5", None)) == Delete(9, "K", ("5", None))
    assert decode(b"T" + struct.pack(">IB", 2, 1) + struct.pack(">II", 10, 11)) == Truncate(1, (10, 11))
    assert decode(b"Y" + struct.pack(">I", 50000) + cstr("public") + cstr("mood")) == TypeInfo(
        50000, "public", "mood"
    )
    assert decode(b"O" + struct.pack(">Q", 77) + cstr("node1")) == Origin(77, "node1")
    m = decode(b"M" + b"\x01" + struct.pack(">Q", 99) + cstr("pfx") + struct.pack(">I", 3) + b"abc")
    assert m == LogicalMessage(True, 99, "pfx", b"abc")


def test_binary_column_kind_is_kept_as_bytes() -> None:
    assert decode(b"I" + struct.pack(">I", 7) + b"N" + tup(b"\x00\x01")) == Insert(7, (b"\x00\x01",))


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "empty"),
        (b"B" + b"\x00" * 5, "truncated"),
        (
            b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">H", 1) + b"t" + struct.pack(">I", 10) + b"ab",
            "truncated",
        ),
        (b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">H", 1) + b"z", "unknown column kind"),
        (b"I" + struct.pack(">I", 7) + b"X" + tup("1"), "expected 'N'"),
        (b"S" + struct.pack(">IB", 1, 1), "not supported with proto_version 1"),
        (b"Y" + struct.pack(">I", 1) + b"no-terminator", "unterminated"),
    ],
)
def test_malformed_messages_raise_protocol_error(payload: bytes, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        decode(payload)
