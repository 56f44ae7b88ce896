"""The ``txjoin`` command line.

Errors reach the user as one line (``txjoin: error: ...``) with exit status 2;
``--debug`` shows the traceback. Passwords never appear: DSNs are printed as
``user@host:port/db``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from txjoin import __version__
from txjoin.errors import ConfigError, TxJoinError

__all__ = ["main"]

log = logging.getLogger("txjoin")

DEFAULT_HOME = Path(os.environ.get("TXJOIN_HOME", ".txjoin"))


def _dsn(args: argparse.Namespace) -> str:
    dsn: str | None = args.dsn or os.environ.get("TXJOIN_DSN")
    if not dsn:
        raise ConfigError("no database given: pass --dsn 'host=... dbname=...' or set TXJOIN_DSN")
    return dsn


# -- txjoin db -------------------------------------------------------------------


def _db(args: argparse.Namespace) -> int:
    from txjoin.pg.embedded import EmbeddedPostgres

    data_dir = Path(args.data_dir)
    if args.action == "start":
        pg = EmbeddedPostgres(data_dir, port=args.port).start()
        print(f"embedded PostgreSQL running on port {pg.port} (data directory {pg.data_dir})")
        print(f"connect with: psql '{pg.dsn()}'")
        return 0
    pg = EmbeddedPostgres(data_dir)
    if args.action == "stop":
        pg.stop()
        print(f"embedded PostgreSQL stopped ({pg.data_dir})")
        return 0
    st = pg.status()
    print(st.describe())
    if st.running:
        print(f"dsn: {pg.dsn()}")
    return 0 if st.running else 3


# -- txjoin capture -------------------------------------------------------------


def _install_stop_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C: leave now
            raise KeyboardInterrupt
        log.info("stopping (signal %d); press Ctrl-C again to abort", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _capture(args: argparse.Namespace) -> int:
    from txjoin.capture.config import CaptureConfig
    from txjoin.pg.names import parse_table_name
    from txjoin.runner import open_capture

    tables = tuple(parse_table_name(t.strip()) for t in args.tables.split(",") if t.strip())
    config = CaptureConfig(
        dsn=_dsn(args),
        tables=tables,
        changelog=Path(args.changelog),
        prefix=args.source,
        slot=args.slot or "",
        publication=args.publication or "",
        snapshot=not args.no_snapshot,
        replica_identity_full=args.replica_identity_full,
        roll_interval=args.roll_interval,
        roll_bytes=args.roll_bytes,
        heartbeat_interval=args.heartbeat_interval,
        ack_interval=args.ack_interval,
    )
    stop = threading.Event()
    _install_stop_signals(stop)
    cap = open_capture(config)
    progress = _Progress(
        lambda: (
            f"captured {cap.stats.transactions} transactions, {cap.stats.events} events "
            f"(snapshot {cap.stats.snapshot_rows} rows); acknowledged LSN "
            f"{_lsn(cap.stats.acked_lsn)}"
        ),
        quiet=args.quiet,
    )
    with progress:
        cap.run(stop)
    print(
        f"capture stopped: {cap.stats.transactions} transactions, {cap.stats.events} events, "
        f"acknowledged up to {_lsn(cap.stats.acked_lsn)}"
    )
    return 0


def _lsn(v: int) -> str:
    from txjoin.debezium.lsn import format_lsn

    return format_lsn(v)


class _Progress:
    """A status line on stderr every few seconds while long work runs."""

    def __init__(self, line: Callable[[], str], *, quiet: bool = False, every: float = 5.0) -> None:
        self.line = line
        self.quiet = quiet or (not sys.stderr.isatty() and os.environ.get("TXJOIN_PROGRESS") != "1")
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(f"  {time.strftime('%H:%M:%S')} {self.line()}", file=sys.stderr, flush=True)

    def __enter__(self) -> _Progress:
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


# -- txjoin slots -----------------------------------------------------------------


def _slots(args: argparse.Namespace) -> int:
    from txjoin.pg import admin
    from txjoin.pg.connect import connect, describe_dsn

    dsn = _dsn(args)
    where = describe_dsn(dsn)
    conn = connect(dsn)
    try:
        if args.action == "list":
            slots = admin.list_slots(conn)
            if not slots:
                print(f"no replication slots on {where}")
                return 0
            print(f"{'slot':<32} {'plugin':<10} {'database':<16} {'active':<8} {'retained WAL':>14}  status")
            for s in slots:
                retained = "-" if s.retained_wal_bytes is None else _bytes(s.retained_wal_bytes)
                active = f"pid {s.active_pid}" if s.active else "no"
                print(
                    f"{s.name:<32} {s.plugin or '-':<10} {s.database or '-':<16} {active:<8} "
                    f"{retained:>14}  {s.wal_status or '-'}"
                )
            return 0
        admin.drop_slot(conn, args.name, where)
        print(f"dropped replication slot {args.name} on {where}")
        return 0
    finally:
        conn.close()


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# -- parser ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="txjoin",
        description="Joined Delta tables from PostgreSQL change streams, consistent at every version.",
    )
    p.add_argument("--version", action="version", version=f"txjoin {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = sub.add_parser("db", help="start, stop or inspect the embedded PostgreSQL")
    db.add_argument("action", choices=["start", "stop", "status"])
    db.add_argument(
        "--data-dir", default=str(DEFAULT_HOME / "pg"), help="cluster directory (default: %(default)s)"
    )
    db.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    db.set_defaults(func=_db)

    cap = sub.add_parser("capture", help="capture one source database into a changelog")
    cap.add_argument("--dsn", help="source database (libpq string or URI; default $TXJOIN_DSN)")
    cap.add_argument(
        "--tables", required=True, help="comma-separated tables, e.g. public.orders,public.clients"
    )
    cap.add_argument("--changelog", required=True, help="changelog directory")
    cap.add_argument("--source", required=True, help="source name, the topic prefix")
    cap.add_argument("--slot", help="replication slot (default txjoin_<source>)")
    cap.add_argument("--publication", help="publication (default: the slot name)")
    cap.add_argument("--no-snapshot", action="store_true", help="skip the initial snapshot")
    cap.add_argument(
        "--replica-identity-full",
        action="store_true",
        help="set REPLICA IDENTITY FULL on the tables so 'before' holds whole rows",
    )
    cap.add_argument(
        "--roll-interval", type=float, default=0.2, help="seconds before pending events are flushed"
    )
    cap.add_argument(
        "--roll-bytes", type=int, default=8 << 20, help="bytes before pending events are flushed"
    )
    cap.add_argument(
        "--heartbeat-interval", type=float, default=1.0, help="seconds between heartbeats when idle"
    )
    cap.add_argument(
        "--ack-interval",
        type=float,
        default=0.0,
        help="minimum seconds between acknowledgements to the server",
    )
    cap.add_argument("--quiet", action="store_true", help="no progress lines")
    cap.set_defaults(func=_capture)

    slots = sub.add_parser("slots", help="list replication slots with retained WAL, or drop one")
    slots_sub = slots.add_subparsers(dest="action", required=True)
    sl = slots_sub.add_parser("list", help="list slots and the WAL each one retains")
    sl.add_argument("--dsn", help="database (default $TXJOIN_DSN)")
    sd = slots_sub.add_parser("drop", help="drop an inactive slot")
    sd.add_argument("name")
    sd.add_argument("--dsn", help="database (default $TXJOIN_DSN)")
    slots.set_defaults(func=_slots)

    from txjoin import cli_pipeline

    cli_pipeline.add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if args.debug else "txjoin: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.debug:
        for noisy in ("py4j", "pyspark"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        rc: int = args.func(args)
        return rc
    except TxJoinError as e:
        if args.debug:
            raise
        print(f"txjoin: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("txjoin: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"txjoin: error: {type(e).__name__}: {text} (run with --debug for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
