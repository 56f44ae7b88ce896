"""Capture throughput beside the raw replication read rate (issue [1 of 5]).

Two slots are created at the same WAL position; a workload of N row events
(transactions of ``--tx-size`` inserts into two tables of realistic width)
is committed; then

- *raw*: psycopg2's replication read loop drains one slot with no decoding
  at all (the limit on this machine),
- *capture*: txjoin capture drains the other: decode, convert values, build
  Debezium envelopes, write segments, fsync, acknowledge.

Both read the same WAL. Prints row events/s for each and capture/raw.

    .venv/bin/python -m bench.capture --events 300000 --runs 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg2
from psycopg2.extras import LogicalReplicationConnection

from bench.common import Stat, bench_postgres, machine, write_figures
from txjoin.capture.config import CaptureConfig
from txjoin.capture.stream import Capture
from txjoin.pg.names import QualifiedName
from txjoin.runner import open_capture

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, customer int, amount numeric(12,2),
    placed timestamptz, note text, items int[]);
CREATE TABLE IF NOT EXISTS lines (id bigint PRIMARY KEY, order_id bigint, sku text, qty int, price float8);
CREATE PUBLICATION bench_pub FOR TABLE orders, lines;
"""


def _lsn(dsn: str) -> int:
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
        row = cur.fetchone()
    conn.close()
    assert row is not None
    return int(row[0])


def _workload(dsn: str, events: int, tx_size: int, start_id: int) -> None:
    conn = psycopg2.connect(dsn)
    per_table = tx_size // 2
    n_tx = events // (2 * per_table)
    with conn.cursor() as cur:
        for t in range(n_tx):
            base = start_id + t * per_table
            cur.execute(
                "INSERT INTO orders SELECT g, g %% 1000, (g %% 10000) / 100.0, now(), 'order note ' || g, "
                "ARRAY[g %% 7, g %% 11, g %% 13] FROM generate_series(%s, %s) g",
                (base, base + per_table - 1),
            )
            cur.execute(
                "INSERT INTO lines SELECT g, g, 'sku-' || (g %% 500), g %% 5 + 1, (g %% 997) * 1.25 "
                "FROM generate_series(%s, %s) g",
                (base, base + per_table - 1),
            )
            conn.commit()
    conn.close()


def _raw_read(dsn: str, slot: str, end_lsn: int) -> tuple[int, float]:
    conn = psycopg2.connect(dsn, connection_factory=LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(
        slot_name=slot, decode=False, options={"proto_version": "1", "publication_names": "bench_pub"}
    )
    rows = 0
    t0 = time.perf_counter()
    while True:
        msg = cur.read_message()
        if msg is None:
            continue
        if msg.payload[:1] in (b"I", b"U", b"D"):
            rows += 1
        elif msg.payload[:1] == b"C" and msg.data_start >= end_lsn:
            break
    elapsed = time.perf_counter() - t0
    conn.close()
    return rows, elapsed


def _capture(dsn: str, slot: str, events: int, workdir: Path) -> tuple[int, float]:
    config = CaptureConfig(
        dsn=dsn,
        tables=(QualifiedName("public", "orders"), QualifiedName("public", "lines")),
        changelog=workdir / "changelog",
        prefix="bench",
        slot=slot,
        publication="bench_pub",
        snapshot=False,
    )
    cap = open_capture(config)
    started: list[float] = []

    def until(c: Capture) -> bool:
        if not started and c.streaming.is_set():
            started.append(time.perf_counter())
        return c.stats.events >= events

    cap.run(until=until)
    elapsed = time.perf_counter() - started[0]
    return cap.stats.events, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--tx-size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    raw_rates, cap_rates, ratios = [], [], []
    with bench_postgres() as pg:
        dsn = pg.create_database("bench")
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(SCHEMA)
        for run in range(args.runs):
            with conn.cursor() as cur:
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"raw{run}",))
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"cap{run}",))
            _workload(dsn, args.events, args.tx_size, start_id=run * 10_000_000)
            end = _lsn(dsn)
            raw_rows, raw_s = _raw_read(dsn, f"raw{run}", end)
            with tempfile.TemporaryDirectory() as d:
                cap_rows, cap_s = _capture(dsn, f"cap{run}", raw_rows, Path(d))
            assert cap_rows == raw_rows, (cap_rows, raw_rows)
            raw_rates.append(raw_rows / raw_s)
            cap_rates.append(cap_rows / cap_s)
            ratios.append(cap_rates[-1] / raw_rates[-1])
            print(
                f"run {run + 1}: {raw_rows} row events; raw {raw_rates[-1]:,.0f}/s, "
                f"capture {cap_rates[-1]:,.0f}/s, ratio {ratios[-1]:.2f}"
            )
            with conn.cursor() as cur:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (f"raw{run}",))
                cur.execute("SELECT pg_drop_replication_slot(%s)", (f"cap{run}",))
        conn.close()
    print(f"\nmachine: {machine()}")
    print(f"raw replication read (limit): {Stat(raw_rates).fmt(' events/s')}")
    print(f"txjoin capture:               {Stat(cap_rates).fmt(' events/s')}")
    print(f"capture / raw:                {Stat(ratios).fmt('', 2)}   target >= 0.25")
    figures = {"raw_per_s": raw_rates, "capture_per_s": cap_rates, "ratio": ratios, "events": args.events}
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
