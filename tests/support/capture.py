"""Helpers for capture tests: run capture in the background, read the source
the same way the changelog shows it, and wait for catch-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions as ext

from txjoin.capture.config import CaptureConfig
from txjoin.changelog import ChangelogReader
from txjoin.debezium.values import to_debezium
from txjoin.pg.connect import exact_text, session_options
from txjoin.pg.names import QualifiedName, parse_table_name, quote_ident
from txjoin.pg.types import ColumnType
from txjoin.runner import open_capture
from txjoin.verify.replay import read_transactions


def wait_for(cond: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


class CaptureThread:
    """Capture running in a daemon thread; errors surface on ``stop()``."""

    def __init__(self, config: CaptureConfig) -> None:
        self.capture = open_capture(config)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="capture", daemon=True)

    def _run(self) -> None:
        try:
            self.capture.run(self.stop_event)
        except BaseException as e:
            self.error = e

    def start(self, wait: bool = True) -> CaptureThread:
        self.thread.start()
        if wait:
            wait_for(
                lambda: self.capture.streaming.is_set() or self.error is not None,
                60,
                "capture to stream",
            )
            self.check()
        return self

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "capture did not stop within 60 s"
        self.check()


@contextmanager
def running_capture(config: CaptureConfig) -> Iterator[CaptureThread]:
    ct = CaptureThread(config).start()
    try:
        yield ct
    finally:
        ct.stop()


def current_xid(cur: Any) -> int:
    cur.execute("SELECT (txid_current() % 4294967296)::bigint")
    return int(cur.fetchone()[0])


def wait_for_xids(
    changelog: Path,
    prefix: str,
    xids: set[int],
    ct: CaptureThread | None = None,
    timeout: float = 60,
) -> None:
    """Wait until every xid in ``xids`` has its END in the changelog."""

    def done() -> bool:
        if ct is not None:
            ct.check()
        if not (changelog / f"{prefix}.transaction").exists():
            return False
        seen = {e.xid for e in read_transactions(ChangelogReader(changelog), prefix)}
        return xids <= seen

    wait_for(done, timeout, f"{len(xids)} transactions to reach the changelog")


def source_rows(dsn: str, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``table``'s rows as Debezium JSON values, keyed by primary key."""
    name: QualifiedName = parse_table_name(table)
    conn = psycopg2.connect(dsn, options=session_options())
    try:
        ext.register_type(ext.new_type(tuple(ext.string_types.keys()), "RAW", lambda v, c: v), conn)
        with conn.cursor() as cur:
            cur.execute(
                """
                SELECT a.attname, a.atttypid, t.typname, a.atttypmod,
                       COALESCE(a.attnum = ANY(i.indkey), false)
                FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid
                LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
                WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY a.attnum
                """,
                (name.schema, name.table),
            )
            cols = cur.fetchall()
            names = [c[0] for c in cols]
            types = [ColumnType(int(c[1]), c[2], int(c[3])) for c in cols]
            keys = [c[0] for c in cols if c[4] in (True, "t")]
            cur.execute(f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {name.quoted}")
            out: dict[tuple[Any, ...], dict[str, Any]] = {}
            for values in cur.fetchall():
                row = {n: to_debezium(v, t) for n, t, v in zip(names, types, values, strict=True)}
                out[tuple(row[k] for k in keys)] = row
    finally:
        conn.close()
    return out


def execute(dsn: str, sql: str, args: Any = None) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
    finally:
        conn.close()


def make_config(
    dsn: str, changelog: Path, tables: list[str], prefix: str = "src", **kw: Any
) -> CaptureConfig:
    return CaptureConfig(
        dsn=dsn,
        tables=tuple(parse_table_name(t) for t in tables),
        changelog=changelog,
        prefix=prefix,
        roll_interval=kw.pop("roll_interval", 0.05),
        heartbeat_interval=kw.pop("heartbeat_interval", 0.2),
        **kw,
    )


__all__ = [
    "CaptureThread",
    "current_xid",
    "execute",
    "make_config",
    "quote_ident",
    "running_capture",
    "source_rows",
    "wait_for",
    "wait_for_xids",
]


def query(dsn: str, sql: str) -> list[dict[str, Any]]:
    """Rows of ``sql`` on ``dsn`` as dicts."""
    conn = exact_text(psycopg2.connect(dsn))
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            assert cur.description is not None
            names = [d.name for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()


def commit(dsn: str, *statements: str) -> int:
    """Run ``statements`` as one transaction; its xid."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            xid = current_xid(cur)
            for st in statements:
                cur.execute(st)
        conn.commit()
        return xid
    finally:
        conn.close()
