"""Replicas of the captured tables: a durable keyed store the join stage
can query by key, by join column and by array element.

Why not Delta: an in-place MERGE rewrites every file a changed key touches
(architecture.md measured 252 ms for 200 random rows at 1M), and a lookup by
a foreign key scans every file. SQLite gives B-tree lookups, so a batch's
cost follows its changes; Delta remains the published form of the outputs.

Version-monotonic upsert: every row carries the commit position that wrote
it, ``(commit_lsn, total_order)``; a change applies only if its position is
newer. Deletes and truncates leave tombstones with their position, so a
replayed older insert cannot bring a row back. Unchanged TOASTed values
(Debezium's placeholder) keep the replica's previous value.

One SQLite transaction per micro-batch holds the row changes, the batch's
affected output partitions and the batch id, so a crash between this commit
and the Delta commits replays exactly: the affected partitions are read back
instead of recomputed from a state that has moved on.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txjoin.cut import Cut, cuts_from_json, cuts_to_json
from txjoin.debezium.values import UNAVAILABLE
from txjoin.errors import ChangelogError, ConfigError, SchemaChangeError
from txjoin.pg.names import QualifiedName

__all__ = ["Change", "ReplicaStore", "TableSpec", "encode"]

Row = dict[str, Any]


def encode(value: Any) -> str:
    """The canonical text of a JSON value, used for keys and index columns."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class TableSpec:
    """A replicated table: its primary key and the columns lookups need."""

    name: QualifiedName
    primary_key: tuple[str, ...]
    indexed: frozenset[str] = field(default_factory=frozenset)
    arrays: frozenset[str] = field(default_factory=frozenset)

    @property
    def sql_name(self) -> str:
        return _q(f"r__{self.name.schema}__{self.name.table}")

    def elem_table(self, col: str) -> str:
        return _q(f"e__{self.name.schema}__{self.name.table}__{col}")


@dataclass(frozen=True)
class Change:
    """One released change, in commit order."""

    table: QualifiedName
    op: str
    commit_lsn: int
    total_order: int
    before: Row | None
    after: Row | None
    xid: int = 0


def _q(ident: str) -> str:
    """An SQLite identifier, quoted (names come from the source's catalog)."""
    return '"' + ident.replace('"', '""') + '"'


def _icol(col: str) -> str:
    return _q("c__" + col)


