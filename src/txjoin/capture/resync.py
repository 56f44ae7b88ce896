"""``txjoin resync``: copy one table again, at a point of the change stream.

After a change to a column an output reads (a type, a drop, a rename) the
pipeline stops; a resync copies the table as it is now and says where in the
stream the copy applies, so the join stage can replace the table's replica
there and rebuild the outputs that read it, all at one cut.

In ONE transaction on the source:

1. ``LOCK TABLE t IN SHARE MODE``: writers of the table wait (readers do
   not) until the copy is done, and every transaction that changed it has
   committed before the lock is granted;
2. the rows are copied (``COPY``, chunked like the initial snapshot) as
   Parquet beside the changelog, with the table's columns as they are now;
   the LSN read after the lock is the copy's position: every change of the
   table committed before it is in the copy, every later one commits after it;
3. the manifest is published, then ``pg_logical_emit_message(true,
   'txjoin.resync', <manifest>)`` puts a marker into the WAL; the commit
   makes it part of the stream. Capture writes the marker's transaction with
   the manifest on its END (like the initial snapshot's), so the join stage
   meets it in commit order.

A ``COMMITTED`` file written after the commit tells the join stage the
resync is real before its marker arrives: it then skips the table's older
changes (written with columns the replica no longer matches) and keeps the
outputs that read it at their last version until the copy is loaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq

from txjoin.capture.config import CaptureConfig
from txjoin.capture.snapshot import chunk_sql, copy_rows, plan_chunks
from txjoin.debezium.lsn import format_lsn, parse_lsn
from txjoin.errors import ConfigError, SourceError
from txjoin.pg.catalog import column_to_json, describe
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import QualifiedName

__all__ = ["RESYNC_PREFIX", "ResyncFiles", "Resynced", "resync_table"]

log = logging.getLogger(__name__)

#: Prefix of the resync marker (a transactional logical decoding message).
RESYNC_PREFIX = "txjoin.resync"


class ResyncFiles(Protocol):
    """Where a resync's copy goes (:class:`txjoin.changelog.snapshots.ResyncDir` beside the topics)."""

    def part(self, copy: str, topic: str, part: int) -> Path:
        """Where part ``part`` (Parquet) of ``topic``'s rows in copy ``copy`` goes."""
        ...

    def publish(self, copy: str, manifest: dict[str, Any]) -> str:
        """Make the copy durable with its manifest; the reference the stream's marker carries."""
        ...

    def committed(self, ref: str) -> None:
        """Record (durably) that the copy's marker committed on the source."""
        ...


@dataclass(frozen=True)
class Resynced:
    table: QualifiedName
    rows: int
    lsn: int
    #: The marker transaction's xid (the cut of the version that applies the copy).
    xid: int
    manifest: str
    seconds: float


def resync_table(
    cfg: CaptureConfig,
    table: QualifiedName,
    files_to: ResyncFiles,
    *,
    lock_timeout: float = 60.0,
    on_rows: Callable[[int], None] = lambda n: None,
) -> Resynced:
    """Copy ``table`` of ``cfg``'s source into ``cfg.changelog`` and mark the stream (see module doc)."""
    if table not in cfg.tables:
        captured = ", ".join(str(t) for t in cfg.tables)
        raise ConfigError(
            f"table {table} is not captured by source {cfg.prefix!r} (it captures {captured}): name one "
            "of those with --table",
            table=str(table),
        )
    started = time.monotonic()
    where = describe_dsn(cfg.dsn)
    conn = connect(cfg.dsn)
    try:
        conn.set_client_encoding("UTF8")
        with conn.cursor() as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(lock_timeout * 1000)}ms",))
            try:
                cur.execute(f"LOCK TABLE {table.quoted} IN SHARE MODE")
            except Exception as e:
                raise SourceError(
                    f"could not lock {table} on {where} within {lock_timeout:.0f} s to copy it: "
                    f"{str(e).strip().splitlines()[0]}. Long transactions writing it block the resync; "
                    "retry, or raise --lock-timeout",
                    table=str(table),
                ) from None
            cur.execute(
                "SELECT pg_current_wal_insert_lsn()::text, (txid_current() % 4294967296)::bigint, "
                "(extract(epoch from now()) * 1000000)::bigint"
            )
            lsn_text, xid, ts_us = cur.fetchone()
        lsn = parse_lsn(str(lsn_text))
        # Locked: no ALTER can run, so these are the columns of the rows copied below.
        described = describe(conn, [table], source=cfg.prefix, where=where)[table]
        chunks, _ = plan_chunks(conn, {table: described}, cfg.snapshot_chunk_mb << 20)
        copy = f"{int(xid)}-{lsn}"
        files: list[str] = []
        rows = 0
        with conn.cursor() as cur:
            for chunk in chunks:
                data = copy_rows(cur, described, chunk_sql(described, chunk))
                path = files_to.part(copy, cfg.topic(table), chunk.part)
                pq.write_table(data, path, row_group_size=128 * 1024)
                files.append(f"{path.parent.name}/{path.name}")
                rows += data.num_rows
                on_rows(data.num_rows)
        manifest = {
            "source": cfg.prefix,
            "xid": int(xid),
            "lsn": lsn,
            "ts_us": int(ts_us),
            "tables": {str(table): {"topic": cfg.topic(table), "rows": rows, "files": sorted(files)}},
            "resync": {"table": str(table), "columns": [column_to_json(c) for c in described.columns]},
        }
        ref = files_to.publish(copy, manifest)
        with conn.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(true, %s, %s)", (RESYNC_PREFIX, ref))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()
    files_to.committed(ref)
    seconds = time.monotonic() - started
    log.info("resync of %s: %d rows at LSN %s in %.1f s", table, rows, format_lsn(lsn), seconds)
    return Resynced(table, rows, lsn, int(xid), ref, seconds)
