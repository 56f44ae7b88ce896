"""Replicas of the captured tables: a durable, columnar keyed store (DuckDB).

Why not Delta: an in-place MERGE rewrites every file a changed key touches,
and a lookup by a foreign key scans every file. DuckDB keeps typed columns
with ART indexes on primary keys and join columns, takes and returns Arrow
tables, so a batch's changes are applied vectorized, and loads and exports
Parquet directly (the columnar snapshot, the full recompute on Spark). Delta
remains the published form of the outputs. DuckDB 1.4 reads through an ART
index for an IN list of constants or an upsert, never for a join, which scans
the table (200 keys: 5 ms at 100k rows, 23 ms at 1M, 160-220 ms at 10M;
bench/NOTES.md). So few changes, or few to a large table, are upserted
(:meth:`ReplicaStore._few`), and few keys are looked up by an IN list
(:meth:`ReplicaStore._index_keys`).

Each table holds its columns' Debezium values, typed
(:func:`txjoin.debezium.arrow.value_type`), plus the commit position that
wrote the row, ``(_lsn, _ord)``: a change applies only if its position is
newer (version-monotonic). Deletes and truncates leave tombstones
(``_del``) with their position, so a replayed older insert cannot bring a row
back. Unchanged TOASTed values (Debezium's placeholder) keep the replica's
previous value.

One transaction per micro-batch holds the row changes, the batch's affected
output partitions and the batch id, so a crash between this commit and the
Delta commits replays exactly: the affected partitions are read back.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from txjoin.cut import Cut, cuts_from_json, cuts_to_json
from txjoin.debezium.arrow import value_type
from txjoin.errors import ChangelogError, ConfigError, OutOfMemory
from txjoin.join.changes import TOAST, resolve_toast
from txjoin.join.tables import TableSpec
from txjoin.join.tables import column as _c
from txjoin.join.tables import duck_type as _duck_type
from txjoin.join.tables import quote as _q
from txjoin.join.tables import select_list as _select
from txjoin.pg.names import QualifiedName

__all__ = ["FORMAT", "Partitions", "ReplicaStore", "TableSpec", "out_of_memory", "read_meta"]

#: Output partitions: a table of anchor-column values (Debezium values); None means all.
Partitions: TypeAlias = pa.Table

#: Version of the store's layout; an older store is refused (rebuild it from the changelog).
FORMAT = 2


#: An upsert through the ART index when a table has this many rows per change or more, or a batch
#: has at most FEW_CHANGES changes for the table (_few).
FEW_CHANGES_PER_ROWS, FEW_CHANGES = 10, 64
#: A lookup by an indexed column goes through its ART index for up to 16 values; by primary key, one
#: more per 5,000 table rows, and at most 2,048 (:meth:`ReplicaStore._index_keys`).
INDEXED_KEYS, ROWS_PER_INDEXED_KEY, MAX_INDEXED_KEYS = 16, 5000, 2048


#: Events in a staged transaction's first chunk, which measures the events' width.
_FIRST_CHUNK_ROWS = 100


class ReplicaStore:
    """The replicas of one pipeline, in one DuckDB file."""

    def __init__(
        self, path: Path, tables: Iterable[TableSpec], *, memory_limit: str = "1GB", threads: int = 2
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tables = {t.name: t for t in tables}
        #: Table rows per change from which a batch is upserted, and changes up to which it always is
        #: (:meth:`_few`; tests set 0: always, and 0: by size only).
        self.few_changes_per_rows, self.few_changes = FEW_CHANGES_PER_ROWS, FEW_CHANGES
        #: Values a lookup takes through an index on any table, and table rows per key past them for a
        #: lookup by key (:meth:`_index_keys`; tests set 0: never, and 0: always).
        self.indexed_keys, self.rows_per_indexed_key = INDEXED_KEYS, ROWS_PER_INDEXED_KEY
        self._rows: dict[QualifiedName, int] = {}  # rows (live or not) per table, as last counted
        self._index_max = 0  # DuckDB's index_scan_max_count, as last set
        try:
            # Checkpoints (which rewrite changed row groups) every GB of WAL, not every 16 MB.
            config: dict[str, str | bool | int | float | list[str]] = {
                "memory_limit": memory_limit,
                "threads": max(1, threads),
                "checkpoint_threshold": "1GB",
                "index_scan_percentage": 0.0,  # scan past index_scan_max_count rows (_index_keys sets it)
            }
            self.db = duckdb.connect(str(self.path), config=config)
        except duckdb.Error as e:
            raise ChangelogError(
                f"cannot open the replica store {self.path}: {e}. Another txjoin process may be running "
                "this pipeline; stop it, or point state_dir elsewhere",
                path=str(self.path),
            ) from None
        self._lock = threading.RLock()
        # _meta as this connection sees it (key -> JSON text, None: no row): a batch reads it
        # about ten times, at 1 ms a query. Only this store writes the file (DuckDB locks it).
        self._meta: dict[str, str | None] = {}
        self.db.execute("CREATE TABLE IF NOT EXISTS _meta (k VARCHAR PRIMARY KEY, v VARCHAR NOT NULL)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS _pending (batch BIGINT, output VARCHAR, parts BLOB, "
            "PRIMARY KEY (batch, output))"
        )
        # Events of staged (large) transactions, kept until their commit row (txjoin.assemble.staging).
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS _stage (source VARCHAR, xid BIGINT, ord BIGINT, lsn BIGINT, "
            "op VARCHAR, tbl VARCHAR, value VARCHAR, PRIMARY KEY (source, xid, ord))"
        )
        fmt = self.meta("format", None)
        if fmt is None:
            self.set_meta("format", FORMAT)
        elif int(fmt) != FORMAT:
            raise ChangelogError(
                f"the replica store {self.path} has layout {fmt}, this txjoin reads layout {FORMAT}: delete "
                "the pipeline's state directory (replicas, checkpoint and outputs are rebuilt from the "
                "changelog)",
                path=str(self.path),
            )
        for spec in self.tables.values():
            self._create(spec)

    def _create(self, spec: TableSpec) -> None:
        cols = ", ".join(f"{_c(n)} {_duck_type(value_type(t))}" for n, t in spec.columns)
        pk = ", ".join(_c(k) for k in spec.primary_key)
        self.db.execute(
            f"CREATE TABLE IF NOT EXISTS {spec.sql_name} ({cols}, _lsn BIGINT NOT NULL, "
            f"_ord BIGINT NOT NULL, _del BOOLEAN NOT NULL, PRIMARY KEY ({pk}))"
        )
        existing = {
            r[0] for r in self.db.execute(f"SELECT column_name FROM (DESCRIBE {spec.sql_name})").fetchall()
        }
        for n, t in spec.columns:
            if "c__" + n not in existing:  # a column added at the source since
                self.db.execute(f"ALTER TABLE {spec.sql_name} ADD COLUMN {_c(n)} {_duck_type(value_type(t))}")
        for c in spec.secondary:  # element lookups scan the lists (list_has_any)
            idx = _q(f"i__{spec.name.schema}__{spec.name.table}__{c}")
            self.db.execute(f"CREATE INDEX IF NOT EXISTS {idx} ON {spec.sql_name} ({_c(c)})")

    def replace_table(self, spec: TableSpec) -> None:
        """Drop the table and create it empty with ``spec``'s columns (a resync, inside the batch's
        transaction); ``spec`` also replaces the store's view of the table."""
        old = self.tables.get(spec.name)
        if old is not None:
            for c in old.secondary:
                self.db.execute(f"DROP INDEX IF EXISTS {_q(f'i__{old.name.schema}__{old.name.table}__{c}')}")
            self.db.execute(f"DROP TABLE IF EXISTS {old.sql_name}")
        self.tables[spec.name] = spec
        self._rows.pop(spec.name, None)
        self._create(spec)

    def set_view(self, spec: TableSpec) -> None:
        """The columns the store reads and writes for ``spec.name`` from now on (no DDL: columns
        only leave the view, or keep their stored type)."""
        self.tables[spec.name] = spec

    def close(self) -> None:
        self.db.close()

    # -- metadata and batches --------------------------------------------------
    def meta(self, key: str, default: Any = None) -> Any:
        if key not in self._meta:
            rows = self.db.execute("SELECT v FROM _meta WHERE k = ?", [key]).fetchall()
            self._meta[key] = str(rows[0][0]) if rows else None
        text = self._meta[key]
        return default if text is None else json.loads(text)  # a new object: callers change theirs

    def set_meta(self, key: str, value: Any) -> None:
        """Set a metadata value (inside the batch's transaction: between begin() and commit())."""
        text = json.dumps(value)
        if self._meta.get(key) == text:
            return
        if self._meta.get(key) is not None:  # the row exists: an UPDATE costs 0.7 ms, INSERT OR REPLACE 2.5
            self.db.execute("UPDATE _meta SET v = ? WHERE k = ?", [text, key])
        else:
            self.db.execute("INSERT OR REPLACE INTO _meta VALUES (?, ?)", [key, text])
        self._meta[key] = text

    @property
    def last_batch(self) -> int:
        return int(self.meta("last_batch", -1))

    def cuts(self) -> dict[str, Cut]:
        """Per source, the cut of the last committed batch."""
        return cuts_from_json(self.meta("cuts", {}))

    def pending(self, batch: int) -> dict[str, Partitions | None]:
        """Affected partitions recorded for ``batch`` (None: all partitions)."""
        out: dict[str, Partitions | None] = {}
        for output, parts in self.db.execute(
            "SELECT output, parts FROM _pending WHERE batch = ?", [batch]
        ).fetchall():
            out[output] = None if parts is None else pa.ipc.open_stream(bytes(parts)).read_all()
        return out

    def begin(self) -> None:
        self._rows.clear()
        self.db.execute("BEGIN TRANSACTION")

    def commit(self, batch: int, affected: Mapping[str, Partitions | None], cuts: Mapping[str, Cut]) -> None:
        """Record the batch's affected partitions and cut, then commit."""
        try:
            # DELETE then INSERT: 1.3-2 ms against 3.7-4.9 for INSERT OR REPLACE's conflict check.
            self.db.execute("DELETE FROM _pending WHERE batch < ? OR batch = ?", [batch - 1, batch])
            for output, parts in affected.items():
                self.db.execute(
                    "INSERT INTO _pending VALUES (?, ?, ?)",
                    [batch, output, None if parts is None else _ipc(parts)],
                )
            self.set_meta("last_batch", batch)
            self.set_meta("cuts", cuts_to_json(cuts))
            self.db.execute("COMMIT")
        except BaseException:
            self._meta.clear()  # what the transaction set may never be committed
            raise

    def rollback(self) -> None:
        self._meta.clear()
        with contextlib.suppress(duckdb.TransactionException):  # no transaction open
            self.db.execute("ROLLBACK")

    # -- lookups: live rows, as Arrow ----------------------------------------------
    def _spec(self, table: QualifiedName) -> TableSpec:
        spec = self.tables.get(table)
        if spec is None:
            raise ConfigError(f"table {table} is not replicated by this pipeline")
        return spec

    def _with_arg(
        self, sql: str, data: pa.Table | None, params: Sequence[Any] = (), *, rows: bool = False
    ) -> Any:
        """Run ``sql`` with ``data`` as its table ``{arg}`` (its result as Arrow if ``rows``).

        DuckDB finds ``data`` as this frame's local variable (a replacement scan). A view made
        with ``register`` would keep ``data`` in memory until the transaction ends, even once
        unregistered: every chunk of a staged transaction (one transaction) would stay."""
        _txjoin_arg = data  # read by DuckDB, by its name
        sql = sql.replace("{arg}", "_txjoin_arg")
        result = self.db.execute(sql, list(params) or None)
        # execute() then fetch: 0.87 ms for a lookup of few keys, against 1.33 for sql() (bench/NOTES.md).
        return result.fetch_arrow_table() if rows else result

    def _query(self, sql: str, data: pa.Table | None = None, params: Sequence[Any] = ()) -> pa.Table:
        with self._lock:
            result: pa.Table = self._with_arg(sql, data, params, rows=True)
            return result

    def rows_by_tuples(
        self,
        table: QualifiedName,
        columns: Sequence[str],
        values: pa.Table,
        *,
        select: Sequence[str] | None = None,
    ) -> pa.Table:
        """Live rows whose ``columns`` equal (NULL-safely) a row of ``values``."""
        spec = self._spec(table)
        if values.num_rows == 0:
            return spec.schema(select).empty_table()
        found = self._index_keys(spec, columns, values)
        if found is not None:  # an IN list; the CTE keeps the _del filter out of the index scan
            col, keys, most = found
            names = [c for c, _ in spec.columns] if select is None else list(select)
            fetched = ", ".join(map(_c, dict.fromkeys([*names, *columns])))
            sql = (
                f"WITH c AS MATERIALIZED (SELECT {fetched}, _del FROM {spec.sql_name} "
                f"WHERE {_c(col)} IN ({', '.join('?' * len(keys)) or 'NULL'})) "
                f"SELECT {_select(spec, select, 'c')} FROM c "
            )
            if len(columns) > 1:  # the rows of those values that match a whole tuple
                sql += f"SEMI JOIN {{arg}} v ON {_matching('c', columns)} "
            with self._lock:
                if most != self._index_max:
                    self.db.execute(f"SET index_scan_max_count = {int(most)}")
                    self._index_max = most
                return self._query(sql + "WHERE NOT c._del", values.select(list(columns)), keys)
        sql = (
            f"SELECT {_select(spec, select)} FROM {spec.sql_name} r "
            f"SEMI JOIN {{arg}} v ON {_matching('r', columns)} WHERE NOT r._del"
        )
        return self._query(sql, values.select(list(columns)))

    def _index_keys(
        self, spec: TableSpec, columns: Sequence[str], values: pa.Table
    ) -> tuple[str, list[Any], int] | None:
        """A column of ``columns`` with an index of its own (integers or text, exact as parameters)
        whose distinct ``values`` are few enough for it, those values, and the most rows DuckDB may
        fetch through the index before it scans instead; None: a join. DuckDB cannot scan an index
        of two or more columns, so a composite key's lookup goes through one of its columns' own
        indexes, if any. One key took 2.4 against the join's 4.3 ms at 10k rows and 160-190 ms at
        10M; 200 keys 12-16 against 19-26 ms at 1M. A fetched row costs about 30 us, a join 4 ms
        and 20 us per 1,000 table rows (bench/NOTES.md)."""
        for col in columns:
            unique = tuple(spec.primary_key) == (col,)
            if not (unique or col in spec.secondary):
                continue
            if _duck_type(value_type(spec.types[col])) not in ("BIGINT", "INTEGER", "VARCHAR"):
                continue
            if not unique and values.column(col).null_count:
                continue  # IN never matches NULL; the join matches NULL with NULL (GROUP BY)
            keys = pc.unique(values.column(col).drop_null())  # a key is never NULL
            limit = self.indexed_keys  # a key has one row at most, a secondary index's value may have many
            if unique:
                per = self.rows_per_indexed_key
                limit = limit + self._size(spec) // per if per else MAX_INDEXED_KEYS
            if len(keys) > min(limit, MAX_INDEXED_KEYS):
                continue
            # Past 128 + 1 per 1,500 table rows, rows fetched through the index cost more than the join.
            return col, list(keys.to_pylist()), max(len(keys), 128 + self._size(spec) // 1500)
        return None

    def _size(self, spec: TableSpec) -> int:
        """Rows, live or not, in ``spec``'s table as counted since begin() or apply() (a hint)."""
        if spec.name not in self._rows:
            with self._lock:
                rows = self.db.execute(f"SELECT count(*) FROM {spec.sql_name}").fetchall()
            self._rows[spec.name] = int(rows[0][0])
        return self._rows[spec.name]

    def rows_by_keys(
        self, table: QualifiedName, keys: pa.Table, *, select: Sequence[str] | None = None
    ) -> pa.Table:
        return self.rows_by_tuples(table, self._spec(table).primary_key, keys, select=select)

    def rows_by_column(
        self,
        table: QualifiedName,
        column: str,
        values: pa.Array | pa.ChunkedArray,
        *,
        include_null: bool = False,
        select: Sequence[str] | None = None,
    ) -> pa.Table:
        """Live rows whose ``column`` equals one of ``values``.

        NULL never equals anything in a join, so a NULL in ``values`` matches
        nothing unless ``include_null`` (GROUP BY puts NULLs in one group).
        """
        if not include_null:
            values = values.drop_null()
        return self.rows_by_tuples(table, [column], pa.table({column: values}), select=select)

    def rows_by_element(
        self,
        table: QualifiedName,
        column: str,
        values: pa.Array | pa.ChunkedArray,
        *,
        select: Sequence[str] | None = None,
    ) -> pa.Table:
        """Live rows whose array ``column`` contains any of ``values``."""
        spec = self._spec(table)
        values = values.drop_null()
        if len(values) == 0:
            return spec.schema(select).empty_table()
        sql = (
            f"SELECT {_select(spec, select)} FROM {spec.sql_name} r WHERE NOT r._del "
            f"AND list_has_any(r.{_c(column)}, (SELECT list(v) FROM {{arg}}))"
        )
        return self._query(sql, pa.table({"v": values}))

    def all_rows(self, table: QualifiedName, *, select: Sequence[str] | None = None) -> pa.Table:
        spec = self._spec(table)
        return self._query(f"SELECT {_select(spec, select)} FROM {spec.sql_name} r WHERE NOT r._del")

    def scan(
        self, table: QualifiedName, *, select: Sequence[str] | None = None, batch_rows: int = 131_072
    ) -> Iterator[pa.RecordBatch]:
        """Live rows in record batches (bounded memory, for exports)."""
        spec = self._spec(table)
        cur = self.db.cursor()
        try:
            rel = cur.sql(f"SELECT {_select(spec, select)} FROM {spec.sql_name} r WHERE NOT r._del")
            assert rel is not None
            yield from rel.fetch_arrow_reader(batch_rows)
        finally:
            cur.close()

    def count(self, table: QualifiedName) -> int:
        spec = self._spec(table)
        rows = self.db.execute(f"SELECT count(*) FROM {spec.sql_name} WHERE NOT _del").fetchall()
        return int(rows[0][0])

    # -- staged transactions -----------------------------------------------------------
    def stage(self, rows: pd.DataFrame) -> None:
        """Keep staged events (released rows with ``tx_seq`` -1); a redelivered one is kept once."""
        if not len(rows):
            return
        data = pa.table(
            {
                "source": pa.array(rows["source"].astype(str).tolist(), pa.string()),
                "xid": pa.array(rows["xid"].to_numpy(), pa.int64()),
                "ord": pa.array(rows["total_order"].to_numpy(), pa.int64()),
                "lsn": pa.array(rows["lsn"].to_numpy(), pa.int64()),
                "op": pa.array(rows["op"].tolist(), pa.string()),
                "tbl": pa.array(rows["table"].tolist(), pa.string()),
                "value": pa.array(rows["value"].tolist(), pa.string()),
            }
        )
        with self._lock:
            self._with_arg("INSERT OR IGNORE INTO _stage SELECT * FROM {arg}", data)

    def staged(self, source: str, xid: int, chunk_rows: int, chunk_bytes: int = 0) -> Iterator[pd.DataFrame]:
        """A staged transaction's events in position order, in chunks (bounded memory).

        A chunk holds at most ``chunk_rows`` events and, when ``chunk_bytes`` is set, about that
        many bytes of event values: a chunk's memory grows with its values' width (parsed JSON,
        Python strings), so rows alone would let wide tables take gigabytes. Each chunk's size
        comes from the bytes per event of the one before (the first is small), so where the events
        widen one chunk holds more, up to ``chunk_rows``.

        Reads on the batch's own connection, page by page: a cursor would be
        another connection, blind to events staged earlier in this transaction.
        """
        last = -1
        rows = min(chunk_rows, _FIRST_CHUNK_ROWS) if chunk_bytes > 0 else chunk_rows
        where = "source = $source AND xid = $xid AND ord > $last"
        while True:
            params = {"source": source, "xid": xid, "last": last}
            with self._lock:
                # The chunk's last position first, over positions alone: ORDER BY ... LIMIT over the
                # values would keep every value it scans (DuckDB's top-N), past the memory limit.
                (end,) = self.db.sql(
                    f"SELECT max(ord) FROM (SELECT ord FROM _stage WHERE {where} ORDER BY ord "
                    f"LIMIT {max(1, int(rows))})",
                    params=params,
                ).fetchone() or (None,)
                if end is None:
                    return
                chunk = self.db.sql(
                    'SELECT xid, ord AS total_order, lsn, op, tbl AS "table", value FROM _stage '
                    f"WHERE {where} AND ord <= $end ORDER BY ord",
                    params={**params, "end": end},
                ).to_arrow_table()
            last = int(chunk.column("total_order")[-1].as_py())
            if chunk_bytes > 0:
                per_event = max(1.0, chunk.column("value").nbytes / chunk.num_rows)
                rows = min(chunk_rows, max(1, int(chunk_bytes / per_event)))
            yield chunk.to_pandas()

    def unstage(self, source: str, xid: int) -> None:
        self.db.execute("DELETE FROM _stage WHERE source = ? AND xid = ?", [source, xid])

    # -- applying a batch ------------------------------------------------------------
    def load_parquet(
        self, table: QualifiedName, files: Sequence[str | Path], lsn: int, *, first: int = 0
    ) -> int:
        """Bulk-load a snapshot's Parquet files of ``table`` (positions ``(lsn, first + row number)``).

        Must run inside the batch's transaction, before any change of the table.
        """
        spec = self._spec(table)
        if not files:
            return 0
        self._rows.pop(table, None)
        names = ", ".join(_c(n) for n, _ in spec.columns)
        reads = ", ".join(_q(n) for n, _ in spec.columns)
        file_list = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"
        before = self.count(table)
        try:
            self.db.execute(
                f"INSERT INTO {spec.sql_name} ({names}, _lsn, _ord, _del) "
                f"SELECT {reads}, ?, ? + row_number() OVER (), false FROM read_parquet({file_list})",
                [lsn, first],
            )
        except duckdb.ConstraintException as e:
            raise ChangelogError(
                f"the snapshot of {table} holds a primary key twice, or the replica already holds its rows: "
                f"{e}. Delete the pipeline's state directory and run it again",
                table=str(table),
            ) from None
        return self.count(table) - before

    def apply(self, batches: Mapping[QualifiedName, pa.Table], *, bulk: bool = False) -> None:
        """Apply per-table change batches (:mod:`txjoin.join.changes`).

        Must run between :meth:`begin` and :meth:`commit`. Within a batch the
        changes may come in any order: positions decide. ``bulk`` (a staged
        transaction's chunks, many in one replica transaction): changed rows are
        deleted and inserted, never updated in place. A transaction's in-place
        updates stay in DuckDB's memory limit until its commit: 500,000 updates of
        4 KB rows ran out of a 1.1 GB limit; deleted and inserted, they did not.
        """
        self._rows.clear()
        for table, batch in batches.items():
            if batch.num_rows:
                self._apply_table(self._spec(table), batch, bulk)

    def _apply_table(self, spec: TableSpec, batch: pa.Table, bulk: bool) -> None:
        batch = batch.sort_by([("_lsn", "ascending"), ("_ord", "ascending")])
        ops = batch.column("_op").to_pylist()
        start = 0
        for i, op in enumerate([*ops, "t"]):  # a truncate splits the batch; the sentinel ends it
            if op != "t":
                continue
            if i > start:
                self._upsert(spec, batch.slice(start, i - start), bulk)
            if i < len(ops):
                self._truncate(
                    spec, int(batch.column("_lsn")[i].as_py()), int(batch.column("_ord")[i].as_py())
                )
            start = i + 1

    def _truncate(self, spec: TableSpec, lsn: int, order: int) -> None:
        """Every row older than the truncate becomes a tombstone."""
        others = [n for n, _ in spec.columns if n not in spec.primary_key]
        nulls = "".join(f", {_c(n)} = NULL" for n in others)
        self.db.execute(
            f"UPDATE {spec.sql_name} SET _del = true, _lsn = ?, _ord = ?{nulls} "
            "WHERE _lsn < ? OR (_lsn = ? AND _ord < ?)",
            [lsn, order, lsn, lsn, order],
        )

    def _upsert(self, spec: TableSpec, batch: pa.Table, bulk: bool) -> None:
        pk = list(spec.primary_key)
        nulls = [c for c in pk if batch.column(c).null_count]
        if nulls:
            i = batch.column(nulls[0]).to_pylist().index(None)
            raise ChangelogError(
                f"{spec.name}: the {batch.column('_op')[i].as_py()!r} event of transaction "
                f"{batch.column('_xid')[i].as_py()} at commit LSN {batch.column('_lsn')[i].as_py()} has no "
                f"value for primary key column {nulls[0]!r}: its row image is missing or the column was "
                "dropped or renamed at the source. The outputs stay at their last good version",
                table=str(spec.name),
                xid=batch.column("_xid")[i].as_py(),
                column=nulls[0],
            )
        if TOAST in batch.column_names and any(batch.column(TOAST).to_pylist()):
            # Changes re-delivered from earlier batches must not lend a TOASTed value.
            batch = self._not_stale(spec, batch)
            batch = resolve_toast(spec.name, pk, batch, self._previous(spec, batch))
        cols = [n for n, _ in spec.columns]
        on = " AND ".join(f"r.{_c(c)} = w.{_q(c)}" for c in pk)
        newer = "(w._lsn > r._lsn OR (w._lsn = r._lsn AND w._ord > r._ord))"
        part = ", ".join(f"w.{_q(c)}" for c in pk)

        def value(c: str) -> str:  # a delete leaves a tombstone: key only
            return f"w.{_q(c)}" if c in pk else f"(CASE WHEN w._op = 'd' THEN NULL ELSE w.{_q(c)} END)"

        latest = (
            "(SELECT * FROM {arg} w QUALIFY row_number() OVER "
            f"(PARTITION BY {part} ORDER BY w._lsn DESC, w._ord DESC) = 1)"
        )
        table = spec.sql_name
        data = batch.select([*cols, "_op", "_lsn", "_ord"])
        names = f"{', '.join(_c(c) for c in cols)}, _lsn, _ord, _del"
        rows = f"SELECT {', '.join(value(c) for c in cols)}, w._lsn, w._ord, w._op = 'd' FROM {latest} w"
        absent = f"WHERE NOT EXISTS (SELECT 1 FROM {table} r WHERE {on})"  # the keys the table lacks
        with self._lock:
            if not bulk and self._few(spec, data.num_rows):
                written = self._with_arg(self._upsert_sql(spec, names, rows), data).fetchall()[0][0]
                if not spec.secondary:
                    return  # every other key holds a newer (or the same) position already
                if written == self._distinct_keys(data, pk, part):
                    return
                # The rest: rows whose indexed columns change, and keys already at a newer position.
                absent = "ON CONFLICT DO NOTHING"  # through the key's index, as the upsert
            elif not bulk:
                # Rows whose indexed columns keep their values are updated in place (3x
                # cheaper than delete + insert, which DuckDB needs when an index changes).
                same = (
                    " AND ".join(f"r.{_c(c)} IS NOT DISTINCT FROM {value(c)}" for c in spec.secondary)
                    or "true"
                )
                sets = ", ".join(
                    f"{_c(c)} = {value(c)}" for c in cols if c not in pk and c not in spec.secondary
                )
                self._with_arg(
                    f"UPDATE {table} AS r SET {sets + ', ' if sets else ''}_lsn = w._lsn, _ord = w._ord, "
                    f"_del = w._op = 'd' FROM {latest} w WHERE {on} AND {newer} AND {same}",
                    data,
                )
            if spec.secondary or bulk:
                self._with_arg(f"DELETE FROM {table} r USING {latest} w WHERE {on} AND {newer}", data)
            self._with_arg(f"INSERT INTO {table} ({names}) {rows} {absent}", data)

    def _distinct_keys(self, data: pa.Table, pk: list[str], part: str) -> int:
        """Distinct keys of ``data``, counted by Arrow (a DuckDB query costs 1-2 ms a batch). Arrow
        tells apart at least the keys DuckDB does, so an equal count still means every key."""
        try:
            keys = data.select(pk).group_by(pk, use_threads=False).aggregate([])
            return int(keys.num_rows)
        except pa.ArrowNotImplementedError:  # key types Arrow cannot group (lists)
            sql = f"SELECT count(*) FROM (SELECT DISTINCT {part} FROM {{arg}} w)"
            return int(self._with_arg(sql, data).fetchone()[0])

    def _few(self, spec: TableSpec, changes: int) -> bool:
        """Whether ``changes`` rows are few enough for :meth:`_upsert_sql` on ``spec``'s table: the
        joins (UPDATE ... FROM, DELETE ... USING, NOT EXISTS) scan it, an upsert goes through the
        key's index. 200 updates: 53 against 73 ms at 1M rows, 76 against 211 at 10M; 100,000 into 1M
        rows 248 against 455 ms; with a tenth deletes and a tenth moving an indexed column, 0.9-1.3x
        the joins' time at 1M and 0.78x at 10M. Up to 64 changes on a small table, the upsert's one
        statement took 6-7 ms against 11-14 for the joins' three (the same, 12-15 ms, when every
        change moves an indexed column; bench/NOTES.md)."""
        return changes <= self.few_changes or changes * self.few_changes_per_rows <= self._size(spec)

    @staticmethod
    def _upsert_sql(spec: TableSpec, names: str, rows: str) -> str:
        """Insert new keys, and update in place the rows a newer change reaches whose indexed columns
        keep their values. A delete's tombstone keeps its indexed values (only live rows are read)."""
        pk = spec.primary_key
        keep = " AND ".join(f"r.{_c(c)} IS NOT DISTINCT FROM excluded.{_c(c)}" for c in spec.secondary)
        fixed = {*pk, *spec.secondary}
        sets = "".join(f"{_c(c)} = excluded.{_c(c)}, " for c, _ in spec.columns if c not in fixed)
        return (
            f"INSERT INTO {spec.sql_name} AS r ({names}) {rows} ON CONFLICT ({', '.join(_c(c) for c in pk)}) "
            f"DO UPDATE SET {sets}_lsn = excluded._lsn, _ord = excluded._ord, _del = excluded._del "
            "WHERE (excluded._lsn > r._lsn OR (excluded._lsn = r._lsn AND excluded._ord > r._ord))"
            + (f" AND (excluded._del OR ({keep}))" if keep else "")
        )

    def _not_stale(self, spec: TableSpec, batch: pa.Table) -> pa.Table:
        """``batch`` without the changes the store already holds a newer (or the same)
        position for: re-deliveries of transactions an earlier batch applied."""
        pk = list(spec.primary_key)
        on = " AND ".join(f"r.{_c(c)} = w.{_q(c)}" for c in pk)
        keyed = batch.select([*pk, "_lsn", "_ord"]).append_column("_i", pa.array(range(batch.num_rows)))
        with self._lock:
            stale = self._with_arg(
                f"SELECT w._i FROM {{arg}} w JOIN {spec.sql_name} r ON {on} "
                "WHERE NOT (w._lsn > r._lsn OR (w._lsn = r._lsn AND w._ord > r._ord))",
                keyed,
            ).fetchall()
        if not stale:
            return batch
        drop = {int(i) for (i,) in stale}
        return batch.filter(pa.array([i not in drop for i in range(batch.num_rows)]))

    def _previous(self, spec: TableSpec, batch: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
        """Stored rows (live) of the keys of ``batch``'s rows, by key (for unchanged TOASTed values)."""
        rows = self.rows_by_keys(spec.name, batch.select(list(spec.primary_key)))
        return {tuple(r[c] for c in spec.primary_key): r for r in rows.to_pylist()}


def _matching(alias: str, columns: Sequence[str]) -> str:
    """Rows of ``alias`` equal (NULL-safely) to a lookup's row ``v`` on ``columns``."""
    return " AND ".join(f"{alias}.{_c(k)} IS NOT DISTINCT FROM v.{_q(k)}" for k in columns)


def out_of_memory(e: BaseException, *, replica_memory: str, batch_bytes: int) -> OutOfMemory | None:
    """The one-line error for ``e`` if it is the replica store or Python running out of memory."""
    if isinstance(e, duckdb.OutOfMemoryException):
        return OutOfMemory(
            f"the replica store (DuckDB) ran out of memory (replica_memory is {replica_memory}): raise "
            "options.replica_memory in the pipeline spec; the pipeline resumes from its last committed batch",
            setting="replica_memory",
        )
    if isinstance(e, MemoryError):
        return OutOfMemory(
            "txjoin's driver process ran out of memory (Python): lower options.max_batch_bytes (now "
            f"{batch_bytes >> 20} MB) or options.stage_chunk_rows, or give the process more memory; the "
            "pipeline resumes from its last committed batch",
            setting="max_batch_bytes",
        )
    return None


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def read_meta(path: Path, *keys: str) -> dict[str, Any]:
    """Metadata values of the store at ``path`` without opening it for writing (absent: no store,
    no value, or the store is busy; opening it for writing then says why)."""
    if not Path(path).exists():
        return {}
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return {}
    try:
        rows = con.execute("SELECT k, v FROM _meta WHERE list_contains(?, k)", [list(keys)]).fetchall()
    except duckdb.Error:
        return {}
    finally:
        con.close()
    return {str(k): json.loads(v) for k, v in rows}
