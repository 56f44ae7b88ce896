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
from typing import TYPE_CHECKING, Any

import psycopg2.extensions as ext

from txjoin.debezium import envelope
from txjoin.debezium.lsn import format_lsn
from txjoin.pg.connect import connect
from txjoin.pg.names import quote_ident
from txjoin.pg.types import ColumnType

if TYPE_CHECKING:
    from txjoin.capture.stream import Capture, _Rel

__all__ = ["take_snapshot"]

log = logging.getLogger(__name__)

_FETCH = 10_000


def _raw_text(conn: Any) -> None:
    """Make psycopg2 return every value as the server's text output."""
    oids = tuple(ext.string_types.keys())
    raw = ext.new_type(oids, "TXJOIN_RAW", lambda value, cur: value)
    ext.register_type(raw, conn)


def _columns(cur: Any, table: Any) -> tuple[list[str], list[ColumnType], list[int]]:
    cur.execute(
        """
        SELECT a.attname, a.atttypid, t.typname, a.atttypmod,
               COALESCE(a.attnum = ANY(i.indkey), false)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
        WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0
          AND NOT a.attisdropped AND a.attgenerated = ''
        ORDER BY a.attnum
        """,
        (table.schema, table.table),
    )
    rows = cur.fetchall()
    names = [r[0] for r in rows]
    types = [ColumnType(int(r[1]), r[2], int(r[3])) for r in rows]
    # The connection returns raw text: booleans arrive as "t"/"f".
    keys = [i for i, r in enumerate(rows) if r[4] in (True, "t")]
    return names, types, keys


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


def take_snapshot(cap: Capture, snapshot_name: str, consistent_lsn: int) -> None:
    """Write the snapshot unit for ``cap``'s tables; ``cap.writer`` is flushed at the end."""
    from txjoin.capture.stream import _Rel

    cfg = cap.config
    started = time.monotonic()
    conn = connect(cfg.dsn)
    try:
        _raw_text(conn)
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
            cur.execute(
                "SELECT (txid_current() % 4294967296)::bigint, (extract(epoch from now()) * 1000000)::bigint"
            )
            xid_text, ts_text = cur.fetchone()
        xid, ts_us = int(xid_text), int(ts_text)
        writer = cap.writer
        writer.append(cfg.transaction_topic, envelope.dumps(envelope.begin_event(xid, consistent_lsn, ts_us)))
        counts: dict[str, int] = {}
        total = 0
        # Hold one row back so the last row of a table (and of the unit) gets
        # Debezium's 'last...' snapshot marker.
        held: tuple[_Rel, dict[str, Any], bool, int] | None = None  # rel, row, first_in_table, dco

        def emit(
            rel: _Rel,
            row: dict[str, Any],
            first_tab: bool,
            last_tab: bool,
            last_all: bool,
            dco: int,
        ) -> None:
            nonlocal total
            total += 1
            value = envelope.change_event(
                cap.source,
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
            with conn.cursor() as cur:
                names, types, keys = _columns(cur, table)
            rel = _Rel(0, table, cfg.topic(table), types, names, keys, keys)
            cap._record_schema(rel, consistent_lsn)
            # Identifiers are quoted; nothing else reaches the statement.
            sql = f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {table.quoted}"  # noqa: S608
            dco = 0
            with conn.cursor(name=f"txjoin_snapshot_{len(counts)}") as cur:
                cur.itersize = _FETCH
                cur.execute(sql)
                for values in cur:
                    if held is not None:
                        h_rel, h_row, h_first, h_dco = held
                        emit(h_rel, h_row, h_first, h_rel is not rel, False, h_dco)
                    dco += 1
                    held = (rel, rel.row(values), dco == 1, dco)
            counts[cfg.topic(table)] = dco
            cap.stats.snapshot_rows += dco
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
    cap._durable_end = cap._last_commit_end = consistent_lsn
    log.info(
        "snapshot of %d tables: %d rows in %.1f s (xid %d, consistent point %s)",
        len(cfg.tables),
        total,
        time.monotonic() - started,
        xid,
        format_lsn(consistent_lsn),
    )