class ReplicaStore:
    """The replicas of one pipeline, in one SQLite file."""

    def __init__(self, path: Path, tables: Iterable[TableSpec]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tables = {t.name: t for t in tables}
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        # The batch commit must be durable before the Delta commits that follow it.
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS _meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS _pending "
            "(batch INTEGER, output TEXT, parts TEXT, PRIMARY KEY (batch, output))"
        )
        for spec in self.tables.values():
            self._create(spec)

    def _create(self, spec: TableSpec) -> None:
        extra = "".join(f", {_icol(c)} TEXT" for c in sorted(spec.indexed))
        self.db.execute(
            f"CREATE TABLE IF NOT EXISTS {spec.sql_name} (k TEXT PRIMARY KEY, lsn INTEGER NOT NULL, "
            f"ord INTEGER NOT NULL, del INTEGER NOT NULL, row TEXT{extra})"
        )
        existing = {r[1] for r in self.db.execute(f"PRAGMA table_info({spec.sql_name})")}
        for c in sorted(spec.indexed):
            if "c__" + c not in existing:
                # An output added later needs a new index: fill it from the rows.
                self.db.execute(f"ALTER TABLE {spec.sql_name} ADD COLUMN {_icol(c)} TEXT")
                rows = self.db.execute(f"SELECT k, row FROM {spec.sql_name} WHERE del = 0").fetchall()
                self.db.executemany(
                    f"UPDATE {spec.sql_name} SET {_icol(c)} = ? WHERE k = ?",
                    [(encode(json.loads(r).get(c)), k) for k, r in rows],
                )
            idx = _q(f"i__{spec.name.schema}__{spec.name.table}__{c}")
            self.db.execute(f"CREATE INDEX IF NOT EXISTS {idx} ON {spec.sql_name} ({_icol(c)})")
        for c in sorted(spec.arrays):
            et = spec.elem_table(c)
            exists = self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (et.strip('"').replace('""', '"'),),
            ).fetchone()
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS {et} (v TEXT NOT NULL, k TEXT NOT NULL, PRIMARY KEY (v, k))"
            )
            ek = _q(f"e__{spec.name.schema}__{spec.name.table}__{c}_k")
            self.db.execute(f"CREATE INDEX IF NOT EXISTS {ek} ON {et} (k)")
            if not exists:
                # An output added later needs this index: fill it from the live rows.
                elems = []
                for k, r in self.db.execute(f"SELECT k, row FROM {spec.sql_name} WHERE del = 0"):
                    arr = json.loads(r).get(c) or []
                    elems += [(e, k) for e in {encode(v) for v in arr if v is not None}]
                self.db.executemany(f"INSERT OR IGNORE INTO {et} VALUES (?, ?)", elems)

    def close(self) -> None:
        self.db.close()

    # -- metadata ---------------------------------------------------------
    def meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT v FROM _meta WHERE k = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Set a metadata value (inside the batch's transaction: between begin() and commit())."""
        self.db.execute("INSERT OR REPLACE INTO _meta VALUES (?, ?)", (key, json.dumps(value)))

    def cuts(self) -> dict[str, Cut]:
        """Per source, the cut of the last committed batch."""
        return cuts_from_json(self.meta("cuts", {}))

    @property
    def last_batch(self) -> int:
        return int(self.meta("last_batch", -1))

    def pending(self, batch: int) -> dict[str, list[list[Any]] | None]:
        """Affected partitions recorded for ``batch`` (None: all partitions)."""
        out: dict[str, list[list[Any]] | None] = {}
        for output, parts in self.db.execute("SELECT output, parts FROM _pending WHERE batch = ?", (batch,)):
            out[output] = json.loads(parts)
        return out

    # -- lookups ------------------------------------------------------------
    def _spec(self, table: QualifiedName) -> TableSpec:
        spec = self.tables.get(table)
        if spec is None:
            raise ConfigError(f"table {table} is not replicated by this pipeline")
        return spec

    @staticmethod
    def _chunks(values: Sequence[str], n: int = 500) -> Iterator[Sequence[str]]:
        for i in range(0, len(values), n):
            yield values[i : i + n]

    def by_keys(self, table: QualifiedName, keys: Iterable[tuple[Any, ...]]) -> list[Row]:
        spec = self._spec(table)
        return self._live_rows(spec, "k", sorted({encode(list(k)) for k in keys}))

    def _live_rows(self, spec: TableSpec, column_sql: str, encoded: Sequence[str]) -> list[Row]:
        """Live rows whose ``column_sql`` (k or an index column) is one of ``encoded``."""
        out: list[Row] = []
        for chunk in self._chunks(encoded):
            marks = ",".join("?" * len(chunk))
            out += [
                json.loads(r[0])
                for r in self.db.execute(
                    f"SELECT row FROM {spec.sql_name} WHERE del = 0 AND {column_sql} IN ({marks})", chunk
                )
            ]
        return out

    def by_column(
        self, table: QualifiedName, column: str, values: Iterable[Any], *, include_null: bool = False
    ) -> list[Row]:
        """Live rows whose ``column`` equals one of ``values``.

        NULL never equals anything in a join, so None in ``values`` matches
        nothing unless ``include_null`` (GROUP BY puts NULLs in one group).
        """
        spec = self._spec(table)
        if column in spec.primary_key and len(spec.primary_key) == 1:
            return self.by_keys(table, [(v,) for v in values if v is not None])
        if column not in spec.indexed:
            raise ConfigError(f"column {table}.{column} is not indexed in the replica store")
        enc = sorted({encode(v) for v in values if v is not None or include_null})
        return self._live_rows(spec, _icol(column), enc)

    def by_element(self, table: QualifiedName, column: str, values: Iterable[Any]) -> list[Row]:
        """Rows whose array ``column`` contains any of ``values``."""
        spec = self._spec(table)
        if column not in spec.arrays:
            raise ConfigError(f"array column {table}.{column} has no element index")
        enc = sorted({encode(v) for v in values if v is not None})
        keys: set[str] = set()
        for chunk in self._chunks(enc):
            marks = ",".join("?" * len(chunk))
            keys |= {
                r[0]
                for r in self.db.execute(
                    f"SELECT k FROM {spec.elem_table(column)} WHERE v IN ({marks})", chunk
                )
            }
        return self.by_keys(table, [tuple(json.loads(k)) for k in keys])

    def all_rows(self, table: QualifiedName) -> list[Row]:
        spec = self._spec(table)
        return [json.loads(r[0]) for r in self.db.execute(f"SELECT row FROM {spec.sql_name} WHERE del = 0")]

    def count(self, table: QualifiedName) -> int:
        spec = self._spec(table)
        row = self.db.execute(f"SELECT count(*) FROM {spec.sql_name} WHERE del = 0").fetchone()
        return int(row[0])

    # -- applying a batch ---------------------------------------------------
    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(
        self, batch: int, affected: Mapping[str, list[list[Any]] | None], cuts: Mapping[str, Cut]
    ) -> None:
        """Record the batch's affected partitions and cut, then commit."""
        self.db.execute("DELETE FROM _pending WHERE batch < ?", (batch - 1,))
        self.db.executemany(
            "INSERT OR REPLACE INTO _pending VALUES (?, ?, ?)",
            [(batch, output, json.dumps(parts)) for output, parts in affected.items()],
        )
        self.set_meta("last_batch", batch)
        self.set_meta("cuts", cuts_to_json(cuts))
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def apply(self, changes: Sequence[Change]) -> dict[QualifiedName, set[tuple[Any, ...]]]:
        """Apply changes (in commit order); return the primary keys touched.

        Must run between :meth:`begin` and :meth:`commit`.
        """
        touched: dict[QualifiedName, set[tuple[Any, ...]]] = {}
        by_table: dict[QualifiedName, list[Change]] = {}
        for ch in changes:
            by_table.setdefault(ch.table, []).append(ch)
        for table, chs in by_table.items():
            touched[table] = self._apply_table(self._spec(table), chs)
        return touched

    def _key(self, spec: TableSpec, row: Row | None, ch: Change) -> tuple[Any, ...]:
        if row is None:
            raise ChangelogError(
                f"{ch.op!r} event of transaction {ch.xid} on {spec.name} has no row image "
                "to take its key from",
                table=str(spec.name),
                xid=ch.xid,
            )
        try:
            return tuple(row[c] for c in spec.primary_key)
        except KeyError as e:
            raise SchemaChangeError(
                f"{spec.name}: the event of transaction {ch.xid} at commit LSN {ch.commit_lsn} lacks primary "
                f"key column {e.args[0]!r}: the column was dropped or renamed at the source; the outputs "
                "stay at their last good version. Restore the column, or start a new pipeline "
                "for the new schema",
                table=str(spec.name),
                xid=ch.xid,
                column=e.args[0],
            ) from None

    def _apply_table(self, spec: TableSpec, changes: list[Change]) -> set[tuple[Any, ...]]:
        # Current state of every key this batch touches, read once.
        keys: set[tuple[Any, ...]] = set()
        for ch in changes:
            if ch.op in ("c", "r", "u"):
                keys.add(self._key(spec, ch.after, ch))
            elif ch.op == "d":
                keys.add(self._key(spec, ch.before, ch))
        state: dict[str, tuple[int, int, int, str | None]] = {}
        enc_keys = sorted(encode(list(k)) for k in keys)
        for chunk in self._chunks(enc_keys):
            marks = ",".join("?" * len(chunk))
            for k, lsn, ord_, dele, row in self.db.execute(
                f"SELECT k, lsn, ord, del, row FROM {spec.sql_name} WHERE k IN ({marks})", chunk
            ):
                state[k] = (lsn, ord_, dele, row)
        dirty: dict[str, tuple[int, int, int, str | None]] = {}
        touched: set[tuple[Any, ...]] = set(keys)
        # Rows deleted by this batch, by (xid, position): a primary-key change
        # arrives as delete + create, and the create's unchanged TOASTed values
        # are the deleted row's.
        deleted: dict[tuple[int, int], str] = {}
        for ch in changes:
            pos = (ch.commit_lsn, ch.total_order)
            if ch.op == "t":
                self._flush(spec, dirty)
                dirty.clear()
                # Every row older than the truncate becomes a tombstone.
                for (k,) in self.db.execute(
                    f"SELECT k FROM {spec.sql_name} WHERE del = 0 AND (lsn, ord) < (?, ?)", pos
                ):
                    touched.add(tuple(json.loads(k)))
                self.db.execute(
                    f"UPDATE {spec.sql_name} SET del = 1, lsn = ?, ord = ?, row = NULL "
                    "WHERE (lsn, ord) < (?, ?)",
                    (*pos, *pos),
                )
                for et in (spec.elem_table(c) for c in spec.arrays):
                    self.db.execute(
                        f"DELETE FROM {et} WHERE k NOT IN (SELECT k FROM {spec.sql_name} WHERE del = 0)"
                    )
                state = {k: (*pos, 1, None) if (v[0], v[1]) < pos else v for k, v in state.items()}
                continue
            row_img = ch.before if ch.op == "d" else ch.after
            key = encode(list(self._key(spec, row_img, ch)))
            cur = state.get(key)
            if cur is not None and (cur[0], cur[1]) >= pos:
                continue  # version-monotonic: a newer (or the same) change is already there
            new: tuple[int, int, int, str | None]
            if ch.op == "d":
                new = (pos[0], pos[1], 1, None)
                if cur is not None and not cur[2] and cur[3] is not None:
                    deleted[(ch.xid, ch.total_order)] = cur[3]
            else:
                after = dict(ch.after or {})
                if any(v == UNAVAILABLE for v in after.values()):
                    moved_from = deleted.get((ch.xid, ch.total_order - 1))
                    if (cur is None or cur[2] or cur[3] is None) and moved_from is not None:
                        cur = (0, 0, 0, moved_from)
                    if cur is None or cur[2] or cur[3] is None:
                        raise ChangelogError(
                            f"{spec.name}: transaction {ch.xid} updates key {key} with an unchanged TOASTed "
                            "value, but the replica has no earlier row to take it from",
                            table=str(spec.name),
                            xid=ch.xid,
                        )
                    old = json.loads(cur[3])
                    after = {c: (old.get(c) if v == UNAVAILABLE else v) for c, v in after.items()}
                new = (pos[0], pos[1], 0, encode(after))
            state[key] = new
            dirty[key] = new
        self._flush(spec, dirty)
        return touched

    def _flush(self, spec: TableSpec, dirty: Mapping[str, tuple[int, int, int, str | None]]) -> None:
        if not dirty:
            return
        cols = sorted(spec.indexed)
        params = []
        for k, (lsn, ord_, dele, row) in dirty.items():
            values = json.loads(row) if row is not None else {}
            params.append((k, lsn, ord_, dele, row, *[None if dele else encode(values.get(c)) for c in cols]))
        names = "".join(f", {_icol(c)}" for c in cols)
        marks = ",".join("?" * (5 + len(cols)))
        self.db.executemany(
            f"INSERT OR REPLACE INTO {spec.sql_name} (k, lsn, ord, del, row{names}) VALUES ({marks})", params
        )
        for c in spec.arrays:
            et = spec.elem_table(c)
            self.db.executemany(f"DELETE FROM {et} WHERE k = ?", [(k,) for k in dirty])
            elems = []
            for k, (_, _, dele, row) in dirty.items():
                if dele or row is None:
                    continue
                arr = json.loads(row).get(c) or []
                elems += [(e, k) for e in {encode(v) for v in arr if v is not None}]
            self.db.executemany(f"INSERT OR IGNORE INTO {et} VALUES (?, ?)", elems)
