"""Real sizes: the first version of ``orders JOIN clients`` at 1M and 10M
orders, and a 2M-row transaction on top, beside PostgreSQL and a Spark batch
rebuild in the same run (issue [2 of 7], acceptance 2 and 3).

For each size N (clients = N/20), a fresh database on a throwaway PostgreSQL
holds ``orders`` (bigint id, int client_id, numeric(12,2) amount, text note,
timestamptz created) and ``clients`` (int id, text name, text region). Then:

- *PostgreSQL*: ``CREATE TABLE AS`` the output's SQL (the baseline the issue
  names), median of ``--runs``;
- *Spark batch rebuild*: both tables exported to Parquet by COPY (timed
  apart), then a fresh Spark job reads them, runs the same SQL and writes
  Parquet (seed 003's batch ETL), median of ``--runs``;
- *txjoin*: ``txjoin run SPEC`` with default settings, as a user starts it
  (capture in the same process); seconds from launch to the output's first
  Delta version, and the peak memory of the whole process tree (Python,
  Spark's JVM, Spark's Python workers), sampled every 0.25 s as PSS, so that
  the pages a forked JVM shares with its parent count once;
- at the sizes in ``--big-at``: one transaction updating ``--big`` orders
  (``amount + 0.01``) while txjoin runs; seconds until a version shows it,
  peak memory meanwhile, and every Delta version's ``sum(amount)``, which
  must be the total before the transaction or the total after it, never
  anything between.

    .venv/bin/python -m bench.size --sizes 1000000,10000000 --big 2000000 --big-at 10000000
"""

from __future__ import annotations

import argparse
import io
import itertools
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from bench.common import PeakMemory, Stat, bench_dir, bench_postgres, machine, write_figures
from txjoin.pg.admin import fresh_database
from txjoin.sink.delta import DeltaRsStore

SQL = (
    "SELECT o.id AS order_id, o.client_id, o.amount, o.note, o.created, c.name AS client "
    "FROM orders o JOIN clients c ON c.id = o.client_id"
)
SCHEMAS = {
    "orders": pa.schema(
        [
            ("id", pa.int64()),
            ("client_id", pa.int32()),
            ("amount", pa.decimal128(12, 2)),
            ("note", pa.string()),
            ("created", pa.timestamp("us", tz="UTC")),
        ]
    ),
    "clients": pa.schema([("id", pa.int32()), ("name", pa.string()), ("region", pa.string())]),
}
GIB = 1 << 30


