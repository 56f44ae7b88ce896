"""Decoder for pgoutput logical replication messages (protocol version 1).

``decode(payload)`` turns one XLogData payload into a message object. Layouts
follow PostgreSQL's ``src/backend/replication/logical/proto.c``; see
docs/protocol notes (shared/docs/protocol.md, section A2). We request
``proto_version '1'`` with streaming off, so there is no per-message xid and
transactions arrive whole, in commit order. Tuples are in text format: each
column is ``None`` (NULL), :data:`UNCHANGED_TOAST`, or the type's text output.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from txjoin.errors import ProtocolError

__all__ = [
    "PG_EPOCH_OFFSET_US",
    "UNCHANGED_TOAST",
    "Begin",
    "Column",
    "Commit",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "Relation",
    "Truncate",
    "TupleValue",
    "TypeInfo",
    "Update",
    "decode",
]

#: Microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01 (UTC).
PG_EPOCH_OFFSET_US: Final = 946_684_800_000_000


class _UnchangedToast:
    """Marker for a TOASTed column the server did not send (value unchanged)."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = _UnchangedToast()

TupleValue = str | bytes | None | _UnchangedToast


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int  # start of the commit record (== Commit.commit_lsn)
    commit_ts: int  # microseconds since 1970-01-01 UTC
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int  # end of the commit record: what we acknowledge
    commit_ts: int  # microseconds since 1970-01-01 UTC


@dataclass(frozen=True, slots=True)
class Origin:
    origin_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class Column:
    flags: int  # 1 = part of the replica identity key
    name: str
    type_oid: int
    typmod: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str  # "" means pg_catalog
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class TypeInfo:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relid: int
    new: tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True)
class Update:
    relid: int
    old_kind: str | None  # 'K' key columns only, 'O' whole old row (FULL), None
    old: tuple[TupleValue, ...] | None
    new: tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    relid: int
    old_kind: str  # 'K' or 'O'
    old: tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    options: int  # 1 = CASCADE, 2 = RESTART IDENTITY
    relids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Begin | Commit | Origin | Relation | TypeInfo | Insert | Update | Delete | Truncate | LogicalMessage

_Q = struct.Struct(">Q")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_H = struct.Struct(">H")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")
_COLHDR = struct.Struct(">Ii")
_TRUNC = struct.Struct(">IB")


