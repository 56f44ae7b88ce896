"""The per-row apply path txjoin had before issue [2 of 7], kept as the apply
benchmark's baseline (``bench/apply.py``): one ``json.loads`` per event into a
``Change``, then a SQLite replica updated row by row (key lookups in chunks of
500, version check and TOAST merge in Python, ``executemany`` upserts).

Trimmed from ``src/txjoin/join/replica.py`` and ``join/batch.py`` at commit
7e6e895 to what the benchmark's workload uses (inserts, updates, deletes; no
array columns, no truncate). Not used by txjoin itself.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from txjoin.debezium.record import parse_record
from txjoin.debezium.values import UNAVAILABLE
from txjoin.pg.names import QualifiedName, parse_table_name

Row = dict[str, Any]


def encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class Change:
    table: QualifiedName
    op: str
    commit_lsn: int
    total_order: int
    before: Row | None
    after: Row | None
    xid: int = 0


def changes(rows: pd.DataFrame, tables: set[QualifiedName]) -> list[Change]:
    """Released rows to changes, one JSON parse per event (the old ``JoinStage._changes``)."""
    out: list[Change] = []
    for table, op, lsn, order, value, xid in zip(
        rows["table"], rows["op"], rows["commit_lsn"], rows["total_order"], rows["value"], rows["xid"],
        strict=True,
    ):  # fmt: skip
        name = parse_table_name(table)
        if name not in tables:
            continue
        rec = parse_record(value)
        out.append(Change(name, str(op), int(lsn), int(order), rec.get("before"), rec.get("after"), int(xid)))
    return out


def _q(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


class RowwiseStore:
    """The old SQLite replica store's apply path: a row per key, JSON text rows."""

    def __init__(self, path: Path, tables: Mapping[QualifiedName, tuple[str, ...]], indexed: Mapping[
        QualifiedName, Sequence[str]]) -> None:  # fmt: skip
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.pks = dict(tables)
        self.indexed = {t: sorted(indexed.get(t, ())) for t in tables}
        for t in tables:
            extra = "".join(f", {_q('c__' + c)} TEXT" for c in self.indexed[t])
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS {self._name(t)} (k TEXT PRIMARY KEY, lsn INTEGER NOT NULL, "
                f"ord INTEGER NOT NULL, del INTEGER NOT NULL, row TEXT{extra})"
            )
            for c in self.indexed[t]:
                idx = _q(f"i__{t.table}__{c}")
                self.db.execute(f"CREATE INDEX IF NOT EXISTS {idx} ON {self._name(t)} ({_q('c__' + c)})")

    @staticmethod
    def _name(t: QualifiedName) -> str:
        return _q(f"r__{t.schema}__{t.table}")

    def close(self) -> None:
        self.db.close()

    def load(self, table: QualifiedName, rows: Sequence[Row]) -> None:
        """Initial rows (the old snapshot path applied them as changes too)."""
        self.db.execute("BEGIN")
        self._flush(table, {encode([r[c] for c in self.pks[table]]): (1, i, 0, encode(r)) for i, r in
                            enumerate(rows)})  # fmt: skip
        self.db.execute("COMMIT")

    def apply(self, chs: Sequence[Change]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        by_table: dict[QualifiedName, list[Change]] = {}
        for ch in chs:
            by_table.setdefault(ch.table, []).append(ch)
        for table, cs in by_table.items():
            self._apply_table(table, cs)
        self.db.execute("COMMIT")

    @staticmethod
    def _chunks(values: Sequence[str], n: int = 500) -> Iterator[Sequence[str]]:
        for i in range(0, len(values), n):
            yield values[i : i + n]

    def _apply_table(self, table: QualifiedName, chs: list[Change]) -> None:
        pk = self.pks[table]
        keys = {tuple(((ch.before if ch.op == "d" else ch.after) or {})[c] for c in pk) for ch in chs}
        state: dict[str, tuple[int, int, int, str | None]] = {}
        for chunk in self._chunks(sorted(encode(list(k)) for k in keys)):
            marks = ",".join("?" * len(chunk))
            for k, lsn, ord_, dele, row in self.db.execute(
                f"SELECT k, lsn, ord, del, row FROM {self._name(table)} WHERE k IN ({marks})", chunk
            ):
                state[k] = (lsn, ord_, dele, row)
        dirty: dict[str, tuple[int, int, int, str | None]] = {}
        for ch in chs:
            pos = (ch.commit_lsn, ch.total_order)
            img = ch.before if ch.op == "d" else ch.after
            key = encode([(img or {})[c] for c in pk])
            cur = state.get(key)
            if cur is not None and (cur[0], cur[1]) >= pos:
                continue
            new: tuple[int, int, int, str | None]
            if ch.op == "d":
                new = (pos[0], pos[1], 1, None)
            else:
                after = dict(ch.after or {})
                if any(v == UNAVAILABLE for v in after.values()) and cur is not None and cur[3] is not None:
                    old = json.loads(cur[3])
                    after = {c: (old.get(c) if v == UNAVAILABLE else v) for c, v in after.items()}
                new = (pos[0], pos[1], 0, encode(after))
            state[key] = new
            dirty[key] = new
        self._flush(table, dirty)

    def _flush(self, table: QualifiedName, dirty: Mapping[str, tuple[int, int, int, str | None]]) -> None:
        cols = self.indexed[table]
        params = []
        for k, (lsn, ord_, dele, row) in dirty.items():
            values = json.loads(row) if row is not None else {}
            params.append((k, lsn, ord_, dele, row, *[None if dele else encode(values.get(c)) for c in cols]))
        names = "".join(f", {_q('c__' + c)}" for c in cols)
        marks = ",".join("?" * (5 + len(cols)))
        self.db.executemany(
            f"INSERT OR REPLACE INTO {self._name(table)} (k, lsn, ord, del, row{names}) VALUES ({marks})",
            params,
        )
