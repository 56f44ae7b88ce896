"""The changelog's schema side files: the columns of each table topic.

Debezium values carry no types (``schemas.enable=false``), so capture records
a table's columns whenever they change, one JSON line per version::

    <root>/_schemas/<topic>.jsonl
    {"lsn": ..., "relation_oid": ..., "columns": [{"name", "type_oid", "type_name", "typmod", "key"}]}

The directory name starts with '_', so it is never a topic and Spark's file
source skips it. Verify, replay and the naive baseline read the latest
version back as a :class:`~txjoin.pg.catalog.Table`.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txjoin.errors import ChangelogError
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = ["SCHEMAS_DIR", "SchemaHistory", "SchemaLog", "read_columns", "read_table"]

SCHEMAS_DIR = "_schemas"


def _path(root: Path, topic: str) -> Path:
    return Path(root) / SCHEMAS_DIR / f"{topic}.jsonl"


def _fingerprint(columns: list[dict[str, Any]]) -> str:
    return json.dumps(columns, sort_keys=True)


class SchemaLog:
    """Appends a topic's columns when they differ from the last ones recorded."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._seen: dict[str, str] = {}  # topic -> fingerprint of its last recorded columns

    def record(
        self,
        topic: str,
        *,
        lsn: int,
        relation_oid: int,
        columns: Sequence[Column],
        primary_key: Sequence[str],
    ) -> None:
        """Record ``topic``'s columns as of ``lsn`` (durably) unless they are unchanged."""
        cols = [
            {
                "name": c.name,
                "type_oid": c.type.oid,
                "type_name": c.type.name,
                "typmod": c.type.typmod,
                "key": c.name in primary_key,
            }
            for c in columns
        ]
        fingerprint = _fingerprint(cols)
        if self._seen.get(topic) == fingerprint:
            return
        path = _path(self.root, topic)
        if fingerprint == _last_fingerprint(path):
            self._seen[topic] = fingerprint
            return
        record = {"lsn": lsn, "relation_oid": relation_oid, "columns": cols}
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.read_bytes() if path.exists() else b""
        tmp = path.with_name("." + path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(old + json.dumps(record).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        self._seen[topic] = fingerprint


def _last_fingerprint(path: Path) -> str | None:
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return None
    if not lines:
        return None
    return _fingerprint(json.loads(lines[-1])["columns"])


def read_columns(root: str | os.PathLike[str], topic: str) -> list[dict[str, Any]]:
    """The latest column list recorded for ``topic``, as written."""
    path = _path(Path(root), topic)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ChangelogError(
            f"no schema recorded for topic {topic} in {root}: was it written by txjoin capture?",
            topic=topic,
        ) from None
    cols: list[dict[str, Any]] = json.loads(lines[-1])["columns"]
    return cols


def read_table(root: str | os.PathLike[str], topic: str, source: str, name: QualifiedName) -> Table:
    """Table ``name`` of ``source`` as capture last recorded it in ``topic``'s schema file."""
    cols = read_columns(root, topic)
    columns = tuple(
        Column(str(c["name"]), ColumnType(int(c["type_oid"]), str(c["type_name"]), int(c["typmod"])))
        for c in cols
    )
    return Table(name, source, columns, tuple(str(c["name"]) for c in cols if c["key"]))


#: One recorded version of a topic's columns: the LSN of the Relation message, the columns.
Version = tuple[int, tuple[tuple[str, ColumnType], ...]]


class SchemaHistory:
    """Every recorded version of each topic's columns, in LSN order (files re-read when they grow)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._cache: dict[str, tuple[tuple[int, int], list[Version]]] = {}

    def versions(self, topic: str) -> list[Version]:
        path = _path(self.root, topic)
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._cache.get(topic)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        out: list[Version] = []
        for line in path.read_bytes().splitlines():
            rec = json.loads(line)
            cols = tuple(
                (str(c["name"]), ColumnType(int(c["type_oid"]), str(c["type_name"]), int(c["typmod"])))
                for c in rec["columns"]
            )
            out.append((int(rec["lsn"]), cols))
        out.sort(key=lambda v: v[0])  # a capture restart may record an older version again
        self._cache[topic] = (stamp, out)
        return out

    def at(self, topic: str, commit_lsn: int) -> Version | None:
        """The columns a transaction committing at ``commit_lsn`` was written with (None: unknown)."""
        return self.at_each(topic, [commit_lsn])[0]

    def at_each(self, topic: str, commit_lsns: Sequence[int]) -> list[Version | None]:
        """:meth:`at` for many transactions, reading the topic's versions once (a batch holds thousands)."""
        versions = self.versions(topic)
        starts = [v[0] for v in versions]
        return [versions[i - 1] if (i := bisect.bisect_left(starts, lsn)) else None for lsn in commit_lsns]
