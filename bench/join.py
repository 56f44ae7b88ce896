"""Per-batch cost of the incremental join against table size, beside a full
recompute of the same SQL (issue [3 of 5]).

The join stage alone (no PostgreSQL, no capture): replicas of ``orders`` (N
rows) and ``clients`` (N/10) are loaded into the replica store, the output
``orders JOIN clients`` is built once by the baseline, then micro-batches of
released transactions at a fixed size go through ``Pipeline.process_batch``
(replica upsert, key propagation, closure, Spark SQL over the closure, one
Delta commit). For N = 10k, 100k and 1M, in one run:

- *incremental*: median seconds per batch, with the stages' split;
- *full recompute* (the baseline, seed 003's batch ETL): Spark reads both
  tables (Parquet), runs the same SQL over all rows and overwrites the
  output Delta table.

Two change patterns of 200 transactions per batch (``--tx-per-batch``): ``recent`` (each
transaction inserts an order and edits a recent one; one in ten renames a
recent client: the pizzeria's pattern) and ``uniform`` (edits of orders
anywhere in the table). Delta tables are copy-on-write in delta-rs (no
deletion vectors): a commit rewrites every file holding a changed row, so
with changes spread over the whole table the commit grows with the table.

    .venv/bin/python -m bench.join --sizes 10000,100000,1000000 --batches 8
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import Stat, bench_spark, machine, write_figures
from txjoin.cut import Cut
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType
from txjoin.pipeline import Pipeline
from txjoin.spec import build_spec

ORDERS = QualifiedName("public", "orders")
CLIENTS = QualifiedName("public", "clients")
SQL = (
    "SELECT o.id AS order_id, o.amount, o.note, c.name AS client, c.region "
    "FROM orders o JOIN clients c ON c.id = o.client_id"
)
INT4 = ColumnType(23, "int4", -1)
TEXT = ColumnType(25, "text", -1)
TX_PER_BATCH = 200


def tables() -> dict[QualifiedName, Table]:
    def cols(*named: tuple[str, ColumnType]) -> tuple[Column, ...]:
        return tuple(Column(n, t) for n, t in named)

    return {
        ORDERS: Table(
            ORDERS, "shop", cols(("id", INT4), ("client_id", INT4), ("amount", INT4), ("note", TEXT)), ("id",)
        ),
        CLIENTS: Table(CLIENTS, "shop", cols(("id", INT4), ("name", TEXT), ("region", TEXT)), ("id",)),
    }


def order(i: int, amount: int = 10) -> dict[str, Any]:
    return {"id": i, "client_id": i // 10 + 1, "amount": amount, "note": f"order {i}"}


def client(c: int, name: str | None = None) -> dict[str, Any]:
    return {"id": c, "name": name or f"client {c}", "region": ("EU", "US", "APAC")[c % 3]}


class Workload:
    """Released transactions, as assembly hands them to the join stage."""

    def __init__(self, n: int, pattern: str, seed: int = 7, tx_per_batch: int = TX_PER_BATCH) -> None:
        self.rng = random.Random(seed)
        self.tx_per_batch = tx_per_batch
        self.n = n
        self.next_id = n + 1
        self.pattern = pattern
        self.lsn = 10_000_000
        self.tx = 1
        self.amounts: dict[int, int] = {}

    def batch(self) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        for _ in range(self.tx_per_batch):
            self.tx += 1
            self.lsn += 100
            events: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []
            if self.pattern == "recent":
                events.append(("public.orders", "c", None, order(self.next_id)))
                if self.next_id % 10 == 0:
                    c = self.next_id // 10 + 1
                    events.append(("public.clients", "c", None, client(c)))
                self.next_id += 1
                hot = self.rng.randint(max(1, self.next_id - max(100, self.n // 100)), self.next_id - 1)
            else:
                hot = self.rng.randint(1, self.n)
            amount = self.amounts.get(hot, 10) + 1
            self.amounts[hot] = amount
            events.append(("public.orders", "u", None, order(hot, amount)))
            if self.tx % 10 == 0:
                c = hot // 10 + 1
                events.append(("public.clients", "u", None, client(c, f"renamed {self.tx}")))
            for k, (table, op, before, after) in enumerate(events, start=1):
                value = json.dumps({"before": before, "after": after, "op": op})
                rows.append(
                    {
                        "source": "shop", "tx_seq": self.tx, "xid": self.tx, "commit_lsn": self.lsn,
                        "commit_ts_ms": int(time.time() * 1000), "total_order": k, "lsn": self.lsn - 50 + k,
                        "op": op, "table": table, "value": value, "tx_events": len(events),
                    }
                )  # fmt: skip
        return pd.DataFrame(rows)


def load(pipeline: Pipeline, n: int, data: Path) -> None:
    """Replicas and Parquet copies of N orders and N/10 clients (batch 0)."""
    store = pipeline.store
    clients = [client(c) for c in range(1, n // 10 + 2)]
    orders = [order(i) for i in range(1, n + 1)]
    store.begin()
    for rows, table in ((clients, CLIENTS), (orders, ORDERS)):
        # Bulk: Parquet files of the rows, as the columnar snapshot writes them.
        files = []
        for start in range(0, len(rows), 100_000):
            part = data / f"load-{table.table}-{start}.parquet"
            part.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                pa.Table.from_pylist(rows[start : start + 100_000], schema=store.tables[table].schema()), part
            )
            files.append(part)
        store.load_parquet(table, files, 1)
    cut = {"shop": Cut(lsn=1, xid=1, transactions=1, commit_ts_ms=0)}
    store.set_meta("initialized", {"enriched": pipeline.join.fingerprint("enriched")})
    store.commit(0, {}, cut)
    data.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(orders), data / "orders.parquet")
    pq.write_table(pa.Table.from_pylist(clients), data / "clients.parquet")


def full_recompute(pipeline: Pipeline, spark: Any, data: Path, batch: int) -> float:
    """The baseline: read both tables, run the SQL over all rows, overwrite the output."""
    plan = pipeline.plans["enriched"]
    started = time.monotonic()
    for alias, info in plan.aliases.items():
        spark.read.parquet(str(data / f"{info.name.table}.parquet")).createOrReplaceTempView(plan.view(alias))
    result = spark.sql(plan.spark_sql).toArrow()
    out = pipeline.spec.outputs["enriched"].path
    pipeline.delta.replace_partitions(
        out, result, key=plan.key, partition_cols=plan.partition_cols, partitions=None,
        cut={"shop": Cut(1, 1)}, batch=batch, app_id="bench:full",
    )  # fmt: skip
    return time.monotonic() - started


def rebuild(pipeline: Pipeline, batch: int) -> float:
    """The second baseline: txjoin's own full recompute from the replicas (what a
    rebuild does, and what each batch would cost without incremental maintenance)."""
    from txjoin.join.propagate import closure

    plan = pipeline.plans["enriched"]
    started = time.monotonic()
    result = pipeline.join.engine.run(plan, closure(plan, pipeline.store, None))
    pipeline.delta.replace_partitions(
        pipeline.spec.outputs["enriched"].path, result, key=plan.key, partition_cols=plan.partition_cols,
        partitions=None, cut={"shop": Cut(1, 1)}, batch=batch, app_id="bench:rebuild",
    )  # fmt: skip
    return time.monotonic() - started


def run_size(
    spark: Any, n: int, pattern: str, batches: int, root: Path, tx_per_batch: int = TX_PER_BATCH
) -> dict[str, Any]:
    state = root / f"{pattern}-{n}"
    spec = build_spec(
        {
            "name": f"bench{n}",
            "state_dir": str(state),
            "sources": {"shop": {"dsn": "host=unused", "tables": ["public.orders", "public.clients"]}},
            "outputs": {"enriched": {"key": ["order_id"], "sql": SQL}},
        },
        root,
        "bench spec",
    )
    pipeline = Pipeline(spec, spark, tables=tables())
    t0 = time.monotonic()
    load(pipeline, n, state / "parquet")
    loaded = time.monotonic() - t0
    rebuilt = [rebuild(pipeline, 0)]
    full = [full_recompute(pipeline, spark, state / "parquet", 0) for _ in range(3)]
    work = Workload(n, pattern, tx_per_batch=tx_per_batch)
    per_batch: list[float] = []
    stages: dict[str, list[float]] = {}
    for b in range(1, batches + 1):
        df = work.batch()
        started = time.monotonic()
        pipeline.process_batch(df, b)
        took = time.monotonic() - started
        if b > 2:  # the first batches warm Spark's plan caches up
            per_batch.append(took)
            for k, v in pipeline.history[-1].timings.items():
                stages.setdefault(k, []).append(v)
    files = len(list(spec.outputs["enriched"].path.glob("*.parquet")))
    pipeline.close()
    shutil.rmtree(state, ignore_errors=True)
    return {
        "n": n,
        "pattern": pattern,
        "load_s": loaded,
        "full": Stat(full),
        "rebuild": Stat(rebuilt),
        "batch": Stat(per_batch),
        "stages": {k: statistics.median(v) for k, v in stages.items()},
        "files": files,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--patterns", default="recent,uniform")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--tx-per-batch", type=int, default=TX_PER_BATCH, help="1: a pipeline at low load")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    figures: dict[str, Any] = {}
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"machine: {machine()}; {args.tx_per_batch} transactions per batch; "
        f"median of batches 3..{args.batches}"
    )
    with bench_spark("txjoin-bench-join", "txjoin-bench-join-", cores=2, driver_memory="6g") as (spark, root):
        for pattern in args.patterns.split(","):
            results = [run_size(spark, n, pattern, args.batches, root, args.tx_per_batch) for n in sizes]
            figures[pattern] = [
                {
                    "rows": r["n"],
                    "batch_s": r["batch"].values,
                    "full_s": r["full"].values,
                    "rebuild_s": r["rebuild"].values,
                    "stages_s": r["stages"],
                }
                for r in results
            ]
            base = results[0]["batch"].median
            print(f"\n== {pattern} changes ==")
            print(f"{'rows':>9} | {'incremental s/batch':>36} | {'x vs ' + str(sizes[0]):>10} | "
                  f"{'full recompute, Spark on Parquet':>36} | {'ratio':>6} | "
                  f"{'rebuild from replicas':>22} | {'ratio':>6} | stages of a batch (s)")  # fmt: skip
            for r in results:
                stages = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["stages"].items()))
                inc = r["batch"].median
                print(
                    f"{r['n']:>9,} | {r['batch'].fmt(' s', 3):>36} | {inc / base:>10.2f} | "
                    f"{r['full'].fmt(' s', 3):>36} | {r['full'].median / inc:>6.1f} | "
                    f"{r['rebuild'].median:>20.2f} s | {r['rebuild'].median / inc:>6.1f} | "
                    f"{stages}; output files {r['files']}, load {r['load_s']:.0f} s"
                )
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
