"""The initial snapshot: every captured row as of the slot's consistent point, as Parquet.

Rows are read on ordinary connections that import the slot's exported
snapshot (``SET TRANSACTION SNAPSHOT``), so they are exactly the changes
before the consistent point, and the slot streams everything after it: no row
is missed or seen twice at the hand-off.

Built for size: each table is split into ranges of heap blocks (a TID range
scan per chunk), and ``snapshot_workers`` connections each take chunks from a
queue and read them with ``COPY ... TO STDOUT (FORMAT csv)``. The text is
parsed by Arrow and converted to Debezium values column by column
(:func:`txjoin.debezium.arrow.from_text`, the same values pgoutput's text
gives), then written as Parquet beside the topics
(:mod:`txjoin.changelog.snapshots`). Memory per worker is about two chunks.

The snapshot is one unit on the transaction topic: BEGIN, then END with id
``<snapshot xid>:<consistent point>``, no events in the topics, and the
manifest's path in ``snapshot_manifest``; downstream it is the first
transaction, loaded in bulk.
"""

from __future__ import annotations

import io
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from txjoin.capture.config import CaptureConfig
from txjoin.capture.tables import CapturedTable
from txjoin.capture.writer import ChangelogWriter
from txjoin.debezium import envelope
from txjoin.debezium.arrow import from_text, value_type
from txjoin.debezium.lsn import format_lsn
from txjoin.faults import crash_point
from txjoin.pg.catalog import Table, describe
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import QualifiedName, quote_ident

__all__ = ["Progress", "chunk_sql", "copy_rows", "plan_chunks", "take_snapshot"]

log = logging.getLogger(__name__)

_BLOCK = 8192  # PostgreSQL's page size unless built otherwise (read from the server below)


@dataclass(frozen=True)
class _Chunk:
    table: QualifiedName
    part: int
    lo: int | None  # first heap block, or None for the whole table
    hi: int | None  # first block past the chunk (None: to the end)


@dataclass
class Progress:
    """Rows of the snapshot per table, for progress displays (read while it runs)."""

    estimated: dict[str, int]
    read: dict[str, int]
    started: float


