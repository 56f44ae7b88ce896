"""The apply stage alone: row changes per second into the replicas, vectorized
beside the per-row path it replaced, in one run (issue [2 of 7], acceptance 4).

Replicas of ``orders`` (N rows: bigint id, int client_id, numeric(12,2)
amount, text note, timestamptz created) and ``clients`` (N/20), then
micro-batches of released transactions (10 events each: 7 updates of random
orders, 2 inserts, 1 delete; one transaction in ten renames a client):

- *txjoin*: ``JoinStage.apply`` as a micro-batch runs it: Debezium JSON
  parsed per table by Arrow, before-image lookups and the output's affected
  partitions (old and new), the version-monotonic upsert into DuckDB, and the
  durable replica commit. No Spark, no Delta.
- *per-row* (the baseline, ``bench/rowwise.py``): the path before this issue,
  one ``json.loads`` per event into a ``Change``, then the SQLite replica's
  row-by-row lookups, version checks and upserts, and its commit. It leaves
  out the old per-row partition propagation, so the ratio understates the
  gain.

    .venv/bin/python -m bench.apply --rows 1000000 --batch 100000 --batches 5
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import Stat, bench_dir, machine, write_figures
from bench.rowwise import RowwiseStore, changes
from txjoin.cut import Cut
from txjoin.join.batch import BatchStats, JoinStage
from txjoin.join.planned import plan_outputs
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType
from txjoin.spec import build_spec

ORDERS = QualifiedName("public", "orders")
CLIENTS = QualifiedName("public", "clients")
SQL = (
    "SELECT o.id AS order_id, o.amount, o.note, o.created, c.name AS client "
    "FROM orders o JOIN clients c ON c.id = o.client_id"
)
INT8, INT4 = ColumnType(20, "int8"), ColumnType(23, "int4")
NUMERIC = ColumnType(1700, "numeric", ((12 << 16) | 2) + 4)
TEXT, TSTZ = ColumnType(25, "text"), ColumnType(1184, "timestamptz")
EVENTS_PER_TX = 10


def tables() -> dict[QualifiedName, Table]:
    def cols(*named: tuple[str, ColumnType]) -> tuple[Column, ...]:
        return tuple(Column(n, t) for n, t in named)

    orders = cols(("id", INT8), ("client_id", INT4), ("amount", NUMERIC), ("note", TEXT), ("created", TSTZ))
    return {
        ORDERS: Table(ORDERS, "shop", orders, ("id",)),
        CLIENTS: Table(CLIENTS, "shop", cols(("id", INT4), ("name", TEXT), ("region", TEXT)), ("id",)),
    }


def order(i: int, clients: int, cents: int = 1000) -> dict[str, Any]:
    return {
        "id": i, "client_id": 1 + i % clients, "amount": f"{cents // 100}.{cents % 100:02d}",
        "note": f"order {i} for the shop", "created": "2026-11-01T10:00:00.000000Z",
    }  # fmt: skip


def client(c: int, name: str | None = None) -> dict[str, Any]:
    return {"id": c, "name": name or f"client {c}", "region": ("EU", "US", "APAC")[c % 3]}


class Workload:
    """Released transactions, as assembly hands them to the join stage."""

    def __init__(self, n: int, seed: int = 11) -> None:
        self.rng = random.Random(seed)
        self.clients = max(1, n // 20)
        self.live = list(range(1, n + 1))
        self.next_id = n + 1
        self.tx = 1
        self.lsn = 10_000_000

    def batch(self, events: int) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        while len(rows) < events:
            self.tx += 1
            self.lsn += 1000
            evs: list[tuple[QualifiedName, str, dict[str, Any] | None, dict[str, Any] | None]] = []
            for _ in range(7):
                i = self.live[self.rng.randrange(len(self.live))]
                evs.append((ORDERS, "u", None, order(i, self.clients, self.rng.randrange(100_000))))
            for _ in range(2):
                evs.append((ORDERS, "c", None, order(self.next_id, self.clients)))
                self.live.append(self.next_id)
                self.next_id += 1
            k = self.rng.randrange(len(self.live))
            gone = self.live[k]
            self.live[k] = self.live[-1]
            self.live.pop()
            evs.append((ORDERS, "d", {"id": gone}, None))
            if self.tx % 10 == 0:
                c = self.rng.randint(1, self.clients)
                evs.append((CLIENTS, "u", None, client(c, f"renamed {self.tx}")))
            for k, (table, op, before, after) in enumerate(evs, start=1):
                rows.append({
                    "source": "shop", "tx_seq": self.tx, "xid": self.tx, "commit_lsn": self.lsn,
                    "commit_ts_ms": 0, "total_order": k, "lsn": self.lsn - 500 + k, "op": op,
                    "table": str(table), "value": json.dumps({"before": before, "after": after, "op": op}),
                    "tx_events": len(evs), "dc_order": k,
                })  # fmt: skip
        return pd.DataFrame(rows)


def load(join: JoinStage, rowwise: RowwiseStore, n: int, data: Path) -> None:
    """Both stores hold N orders and N/20 clients (batch 0)."""
    clients = [client(c) for c in range(1, max(1, n // 20) + 1)]
    store = join.store
    store.begin()
    for table, make, count in ((CLIENTS, client, len(clients)), (ORDERS, None, n)):
        files = []
        for start in range(0, count, 200_000):
            stop = min(count, start + 200_000)
            if make:
                rows = clients[start:stop]
            else:
                rows = [order(i, len(clients)) for i in range(start + 1, stop + 1)]
            f = data / f"{table.table}-{start}.parquet"
            pq.write_table(pa.Table.from_pylist(rows, schema=store.tables[table].schema()), f)
            files.append(f)
            rowwise.load(table, rows)
        store.load_parquet(table, files, 1)
    store.set_meta("initialized", {"enriched": join.fingerprint("enriched")})
    store.commit(0, {}, {"shop": Cut(lsn=1, xid=1, transactions=1, commit_ts_ms=0)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="orders in the replicas")
    ap.add_argument("--batch", type=int, default=100_000, help="row changes per micro-batch")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    print(f"machine: {machine()}; {args.rows:,} orders, {args.batch:,} row changes per batch")
    with bench_dir("txjoin-bench-apply-") as root:
        spec = build_spec(
            {
                "name": "benchapply",
                "state_dir": str(root / "state"),
                "sources": {"shop": {"dsn": "host=unused", "tables": ["public.orders", "public.clients"]}},
                "outputs": {"enriched": {"key": ["order_id"], "sql": SQL}},
            },
            root,
            "bench spec",
        )
        join = JoinStage(spec, None, plan_outputs(spec, tables()))
        rowwise = RowwiseStore(
            root / "rowwise.sqlite", {ORDERS: ("id",), CLIENTS: ("id",)}, {ORDERS: ["client_id"]}
        )
        (root / "data").mkdir()
        t0 = time.monotonic()
        load(join, rowwise, args.rows, root / "data")
        print(f"loaded both stores in {time.monotonic() - t0:.0f} s")
        work = Workload(args.rows)
        fast: list[float] = []
        slow: list[float] = []
        known = set(tables())
        for b in range(1, args.batches + 1):
            df = work.batch(args.batch)
            stats = BatchStats(b)
            t0 = time.monotonic()
            join.apply(df, b, stats, table_exists=lambda _: True)
            fast.append(len(df) / (time.monotonic() - t0))
            t0 = time.monotonic()
            rowwise.apply(changes(df, known))
            slow.append(len(df) / (time.monotonic() - t0))
            print(f"batch {b}: {len(df):,} row changes; txjoin {fast[-1]:,.0f}/s, per-row {slow[-1]:,.0f}/s "
                  f"({fast[-1] / slow[-1]:.1f}x)", flush=True)  # fmt: skip
        join.close()
        rowwise.close()
    f, s = Stat(fast), Stat(slow)
    print(f"\ntxjoin apply: {f.fmt('/s')}\nper-row path: {s.fmt('/s')}\nratio {f.median / s.median:.1f}x")
    write_figures(
        args.json,
        {"rows": args.rows, "batch": args.batch, "txjoin_per_s": fast, "rowwise_per_s": slow},
    )


if __name__ == "__main__":
    main()