def _exec(dsn: str, *sql: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        rows: list[tuple[Any, ...]] = []
        with conn.cursor() as cur:
            for s in sql:
                cur.execute(s)
                if cur.description:  # the last statement that returns rows
                    rows = cur.fetchall()
        return rows
    finally:
        conn.close()


def populate(dsn: str, n: int) -> float:
    t0 = time.monotonic()
    clients = max(1, n // 20)
    _exec(
        dsn,
        "CREATE TABLE clients (id int PRIMARY KEY, name text NOT NULL, region text NOT NULL)",
        "CREATE TABLE orders (id bigint PRIMARY KEY, client_id int NOT NULL, amount numeric(12,2) NOT NULL, "
        "note text, created timestamptz NOT NULL)",
        f"INSERT INTO clients SELECT g, 'client ' || g, (ARRAY['EU','US','APAC'])[1 + g % 3] "
        f"FROM generate_series(1, {clients}) g",
        f"INSERT INTO orders SELECT g, 1 + (g::bigint * 7919) % {clients}, (g % 100000) / 100.0, "
        "'order ' || g || ' note', "
        "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' "
        f"FROM generate_series(1, {n}) g",
        "VACUUM ANALYZE clients",
        "VACUUM ANALYZE orders",
    )
    return time.monotonic() - t0


def postgres_ctas(dsn: str) -> float:
    _exec(dsn, "DROP TABLE IF EXISTS out_ctas")
    t0 = time.monotonic()
    _exec(dsn, f"CREATE TABLE out_ctas AS {SQL}")
    took = time.monotonic() - t0
    _exec(dsn, "DROP TABLE out_ctas")
    return took


def export_parquet(dsn: str, table: str, n: int, out: Path, chunk: int = 1_000_000) -> None:
    """``table`` as Parquet files by COPY, in id ranges (what a batch ETL job exports)."""
    out.mkdir(parents=True, exist_ok=True)
    schema = SCHEMAS[table]
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            for k, lo in enumerate(range(1, n + 1, chunk)):
                buf = io.BytesIO()
                cols = ", ".join(schema.names)
                cur.copy_expert(
                    f"COPY (SELECT {cols} FROM {table} WHERE id BETWEEN {lo} AND {lo + chunk - 1}) "
                    "TO STDOUT WITH (FORMAT csv)",
                    buf,
                )
                buf.seek(0)
                data = pacsv.read_csv(
                    buf,
                    read_options=pacsv.ReadOptions(column_names=schema.names),
                    convert_options=pacsv.ConvertOptions(column_types=schema),
                )
                pq.write_table(data.cast(schema), out / f"part-{k:05d}.parquet")
    finally:
        conn.close()


def spark_rebuild(data: Path, out: Path) -> tuple[float, float]:
    """A fresh Spark job: read both exports, run the SQL, write Parquet; seconds with and without
    starting Spark."""
    code = (
        "import sys, time; t0 = time.monotonic()\n"
        "from txjoin.session import spark_session\n"
        "s = spark_session('bench-size-rebuild', cores=2, driver_memory='4g'); t1 = time.monotonic()\n"
        f"s.read.parquet({str(data / 'orders')!r}).createOrReplaceTempView('orders')\n"
        f"s.read.parquet({str(data / 'clients')!r}).createOrReplaceTempView('clients')\n"
        f"s.sql({SQL!r}).write.mode('overwrite').parquet({str(out)!r})\n"
        "print(time.monotonic() - t0, time.monotonic() - t1)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    total, job = r.stdout.strip().splitlines()[-1].split()
    return float(total), float(job)


def _spec(path: Path, dsn: str, state: Path) -> None:
    path.write_text(
        "\n".join([
            'name = "size"', f'state_dir = "{state}"', "[sources.shop]", f'dsn = "{dsn}"',
            'tables = ["public.orders", "public.clients"]', "[outputs.enriched]", 'key = ["order_id"]',
            f'sql = """{SQL}"""',
        ]) + "\n"
    )  # fmt: skip


def _first_version(out: Path) -> bool:
    return (out / "_delta_log" / f"{0:020d}.json").exists()


def _sums(out: Path) -> list[tuple[int, int, Decimal, int]]:
    """(version, cut LSN, sum(amount), rows) of every Delta version of the output."""
    from deltalake import DeltaTable

    delta = DeltaRsStore()
    con = duckdb.connect()
    rows = []
    for v in delta.history(out):
        files = DeltaTable(str(out), version=v.version).file_uris()
        (total, count), *_ = con.sql(f"SELECT sum(amount), count(*) FROM read_parquet({files!r})").fetchall()
        rows.append((v.version, v.cut["shop"].lsn if "shop" in v.cut else -1, Decimal(total), int(count)))
    con.close()
    return rows


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def run_txjoin(dsn: str, home: Path, n: int, big: int | None) -> dict[str, Any]:
    state = home / "state"
    spec = home / "size.toml"
    _spec(spec, dsn, state)
    out = state / "delta" / "enriched"
    log = (home / "txjoin.log").open("w")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "txjoin.cli", "run", str(spec)], stdout=log, stderr=subprocess.STDOUT
    )
    result: dict[str, Any] = {"rows": n}
    try:
        with PeakMemory(proc.pid) as mem:
            while not _first_version(out):
                if proc.poll() is not None:
                    raise RuntimeError(f"txjoin run exited with {proc.returncode}: see {home / 'txjoin.log'}")
                time.sleep(0.1)
            result["first_version_s"] = time.monotonic() - t0
        result["peak_rss_gib"] = mem.peak / GIB
        took = result["first_version_s"]
        print(f"  txjoin: first version after {took:.1f} s, peak {mem.describe()}", flush=True)
        if big:
            before = _sums(out)[-1][2]
            with PeakMemory(proc.pid) as mem:
                t1 = time.monotonic()
                # The WAL position inside the transaction: its commit is past it. Read after the
                # commit, it may be past WAL that others write later (autovacuum, the bgwriter's
                # standby snapshots), which no cut reaches while no transaction follows.
                (lsn,), *_ = _exec(
                    dsn,
                    "BEGIN",
                    f"UPDATE orders SET amount = amount + 0.01 WHERE id <= {big}",
                    "SELECT pg_current_wal_insert_lsn()::text",
                    "COMMIT",
                )
                committed = _lsn(lsn)
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(
                            f"txjoin run exited with {proc.returncode}: see {home / 'txjoin.log'}"
                        )
                    history = DeltaRsStore().history(out)
                    if history and history[-1].cut.get("shop") and history[-1].cut["shop"].lsn >= committed:
                        break
                    time.sleep(0.2)
                result["big_visible_s"] = time.monotonic() - t1
            result["big_peak_rss_gib"] = mem.peak / GIB
            sums = _sums(out)
            moved = Decimal(big) / 100
            torn = [v for v, _, s, _ in sums if s not in (before, before + moved)]
            result["big"] = big
            result["versions"] = len(sums)
            result["torn_versions"] = len(torn)
            result["sum_before"] = str(before)
            result["sum_after"] = str(sums[-1][2])
            result["moves"] = sum(1 for a, b in itertools.pairwise(sums) if a[2] != b[2])
            print(f"  txjoin: {big:,}-row transaction visible after {result['big_visible_s']:.1f} s, peak "
                  f"{mem.describe()}; {len(sums)} versions, sum(amount) {before} -> {sums[-1][2]} "
                  f"in {result['moves']} step(s), {len(torn)} torn", flush=True)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            result["exit_code"] = proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
            result["exit_code"] = proc.wait()
        log.close()
    text = (home / "txjoin.log").read_text(errors="replace")
    if m := re.search(r"snapshot of \d+ tables: ([\d,]+) rows in ([\d.]+) s", text):
        result["snapshot_s"] = float(m.group(2))
    result["load_s"] = sum(float(x) for x in re.findall(r"into the replicas in ([\d.]+) s", text))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--runs", type=int, default=3, help="runs of each baseline and of txjoin's first version")
    ap.add_argument("--big", type=int, default=2_000_000, help="rows the large transaction updates")
    ap.add_argument("--big-at", default="10000000", help="sizes at which to run the large transaction")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    big_at = {int(s) for s in args.big_at.split(",") if s}
    print(f"machine: {machine()}; sizes {sizes}; {args.runs} runs each", flush=True)
    figures: dict[str, Any] = {"sizes": []}
    with bench_postgres() as pg, bench_dir("txjoin-bench-size-") as root:
        admin = pg.dsn()
        for n in sizes:
            dsn = fresh_database(admin, f"size{n}")
            print(f"\n== {n:,} orders, {n // 20:,} clients", flush=True)
            populated = populate(dsn, n)
            print(f"  PostgreSQL: populated in {populated:.0f} s", flush=True)
            ctas = [postgres_ctas(dsn) for _ in range(args.runs)]
            print(f"  PostgreSQL CREATE TABLE AS: {Stat(ctas).fmt(' s', 1)}", flush=True)
            data = root / f"export-{n}"
            t0 = time.monotonic()
            export_parquet(dsn, "orders", n, data / "orders")
            export_parquet(dsn, "clients", n // 20, data / "clients")
            exported = time.monotonic() - t0
            rebuilt = [spark_rebuild(data, root / f"rebuild-{n}-{i}") for i in range(args.runs)]
            spark, job = [t for t, _ in rebuilt], [j for _, j in rebuilt]
            print(
                f"  Spark batch rebuild from Parquet (export {exported:.0f} s apart): "
                f"{Stat(spark).fmt(' s', 1)}; without starting Spark {Stat(job).fmt(' s', 1)}",
                flush=True,
            )
            runs = []
            for i in range(args.runs):
                with bench_dir(f"txjoin-bench-size-{n}-") as home:
                    want_big = args.big if (n in big_at and i == args.runs - 1) else None
                    runs.append(run_txjoin(dsn, home, n, want_big))
                _exec(
                    dsn,
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active",
                )
            figures["sizes"].append({
                "rows": n, "populate_s": populated, "ctas_s": ctas, "export_s": exported, "spark_s": spark,
                "spark_job_s": job,
                "first_version_s": [r["first_version_s"] for r in runs],
                "peak_rss_gib": [r["peak_rss_gib"] for r in runs],
                "snapshot_s": [r.get("snapshot_s") for r in runs], "load_s": [r.get("load_s") for r in runs],
                "exit_codes": [r["exit_code"] for r in runs],
                "big": next((r for r in runs if "big" in r), None),
            })  # fmt: skip
            first = Stat([r["first_version_s"] for r in runs])
            print(f"  txjoin first version: {first.fmt(' s', 1)}; {first.median / Stat(ctas).median:.1f}x "
                  f"PostgreSQL's CREATE TABLE AS; peak {max(r['peak_rss_gib'] for r in runs):.2f} GiB",
                  flush=True)  # fmt: skip
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
