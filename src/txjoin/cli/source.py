"""Source commands: ``db`` (the embedded PostgreSQL), ``capture`` and ``slots``."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path
from typing import Any

from txjoin.cli.common import DEFAULT_HOME, Progress, dsn_of, install_stop_signals
from txjoin.debezium.lsn import format_lsn

__all__ = ["add_commands"]


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


def _capture(args: argparse.Namespace) -> int:
    from txjoin.capture.config import CaptureConfig
    from txjoin.pg.names import parse_table_name
    from txjoin.runner import open_capture

    tables = tuple(parse_table_name(t.strip()) for t in args.tables.split(",") if t.strip())
    config = CaptureConfig(
        dsn=dsn_of(args),
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
        snapshot_workers=args.snapshot_workers,
        snapshot_chunk_mb=args.snapshot_chunk_mb,
    )
    stop = threading.Event()
    install_stop_signals(stop)
    cap = open_capture(config)
    progress = Progress(
        lambda: (
            f"captured {cap.stats.transactions} transactions, {cap.stats.events} events "
            f"(snapshot {cap.stats.snapshot_rows} rows); acknowledged LSN "
            f"{format_lsn(cap.stats.acked_lsn)}"
        ),
        quiet=args.quiet,
    )
    with progress:
        cap.run(stop)
    print(
        f"capture stopped: {cap.stats.transactions} transactions, {cap.stats.events} events, "
        f"acknowledged up to {format_lsn(cap.stats.acked_lsn)}"
    )
    return 0


# -- txjoin slots -----------------------------------------------------------------


def _slots(args: argparse.Namespace) -> int:
    from txjoin.pg import admin
    from txjoin.pg.connect import connect, describe_dsn

    dsn = dsn_of(args)
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


def add_commands(sub: Any) -> None:
    """Register the source subcommands on the ``txjoin`` parser."""
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
        "--heartbeat-interval", type=float, default=10.0, help="seconds between heartbeats when idle"
    )
    cap.add_argument(
        "--ack-interval",
        type=float,
        default=0.0,
        help="minimum seconds between acknowledgements to the server",
    )
    cap.add_argument(
        "--snapshot-workers", type=int, default=2, help="connections reading the initial snapshot in parallel"
    )
    cap.add_argument(
        "--snapshot-chunk-mb", type=int, default=64, help="heap megabytes each snapshot read takes at a time"
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