def plan_chunks(
    conn: Any, tables: dict[QualifiedName, Table], chunk_bytes: int
) -> tuple[list[_Chunk], dict[str, int]]:
    """Chunks of every table, and each table's estimated row count."""
    chunks: list[_Chunk] = []
    estimate: dict[str, int] = {}
    with conn.cursor() as cur:
        cur.execute("SELECT current_setting('block_size')::int")
        block = int(cur.fetchone()[0]) or _BLOCK
        for name, table in tables.items():
            cur.execute(
                "SELECT pg_relation_size(oid), GREATEST(reltuples, 0)::bigint FROM pg_class WHERE oid = %s",
                (table.oid,),
            )
            size, tuples = cur.fetchone()
            estimate[str(name)] = int(tuples)
            blocks = int(size) // block
            per = max(1, chunk_bytes // block)
            if table.kind != "r" or blocks <= per:
                chunks.append(_Chunk(name, 0, None, None))
                continue
            starts = list(range(0, blocks, per))
            for i, lo in enumerate(starts):
                chunks.append(_Chunk(name, i, lo, None if i == len(starts) - 1 else lo + per))
    return chunks, estimate


def chunk_sql(table: Table, chunk: _Chunk) -> str:
    cols = ", ".join(quote_ident(c.name) for c in table.columns)
    if chunk.lo is None:
        # Identifiers are quoted; nothing else reaches the statement.
        return f"SELECT {cols} FROM {table.name.quoted}"  # noqa: S608
    where = f"ctid >= '({chunk.lo},0)'::tid"
    if chunk.hi is not None:
        where += f" AND ctid < '({chunk.hi},0)'::tid"
    return f"SELECT {cols} FROM ONLY {table.name.quoted} WHERE {where}"  # noqa: S608


def copy_rows(cur: Any, table: Table, query: str) -> pa.Table:
    """``query``'s rows (``table``'s columns, in order) as Debezium-valued Arrow columns, via COPY."""
    buf = io.BytesIO()
    cur.copy_expert(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)", buf)
    names = [c.name for c in table.columns]
    if buf.tell() == 0:
        return pa.schema([(c.name, value_type(c.type)) for c in table.columns]).empty_table()
    buf.seek(0)
    text = pacsv.read_csv(
        buf,
        read_options=pacsv.ReadOptions(
            column_names=[f"c{i}" for i in range(len(names))], block_size=16 << 20
        ),
        parse_options=pacsv.ParseOptions(newlines_in_values=True, double_quote=True, escape_char=False),
        convert_options=pacsv.ConvertOptions(
            column_types={f"c{i}": pa.string() for i in range(len(names))},
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=False,
        ),
    )
    arrays = [from_text(text.column(i), c.type) for i, c in enumerate(table.columns)]
    return pa.Table.from_arrays(arrays, names=names)


def take_snapshot(
    cfg: CaptureConfig,
    writer: ChangelogWriter,
    source: envelope.SourceInfo,
    snapshot_name: str,
    consistent_lsn: int,
    on_rows: Callable[[int], None] = lambda n: None,
    progress: Progress | None = None,
) -> None:
    """Write the snapshot of ``cfg``'s tables through ``writer``; flushed at the end.

    ``on_rows(n)`` is called after each chunk with its row count; ``progress``,
    if given, is filled as the snapshot runs.
    """
    started = time.monotonic()
    where = describe_dsn(cfg.dsn)
    conn = connect(cfg.dsn)
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
            cur.execute(
                "SELECT (txid_current() % 4294967296)::bigint, (extract(epoch from now()) * 1000000)::bigint"
            )
            xid_text, ts_text = cur.fetchone()
        xid, ts_us = int(xid_text), int(ts_text)
        # The catalog as of the snapshot: the columns the rows below have.
        tables = describe(conn, cfg.tables, source=cfg.prefix, where=where)
        chunks, estimate = plan_chunks(conn, tables, cfg.snapshot_chunk_mb << 20)
    finally:
        conn.close()
    snapshot = f"{xid}-{consistent_lsn}"
    prog = progress if progress is not None else Progress({}, {}, started)
    prog.estimated.update(estimate)
    prog.read.update({str(t): 0 for t in tables})
    files = _read_all(cfg, writer, tables, chunks, snapshot_name, snapshot, prog, on_rows)
    for name, table in tables.items():
        names = list(table.column_names)
        keys = [i for i, n in enumerate(names) if n in table.primary_key]
        rel = CapturedTable(
            table.oid, name, cfg.topic(name), [c.type for c in table.columns], names, keys, keys
        )
        rel.record_schema(writer, consistent_lsn)
    manifest = {
        "source": cfg.prefix,
        "xid": xid,
        "lsn": consistent_lsn,
        "ts_us": ts_us,
        "tables": {
            str(t): {"topic": cfg.topic(t), "rows": prog.read[str(t)], "files": sorted(files.get(t, []))}
            for t in tables
        },
    }
    ref = writer.publish_snapshot(snapshot, manifest)
    writer.append(cfg.transaction_topic, envelope.dumps(envelope.begin_event(xid, consistent_lsn, ts_us)))
    end = envelope.end_event(xid, consistent_lsn, ts_us, [], snapshot_manifest=ref)
    writer.append(cfg.transaction_topic, envelope.dumps(end))
    writer.flush()
    total = sum(prog.read.values())
    seconds = time.monotonic() - started
    log.info(
        "snapshot of %d tables: %d rows in %.1f s (%.0f rows/s; xid %d, consistent point %s)",
        len(tables),
        total,
        seconds,
        total / seconds if seconds else 0.0,
        xid,
        format_lsn(consistent_lsn),
    )


def _read_all(
    cfg: CaptureConfig,
    writer: ChangelogWriter,
    tables: dict[QualifiedName, Table],
    chunks: list[_Chunk],
    snapshot_name: str,
    snapshot: str,
    progress: Progress,
    on_rows: Callable[[int], None],
) -> dict[QualifiedName, list[str]]:
    """Read every chunk on ``cfg.snapshot_workers`` connections; the Parquet files written per table."""
    todo: queue.Queue[_Chunk] = queue.Queue()
    for c in chunks:
        todo.put(c)
    files: dict[QualifiedName, list[str]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        try:
            conn = connect(cfg.dsn)
        except BaseException as e:
            errors.append(e)
            return
        try:
            conn.set_client_encoding("UTF8")
            conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                while not errors:
                    try:
                        chunk = todo.get_nowait()
                    except queue.Empty:
                        return
                    table = tables[chunk.table]
                    rows = copy_rows(cur, table, chunk_sql(table, chunk))
                    path = writer.snapshot_file(snapshot, cfg.topic(chunk.table), chunk.part)
                    pq.write_table(rows, path, row_group_size=128 * 1024)
                    with lock:
                        files.setdefault(chunk.table, []).append(f"{path.parent.name}/{path.name}")
                        progress.read[str(chunk.table)] += rows.num_rows
                    on_rows(rows.num_rows)
                    crash_point("snapshot-chunk")
        except BaseException as e:
            errors.append(e)
        finally:
            conn.close()

    threads = [
        threading.Thread(target=work, name=f"snapshot-{i}", daemon=True)
        for i in range(max(1, min(cfg.snapshot_workers, len(chunks))))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return files