def _cstring(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    end = buf.find(b"\x00", pos)
    if end < 0:
        raise ProtocolError(f"pgoutput {what}: unterminated string at byte {pos}")
    return buf[pos:end].decode("utf-8"), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[tuple[TupleValue, ...], int]:
    (ncols,) = _H.unpack_from(buf, pos)
    pos += 2
    values: list[TupleValue] = []
    append = values.append
    unpack_len = _I.unpack_from
    size = len(buf)
    for _ in range(ncols):
        kind = buf[pos]
        pos += 1
        if kind == 0x74:  # 't': text
            (n,) = unpack_len(buf, pos)
            pos += 4
            if pos + n > size:
                raise ProtocolError(f"pgoutput tuple: column of {n} bytes is truncated at byte {pos}")
            append(buf[pos : pos + n].decode("utf-8"))
            pos += n
        elif kind == 0x6E:  # 'n': NULL
            append(None)
        elif kind == 0x75:  # 'u': unchanged TOAST
            append(UNCHANGED_TOAST)
        elif kind == 0x62:  # 'b': binary (only with binary=true, which we never request)
            (n,) = unpack_len(buf, pos)
            pos += 4
            if pos + n > size:
                raise ProtocolError(f"pgoutput tuple: column of {n} bytes is truncated at byte {pos}")
            append(bytes(buf[pos : pos + n]))
            pos += n
        else:
            raise ProtocolError(
                f"pgoutput tuple: unknown column kind {chr(kind)!r} at byte {pos - 1}: "
                "the server speaks a protocol this decoder does not know"
            )
    return tuple(values), pos


def _ts(pg_us: int) -> int:
    return pg_us + PG_EPOCH_OFFSET_US


def decode(payload: bytes) -> Message:
    """Decode one pgoutput message (proto_version 1, no streaming)."""
    if not payload:
        raise ProtocolError("pgoutput: empty message")
    tag = payload[0]
    try:
        if tag == 0x49:  # 'I'
            (relid,) = _I.unpack_from(payload, 1)
            if payload[5] != 0x4E:
                raise ProtocolError(f"pgoutput Insert on relation {relid}: expected 'N' tuple")
            new, _ = _tuple(payload, 6)
            return Insert(relid, new)
        if tag == 0x55:  # 'U'
            (relid,) = _I.unpack_from(payload, 1)
            pos = 5
            old_kind: str | None = None
            old: tuple[TupleValue, ...] | None = None
            if payload[pos] in (0x4B, 0x4F):  # 'K' / 'O'
                old_kind = chr(payload[pos])
                old, pos = _tuple(payload, pos + 1)
            if payload[pos] != 0x4E:
                raise ProtocolError(f"pgoutput Update on relation {relid}: expected 'N' tuple")
            new, _ = _tuple(payload, pos + 1)
            return Update(relid, old_kind, old, new)
        if tag == 0x44:  # 'D'
            (relid,) = _I.unpack_from(payload, 1)
            if payload[5] not in (0x4B, 0x4F):
                raise ProtocolError(f"pgoutput Delete on relation {relid}: expected 'K' or 'O'")
            old, _ = _tuple(payload, 6)
            return Delete(relid, chr(payload[5]), old)
        if tag == 0x42:  # 'B'
            final_lsn, ts, xid = _BEGIN.unpack_from(payload, 1)
            return Begin(final_lsn, _ts(ts), xid)
        if tag == 0x43:  # 'C'
            flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(payload, 1)
            return Commit(flags, commit_lsn, end_lsn, _ts(ts))
        if tag == 0x52:  # 'R'
            return _relation(payload)
        if tag == 0x59:  # 'Y'
            (oid,) = _I.unpack_from(payload, 1)
            ns, pos = _cstring(payload, 5, "Type")
            name, _ = _cstring(payload, pos, "Type")
            return TypeInfo(oid, ns, name)
        if tag == 0x4F:  # 'O'
            (lsn,) = _Q.unpack_from(payload, 1)
            name, _ = _cstring(payload, 9, "Origin")
            return Origin(lsn, name)
        if tag == 0x54:  # 'T'
            nrels, options = _TRUNC.unpack_from(payload, 1)
            relids = struct.unpack_from(f">{nrels}I", payload, 6)
            return Truncate(options, tuple(relids))
        if tag == 0x4D:  # 'M'
            flags = payload[1]
            (lsn,) = _Q.unpack_from(payload, 2)
            prefix, pos = _cstring(payload, 10, "Message")
            (n,) = _I.unpack_from(payload, pos)
            return LogicalMessage(bool(flags & 1), lsn, prefix, bytes(payload[pos + 4 : pos + 4 + n]))
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ProtocolError(
            f"pgoutput message {chr(tag)!r} ({len(payload)} bytes) is truncated or malformed: {e}"
        ) from e
    raise ProtocolError(
        f"pgoutput message type {chr(tag)!r} is not supported with proto_version 1 and streaming "
        "off: check the replication options (streaming and two_phase must be off)"
    )


def _relation(payload: bytes) -> Relation:
    (oid,) = _I.unpack_from(payload, 1)
    ns, pos = _cstring(payload, 5, "Relation")
    name, pos = _cstring(payload, pos, "Relation")
    ident = chr(payload[pos])
    (ncols,) = _H.unpack_from(payload, pos + 1)
    pos += 3
    cols = []
    for _ in range(ncols):
        flags = payload[pos]
        cname, pos = _cstring(payload, pos + 1, "Relation column")
        type_oid, typmod = _COLHDR.unpack_from(payload, pos)
        pos += 8
        cols.append(Column(flags, cname, type_oid, typmod))
    return Relation(oid, ns, name, ident, tuple(cols))
