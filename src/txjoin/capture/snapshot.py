"""The initial snapshot: every captured row as of the slot's consistent point.

Rows are read on an ordinary connection that imports the slot's exported
snapshot (``SET TRANSACTION SNAPSHOT``), so they are exactly the changes
before the consistent point, and the slot streams everything after it: no row
is missed or seen twice at the hand-off. Values are fetched as the types'
text output (the same text pgoutput sends) and converted by the same code.

The rows form one *snapshot unit*: op 'r' events framed by BEGIN/END on the
transaction topic, with id ``<snapshot xid>:<consistent point>`` and per-table
counts, so downstream assembly treats it as the first transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg2.extensions as ext

from txjoin.capture.config import CaptureConfig
from txjoin.capture.tables import CapturedTable
from txjoin.capture.writer import ChangelogWriter
from txjoin.debezium import envelope
from txjoin.debezium.lsn import format_lsn
from txjoin.pg.catalog import describe
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import quote_ident

__all__ = ["take_snapshot"]

log = logging.getLogger(__name__)

_FETCH = 10_000


def _raw_text(cur: Any) -> None:
    """Make psycopg2 return every value the cursor fetches as the server's text output."""
    oids = tuple(ext.string_types.keys())
    raw = ext.new_type(oids, "TXJOIN_RAW", lambda value, cur: value)
    ext.register_type(raw, cur)


def _flag(first_all: bool, last_all: bool, first_tab: bool, last_tab: bool) -> str:
    if first_all:
        return "first"
    if last_all:
        return "last"
    if first_tab:
        return "first_in_data_collection"
    if last_tab:
        return "last_in_data_collection"
    return "true"


def take_snapshot(
    cfg: CaptureConfig,
    writer: ChangelogWriter,
    source: envelope.SourceInfo,
    snapshot_name: str,
    consistent_lsn: int,
    on_rows: Callable[[int], None] = lambda n: None,
) -> None:
    """Write the snapshot unit of ``cfg``'s tables through ``writer``, flushed at the end.

    ``on_rows(n)`` is called after each table with its row count (progress).
    """
    started = time.monotonic()
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
        tables = describe(conn, cfg.tables, source=cfg.prefix, where=describe_dsn(cfg.dsn))
        writer.append(cfg.transaction_topic, envelope.dumps(envelope.begin_event(xid, consistent_lsn, ts_us)))
        counts: dict[str, int] = {}
        total = 0
        # Hold one row back so the last row of a table (and of the unit) gets
        # Debezium's 'last...' snapshot marker.
        held: tuple[CapturedTable, dict[str, Any], bool, int] | None = None  # rel, row, first_in_table, dco

        def emit(
            rel: CapturedTable,
            row: dict[str, Any],
            first_tab: bool,
            last_tab: bool,
            last_all: bool,
            dco: int,
        ) -> None:
            nonlocal total
            total += 1
            value = envelope.change_event(
                source,
                schema=rel.name.schema,
                table=rel.name.table,
                op=envelope.Op.READ,
                before=None,
                after=row,
                xid=xid,
                lsn=consistent_lsn,
                prev_commit_lsn=None,
                commit_ts_us=ts_us,
                snapshot=_flag(total == 1, last_all, first_tab, last_tab),
                total_order=total,
                data_collection_order=dco,
            )
            writer.append(rel.topic, envelope.dumps(value))
            if writer.pending_bytes() >= cfg.roll_bytes:
                writer.flush()

        for table in cfg.tables:
            t = tables[table]
            names = list(t.column_names)
            keys = [i for i, n in enumerate(names) if n in t.primary_key]
            rel = CapturedTable(0, table, cfg.topic(table), [c.type for c in t.columns], names, keys, keys)
            rel.record_schema(writer, consistent_lsn)
            # Identifiers are quoted; nothing else reaches the statement.
            sql = f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {table.quoted}"  # noqa: S608
            dco = 0
            with conn.cursor(name=f"txjoin_snapshot_{len(counts)}") as cur:
                _raw_text(cur)
                cur.itersize = _FETCH
                cur.execute(sql)
                for values in cur:
                    if held is not None:
                        h_rel, h_row, h_first, h_dco = held
                        emit(h_rel, h_row, h_first, h_rel is not rel, False, h_dco)
                    dco += 1
                    held = (rel, rel.row(values), dco == 1, dco)
            counts[cfg.topic(table)] = dco
            on_rows(dco)
        if held is not None:
            h_rel, h_row, h_first, h_dco = held
            emit(h_rel, h_row, h_first, True, True, h_dco)
        conn.rollback()
    finally:
        conn.close()
    collections = [(topic.split(".", 1)[1], n) for topic, n in counts.items() if n]
    writer.append(
        cfg.transaction_topic,
        envelope.dumps(envelope.end_event(xid, consistent_lsn, ts_us, collections)),
    )
    writer.flush()
    log.info(
        "snapshot of %d tables: %d rows in %.1f s (xid %d, consistent point %s)",
        len(cfg.tables),
        total,
        time.monotonic() - started,
        xid,
        format_lsn(consistent_lsn),
    )
