"""The Delta seam: every read and write of an output Delta table goes here.

Backed by delta-rs (``deltalake``), because Delta's Spark jars cannot be
loaded where txjoin is developed. A cluster with delta-spark could provide
another :class:`DeltaStore` implementing the same five methods.

Each output commit is ONE Delta commit that

- replaces the rows of the affected partitions: upsert the recomputed rows
  by key, delete the partition's rows that were not recomputed;
- records the cut in the commit metadata (``txjoin.cut``: per source the
  commit LSN and xid of the last transaction included and the number of
  transactions) and the micro-batch id (``txjoin.batch``);
- carries a delta-rs app transaction ``(txjoin:<output>, batch id)``, so a
  replayed batch finds its commit already there and never commits twice.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from txjoin.cut import Cut, cuts_from_json, cuts_to_json
from txjoin.errors import SinkError
from txjoin.faults import mutated
from txjoin.pg.names import quote_ident
from txjoin.sink.keys import (
    RANGE_PIECE_BYTES,
    RANGE_STREAM_BYTES,
    KeySet,
    NoLiteral,
    Span,
    TooLong,
    equals,
    file_pieces,
    files_to_read,
    in_predicates,
    lossy_statistics,
    overwrite_predicate,
    partition_predicate,
    range_column,
    range_is_cheaper,
    range_pieces,
    sql_literal,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable, WriterProperties

__all__ = ["DeltaRsStore", "DeltaStore", "OutputVersion"]

CUT_KEY = "txjoin.cut"
BATCH_KEY = "txjoin.batch"
#: The table property that says how long Delta keeps old versions' log entries. delta-rs lists the
#: whole ``_delta_log`` directory of a local table at every commit (about 9 us a file here), so
#: under Delta's default of 30 days an output committing every 2 s got about 0.4 s slower a commit
#: per day of age (bench/NOTES.md: "Fixed: an output's commit grew with its Delta log").
LOG_RETENTION = "delta.logRetentionDuration"
#: The table property naming the columns Delta keeps file statistics of: every column of Delta's
#: default (the first 32) but those whose statistics delta-rs reads lossily (:func:`lossy_statistics`),
#: so that neither its overwrite nor a reader skips a file by them (delta-rs then reads none of them,
#: older files' included). Set only on tables that have such a column.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def _stats_columns(schema: pa.Schema) -> str | None:
    """:data:`STATS_COLUMNS` for a table of ``schema`` (None: Delta's default will do)."""
    if not any(lossy_statistics(f.type) for f in schema):
        return None
    kept = [f.name for f in list(schema)[:32] if not lossy_statistics(f.type)]
    return ",".join("`" + n.replace("`", "``") + "`" for n in kept)


def _keeps_lossy(schema: pa.Schema, listed: str | None) -> bool:
    """Whether a table of ``schema`` whose :data:`STATS_COLUMNS` is ``listed`` (None: Delta's default,
    the first 32 columns) keeps statistics of a column :func:`lossy_statistics` says to leave out."""
    if listed is None:
        return any(lossy_statistics(f.type) for f in list(schema)[:32])
    names = set(_listed_names(listed))
    return any(lossy_statistics(f.type) and f.name in names for f in schema)


def _listed_names(listed: str) -> list[str]:
    """The column names of a :data:`STATS_COLUMNS` value: comma-separated, each quoted in backticks
    (doubled inside) or not."""
    names, name, quoted, i = [], "", False, 0
    while i < len(listed):
        c = listed[i]
        if quoted and c == "`" and listed[i + 1 : i + 2] == "`":
            name, i = name + "`", i + 2
            continue
        if c == "`":
            quoted = not quoted
        elif c == "," and not quoted:
            names.append(name.strip())
            name = ""
        else:
            name += c
        i += 1
    return [*names, name.strip()]


@dataclass(frozen=True)
class OutputVersion:
    """One version of an output table as txjoin wrote it."""

    version: int
    cut: dict[str, Cut]
    batch: int | None
    operation: str
    #: When the commit was written (ms since the epoch, from the Delta log).
    timestamp_ms: int = 0


class DeltaStore(Protocol):
    def committed_batch(self, path: Path, app_id: str) -> int | None:
        """The last batch id committed under ``app_id`` (None if none)."""
        ...

    def replace_partitions(
        self,
        path: Path,
        rows: pa.Table,
        *,
        key: Sequence[str],
        partition_cols: Sequence[str],
        partitions: Sequence[Sequence[Any]] | None,
        cut: Mapping[str, Cut],
        batch: int,
        app_id: str,
    ) -> int:
        """Commit ``rows`` as the new content of ``partitions``; return the version."""
        ...

    def advance(self, path: Path, *, cut: Mapping[str, Cut], batch: int, app_id: str) -> int:
        """Commit no row change, only a newer ``cut``; return the version."""
        ...

    def commit_files(
        self,
        path: Path,
        files: Sequence[Path],
        schema: pa.Schema,
        *,
        stats_columns: Sequence[str],
        cut: Mapping[str, Cut],
        batch: int,
        app_id: str,
    ) -> int:
        """Make ``files`` (Parquet, already inside the table's directory) the table's whole content,
        in one commit; return the version."""
        ...

    def history(self, path: Path) -> list[OutputVersion]: ...

    def read(self, path: Path, version: int | None = None) -> pa.Table: ...

    def exists(self, path: Path) -> bool: ...


def _cut_text(cut: Mapping[str, Cut]) -> str:
    return json.dumps(cuts_to_json(cut), sort_keys=True)


def _file_stats(path: Path, columns: Sequence[str]) -> str:
    """Delta's per-file statistics from a Parquet footer: row count, and min/max/null count of
    ``columns`` where they are integers or strings (what lets a partition overwrite skip files)."""
    md = pq.read_metadata(path)
    stats: dict[str, Any] = {"numRecords": md.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    schema = md.schema.to_arrow_schema()
    for col in columns:
        if col not in schema.names:
            continue
        t = schema.field(col).type
        if not (pa.types.is_integer(t) or pa.types.is_string(t)):
            continue
        i = schema.get_field_index(col)
        mins, maxs, nulls = [], [], 0
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(i).statistics
            if st is None or not st.has_min_max:
                if md.row_group(g).num_rows and (st is None or st.null_count != md.row_group(g).num_rows):
                    break  # no statistics: say nothing of this column
            else:
                mins.append(st.min)
                maxs.append(st.max)
            nulls += st.null_count if st is not None and st.has_null_count else 0
        else:
            if mins:
                stats["minValues"][col] = min(mins)
                stats["maxValues"][col] = max(maxs)
            stats["nullCount"][col] = nulls
    return json.dumps(stats)


def _add_actions(table: DeltaTable) -> pa.Table:
    """The table's files with their sizes and per-column statistics (``min.<col>``, ...)."""
    return pa.table(table.get_add_actions(flatten=True))


def _sorted(rows: pa.Table, cols: Sequence[str]) -> pa.Table:
    """Rows in partition order, so each file holds a narrow range of keys."""
    if not cols or rows.num_rows < 2:
        return rows
    try:
        return rows.sort_by([(c, "ascending") for c in cols])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # arrays do not sort
        return rows


def _range_pieces(
    files: pa.Table, col: str, bounds: tuple[Any, Any], typ: pa.DataType
) -> list[tuple[Any, Sequence[str]]] | None:
    """:func:`range_pieces` as dataset filters: ``(filter, files)`` per piece (None: one read instead,
    when a piece's start, a file's minimum, has no value of the key's type)."""
    import pyarrow.dataset as ds

    k, (lo, hi) = ds.field(col), bounds
    ranges = range_pieces(files, col, lo, hi, RANGE_PIECE_BYTES)
    try:
        ends = [k < pa.scalar(start, typ) for start, _ in ranges[1:]] + [k <= pa.scalar(hi, typ)]
        return [((k >= pa.scalar(s, typ)) & e, p) for (s, p), e in zip(ranges, ends, strict=True)]
    except (pa.ArrowException, TypeError, ValueError):
        return None


#: Largest dictionary page per column chunk before Parquet falls back to plain
#: encoding. delta-rs's default (1 MiB) spends most of a write interning unique
#: strings (keys, names) before it falls back: rewriting 1M output rows took
#: 0.42-0.50 s with it, 0.19-0.26 s with 64 KiB, in files 19% smaller
#: (bench/NOTES.md). Low-cardinality columns still fit a 64 KiB dictionary.
DICTIONARY_PAGE_BYTES = 64 << 10


@functools.cache
def _writer_properties() -> WriterProperties:
    """Parquet settings of every file the sink writes (snappy, as delta-rs's default)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="SNAPPY", dictionary_page_size_limit=DICTIONARY_PAGE_BYTES)


def _commit_identity(path: Path, version: int) -> tuple[int, int, int]:
    """Which file holds commit ``version`` of the table at ``path`` (inode, mtime, size); -1s if none."""
    try:
        st = (path / "_delta_log" / f"{version:020d}.json").stat()
    except OSError:
        return (-1, -1, -1)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class DeltaRsStore:
    """:class:`DeltaStore` on delta-rs.

    A batch's partitions are replaced with one overwrite whose predicate
    selects them (delete them, add the recomputed rows, one commit): with
    rows sorted by partition and files of ``file_bytes``, only the files
    holding changed partitions are rewritten. Measured on 1M output rows,
    200 partitions: 0.04 s, against 0.25 s for the equivalent MERGE
    (bench/RESULTS.md). delta-rs plans each term of that predicate at some
    cost (about 40 us), so a batch of many scattered keys rewrites the key
    range they span instead when the files' statistics say that is cheaper
    (:func:`range_is_cheaper`). Partition values without a literal form
    (bytes, arrays) fall back to rewriting the table.

    Every ``compact_after`` small files, they are compacted into files of
    ``file_bytes``, in a commit carrying the same cut (its rows are
    unchanged).
    """

    def __init__(
        self, file_bytes: int = 2 << 20, compact_after: int = 32, log_retention: str = "interval 10 minutes"
    ) -> None:
        self.file_bytes = file_bytes
        self.compact_after = compact_after
        #: ``delta.logRetentionDuration`` of the tables this store writes (Delta's interval form).
        self.log_retention = log_retention
        # Per thread: delta-rs does not document its table objects as safe to share between threads.
        self._local = threading.local()

    def exists(self, path: Path) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(str(path)))

    def _table(self, path: Path) -> DeltaTable | None:
        """The table at ``path`` at its latest version (None: no table there).

        Opening a table replays its log from the last checkpoint: 1.5 ms just after one, about
        25 ms 80-100 commits later (bench/NOTES.md), and a batch needs each output's table four
        times. A table opened here before is brought up to date instead (newer commits only),
        unless the commit it was at is gone or another file (the table was removed or replaced).
        """
        from deltalake import DeltaTable

        # path -> (table, the version it was at when handed out, that commit's file)
        cache: dict[str, tuple[DeltaTable, int, tuple[int, int, int]]]
        cache = self._local.__dict__.setdefault("tables", {})
        key = str(path)
        held = cache.get(key)
        if held is not None:
            table, version, seen = held
            if _commit_identity(path, version) == seen:
                now = int(table.version())  # this store's own writes move the object along
                # Versions are contiguous: without the next commit's file there is nothing to read,
                # and update_incremental would list the whole log to find that out (3.6 ms a call).
                if _commit_identity(path, now + 1)[0] != -1:
                    table.update_incremental()
                    now = int(table.version())
                cache[key] = (table, now, seen if now == version else _commit_identity(path, now))
                return table
            del cache[key]
        if not self.exists(path):
            return None
        table = DeltaTable(key)
        now = int(table.version())
        cache[key] = (table, now, _commit_identity(path, now))
        return table

    def _configuration(self, schema: pa.Schema | None = None) -> dict[str, str]:
        """Table properties of a table of ``schema`` this store writes."""
        conf = {LOG_RETENTION: self.log_retention}
        stats = None if schema is None else _stats_columns(schema)
        if stats is not None:
            conf[STATS_COLUMNS] = stats
        return conf

    def _settled(self, path: Path, schema: pa.Schema | None = None) -> DeltaTable | None:
        """:meth:`_table`, with this store's properties for ``schema`` (:meth:`_configuration`): set
        before a write of ``schema`` to a table that has others (made before they were set, under
        another spec or schema, or by another writer), by a commit that changes no row and carries the
        latest version's cut and batch, as a compaction's does. Checked at every write: the table may
        have been replaced meanwhile. :data:`STATS_COLUMNS` is set only where the table would keep
        statistics of a column whose statistics are lossy (another schema's list that names no such
        column stays)."""
        from deltalake import CommitProperties

        table = self._table(path)
        if table is None:
            return None
        want = self._configuration(schema)
        have = table.metadata().configuration
        changed = {k: v for k, v in want.items() if k != STATS_COLUMNS and have.get(k) != v}
        if schema is not None and _keeps_lossy(schema, have.get(STATS_COLUMNS)):
            changed[STATS_COLUMNS] = want[STATS_COLUMNS]  # only then: each change is a version
        if changed:
            last = table.history(1)
            meta = {k: str(last[0][k]) for k in (CUT_KEY, BATCH_KEY) if last and k in last[0]}
            props = CommitProperties(custom_metadata=meta)
            table.alter.set_table_properties(changed, commit_properties=props)
            table = self._current(path)
        return table

    def _current(self, path: Path) -> DeltaTable:
        """:meth:`_table`, for a table that must exist (delta-rs's own error if not)."""
        from deltalake import DeltaTable

        return self._table(path) or DeltaTable(str(path))

    def _version(self, path: Path) -> int:
        """The table's version after a write."""
        return int(self._current(path).version())

    def committed_batch(self, path: Path, app_id: str) -> int | None:
        table = self._table(path)
        if table is None:
            return None
        v = table.transaction_version(app_id)
        return None if v is None else int(v)

    def replace_partitions(
        self,
        path: Path,
        rows: pa.Table,
        *,
        key: Sequence[str],
        partition_cols: Sequence[str],
        partitions: Sequence[Sequence[Any]] | None,
        cut: Mapping[str, Cut],
        batch: int,
        app_id: str,
    ) -> int:
        from deltalake import CommitProperties, Transaction, write_deltalake

        props = CommitProperties(
            custom_metadata={CUT_KEY: _cut_text(cut), BATCH_KEY: str(batch)},
            app_transactions=[Transaction(app_id=app_id, version=batch)],
        )
        rows = _sorted(rows, partition_cols or key)
        try:
            table = self._settled(path, rows.schema)
            if partitions is None:
                # Every partition: one overwrite (also creates the table, or
                # replaces it when the output's SQL changed its columns).
                if table is not None:
                    self._write(table, rows, props, mode="overwrite", schema_mode="overwrite")
                else:
                    conf = self._configuration(rows.schema)
                    self._write(str(path), rows, props, mode="append", configuration=conf)
                return self._version(path)
            if not partitions and not rows.num_rows and table is not None:
                # Nothing to replace (and no predicate for it): the cut alone.
                return self.advance(path, cut=cut, batch=batch, app_id=app_id)
            predicate: str | None
            types = [rows.schema.field(c).type for c in partition_cols]
            try:
                if not all(map(in_predicates, types)):
                    raise NoLiteral
                predicate, terms = partition_predicate(partition_cols, partitions, types)
            except (NoLiteral, TooLong):
                predicate, terms = None, 0
            if table is None:  # nothing to replace
                self._write(
                    str(path), rows, props, mode="overwrite", configuration=self._configuration(rows.schema)
                )
            else:
                files = _add_actions(table)  # read once, for the choice and the rewrite
                ranged, one = None, partition_cols[0] if len(partition_cols) == 1 else None
                if predicate is None or (one is not None and range_is_cheaper(files, one, partitions, terms)):
                    ranged = range_column(files, partition_cols, types, partitions)
                if ranged is not None:
                    self._rewrite_range(path, table, files, rows, partition_cols, *ranged, partitions, props)
                elif predicate is None:
                    self._rewrite_all(path, table, files, rows, partition_cols, partitions, props)
                else:
                    self._write(table, rows, props, mode="overwrite", predicate=predicate)
            if mutated("double-commit") and rows.num_rows:
                write_deltalake(str(path), rows, mode="append", commit_properties=props)
            table = self._current(path)
            version = int(table.version())
            self._maybe_compact(table, cut, batch)
            return version
        except SinkError:
            raise
        except Exception as e:  # delta-rs raises its own exception types
            raise SinkError(
                f"could not commit batch {batch} to Delta table {path}: {e}. Nothing was committed for this "
                "batch; the query stops and the batch is retried on restart",
                path=str(path),
                batch=batch,
            ) from e

    def _rewrite_range(
        self,
        path: Path,
        table: DeltaTable,
        files: pa.Table,
        rows: pa.Table,
        cols: Sequence[str],
        at: int,
        span: Span,
        partitions: Sequence[Sequence[Any]],
        props: Any,
    ) -> int:
        """Replace many partitions by rewriting the range they span in key column ``cols[at]``, in one
        commit (``span``: :func:`range_column`'s choice).

        ``files`` are ``table``'s add actions (:func:`_add_actions`), read at the same version.

        The overwrite's predicate is two comparisons (plus IS NULL); the range's
        rows that are not replaced are read and written back. Costs the range,
        not the table, when a batch's keys are clustered (new rows, recent edits).
        """
        import pyarrow.dataset as ds

        col = cols[at]
        schema = pa.schema(table.schema().to_arrow())
        typ, q, k = schema.field(col).type, quote_ident(col), ds.field(col)
        terms, where = [], None
        if span.bounds is not None:
            lo, hi = span.bounds
            terms.append(f"({q} >= {sql_literal(lo, typ)} AND {q} <= {sql_literal(hi, typ)})")
            where = (k >= pa.scalar(lo, typ)) & (k <= pa.scalar(hi, typ))
        if span.nan:
            terms.append(equals(q, math.nan))
            where = k.is_nan() if where is None else where | k.is_nan()
        if span.nulls:
            terms.append(f"{q} IS NULL")
            where = k.is_null() if where is None else where | k.is_null()
        # Not delta-rs's pyarrow dataset: it drops files whose statistics are NULL (see files_to_read).
        read = files_to_read(files, col, span.bounds, span.nulls, span.nan)
        predicate = overwrite_predicate(" OR ".join(terms), len(terms), [p[at] for p in partitions])
        chosen = pc.is_in(files.column("path"), value_set=pa.array(read, pa.string()))
        size = pc.sum(files.column("size_bytes").filter(chosen)).as_py() or 0
        pieces = None
        if span.bounds is not None and size > RANGE_STREAM_BYTES:
            pieces = _range_pieces(files, col, span.bounds, typ)
        if pieces is not None and (span.nan or span.nulls):  # keys outside every range: a piece of their own
            odd = k.is_nan() if span.nan else k.is_null()
            if span.nan and span.nulls:
                odd = odd | k.is_null()
            pieces.append((odd, files_to_read(files, col, None, span.nulls, span.nan)))
        order = [col, *(c for c in cols if c != col)]
        # One read is written as a table, as before pieces; pieces as a stream, in bounded memory.
        return self._overwrite_pieces(
            path, schema, [(where, read)] if pieces is None else pieces, rows, cols, order, partitions, props,
            stream=pieces is not None, predicate=predicate,
        )  # fmt: skip

    def _overwrite_pieces(
        self,
        path: Path,
        schema: pa.Schema,
        pieces: Sequence[tuple[Any, Sequence[str]]],
        rows: pa.Table,
        cols: Sequence[str],
        order: Sequence[str],
        partitions: Sequence[Sequence[Any]],
        props: Any,
        *,
        stream: bool,
        **how: Any,
    ) -> int:
        """Overwrite (where ``how`` says) with :meth:`_pieces`'s rows for replacing ``partitions`` (values
        of ``cols``), sorted by ``order``, in one commit: streamed, or as one table."""
        replaced = KeySet(cols, partitions, [schema.field(c).type for c in cols])
        batches = self._pieces(path, schema, pieces, _sorted(rows, order).cast(schema), order, replaced)
        data: pa.Table | pa.RecordBatchReader
        if stream:
            data = pa.RecordBatchReader.from_batches(schema, batches)
        else:
            data = pa.Table.from_batches(list(batches), schema)
        self._write(self._current(path), data, props, mode="overwrite", **how)
        return self._version(path)

    def _pieces(
        self,
        path: Path,
        schema: pa.Schema,
        pieces: Sequence[tuple[Any, Sequence[str]]],
        rows: pa.Table,
        order: Sequence[str],
        replaced: KeySet,
    ) -> Iterator[pa.RecordBatch]:
        """A rewrite's rows, piece after piece (``(filter, files)``; a None filter: the files' every
        row and none of the batch's): each piece's rows whose key is not ``replaced``, beside the batch's
        rows in it, in key ``order``. Raises if a batch row is in no piece."""
        import pyarrow.dataset as ds

        placed = outside = 0
        for where, paths in pieces:
            old = ds.dataset([str(path / unquote(f)) for f in paths], schema=schema, format="parquet")
            old_rows = old.to_table(filter=where)
            new = rows.filter(where) if where is not None else rows.slice(0, 0)
            placed += new.num_rows
            outside += new.num_rows - (pc.sum(replaced.holds(new)).as_py() or 0)  # beside their old rows
            kept = old_rows.filter(pc.invert(replaced.holds(old_rows)))
            yield from _sorted(pa.concat_tables([kept, new]), order).to_batches()
        if placed != rows.num_rows or outside:  # lost, or duplicated: nothing may be committed
            raise SinkError(
                f"internal error: a rewrite of {path} placed {placed} of the batch's {rows.num_rows} "
                f"rows in its pieces, {outside} of them outside the partitions it replaces; nothing "
                "was committed. Please report it",
                path=str(path),
            )

    def _rewrite_all(
        self,
        path: Path,
        table: DeltaTable,
        files: pa.Table,
        rows: pa.Table,
        cols: Sequence[str],
        partitions: Sequence[Sequence[Any]],
        props: Any,
    ) -> int:
        """Replace partitions that no key column can give a range for (no SQL literal: bytes, arrays,
        a numeric NaN) by rewriting the whole table, a piece of files at a time, in one commit.

        Slow (the whole table), but exact, in bounded memory; such partition keys are rare.
        """
        import pyarrow.dataset as ds

        schema = pa.schema(table.schema().to_arrow())
        pieces: list[tuple[Any, Sequence[str]]] = [(None, p) for p in file_pieces(files, RANGE_PIECE_BYTES)]
        pieces.append((ds.scalar(True), []))  # the batch's rows, after every file's
        return self._overwrite_pieces(path, schema, pieces, rows, cols, cols, partitions, props, stream=True)

    def _write(
        self, target: DeltaTable | str, rows: pa.Table | pa.RecordBatchReader, props: Any, **how: Any
    ) -> None:
        """Every data write of the sink: files of ``file_bytes``, with :func:`_writer_properties`."""
        from deltalake import write_deltalake

        write_deltalake(
            target, rows, target_file_size=self.file_bytes, writer_properties=_writer_properties(),
            commit_properties=props, **how,
        )  # fmt: skip

    def _maybe_compact(self, table: DeltaTable, cut: Mapping[str, Cut], batch: int) -> None:
        from deltalake import CommitProperties

        sizes = _add_actions(table).column("size_bytes").to_pylist()
        if sum(1 for s in sizes if s < self.file_bytes // 2) < self.compact_after:
            return
        props = CommitProperties(custom_metadata={CUT_KEY: _cut_text(cut), BATCH_KEY: str(batch)})
        table.optimize.compact(
            target_size=self.file_bytes, writer_properties=_writer_properties(), commit_properties=props
        )

    def advance(self, path: Path, *, cut: Mapping[str, Cut], batch: int, app_id: str) -> int:
        from deltalake import CommitProperties, Transaction

        props = CommitProperties(
            custom_metadata={CUT_KEY: _cut_text(cut), BATCH_KEY: str(batch)},
            app_transactions=[Transaction(app_id=app_id, version=batch)],
        )
        try:
            table = self._settled(path) or self._current(path)
            table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=props)
            return self._version(path)
        except Exception as e:  # delta-rs raises its own exception types
            raise SinkError(
                f"could not commit batch {batch}'s cut to Delta table {path}: {e}. Nothing was committed; "
                "the query stops and the batch is retried on restart",
                path=str(path),
                batch=batch,
            ) from e

    def commit_files(
        self,
        path: Path,
        files: Sequence[Path],
        schema: pa.Schema,
        *,
        stats_columns: Sequence[str],
        cut: Mapping[str, Cut],
        batch: int,
        app_id: str,
    ) -> int:
        from deltalake import CommitProperties, Transaction
        from deltalake import Schema as DeltaSchema
        from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

        props = CommitProperties(
            custom_metadata={CUT_KEY: _cut_text(cut), BATCH_KEY: str(batch)},
            app_transactions=[Transaction(app_id=app_id, version=batch)],
        )
        adds = [
            AddAction(
                str(f.relative_to(path)),
                f.stat().st_size,
                {},
                int(f.stat().st_mtime * 1000),
                True,
                _file_stats(f, stats_columns),
            )
            for f in files
        ]
        try:
            delta_schema = DeltaSchema.from_arrow(schema)
            table = self._settled(path, schema)
            if table is not None:
                actions: list[AddAction | RemoveAction] = list(adds)
                table.create_write_transaction(
                    actions, mode="overwrite", schema=delta_schema, commit_properties=props
                )
            else:
                create_table_with_add_actions(
                    str(path), delta_schema, adds, mode="error", commit_properties=props,
                    configuration=self._configuration(schema),
                )  # fmt: skip
            return self._version(path)
        except Exception as e:  # delta-rs raises its own exception types
            raise SinkError(
                f"could not commit batch {batch}'s {len(files)} files to Delta table {path}: {e}. Nothing "
                "was committed for this batch; the query stops and the batch is retried on restart",
                path=str(path),
                batch=batch,
            ) from e

    def history(self, path: Path) -> list[OutputVersion]:
        out = []
        for h in self._current(path).history():
            cut = cuts_from_json(json.loads(h[CUT_KEY])) if CUT_KEY in h else {}
            batch = int(h[BATCH_KEY]) if BATCH_KEY in h else None
            out.append(
                OutputVersion(
                    int(h["version"]), cut, batch, str(h.get("operation", "")), int(h.get("timestamp", 0))
                )
            )
        return sorted(out, key=lambda c: c.version)

    def read(self, path: Path, version: int | None = None) -> pa.Table:
        from deltalake import DeltaTable

        source = self._current(path) if version is None else DeltaTable(str(path), version=version)
        table: pa.Table = source.to_pyarrow_table()
        return table
