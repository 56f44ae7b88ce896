"""The fixed cost of a micro-batch: one-row transactions, commit to Delta, split by stage (issue [7 of 7]).

An embedded PostgreSQL, capture and the Spark pipeline (one output: orders
joined with their clients) run as ``txjoin run`` runs them. After the
first versions, one-row transactions are committed one at a time, each
after the previous one is visible, so every micro-batch carries exactly one
transaction. Per transaction:

- *visible*: commit on PostgreSQL to the Delta commit holding it (the
  commit's timestamp in the Delta log);
- the micro-batch that carried it, from Spark's progress and txjoin's own
  stage timings: *capture* (commit to the changelog segment holding it),
  *trigger* (that segment to the trigger's start), *planning* (latestOffset, getBatch, queryPlanning,
  walCommit), *collect* (Spark runs read, decode and assembly and the rows
  reach the driver), *apply*, *fetch*, *recompute*, *commit* (Delta),
  *other* (the rest of the batch up to the Delta commit: py4j, callbacks) and
  *offsets* (commitOffsets, after the Delta commit).

The baseline, in the same Spark session right after: *Spark's floor*, the
same shape of micro-batch with none of txjoin's code. Spark's rate source
gives one row a second in one partition, an identity
``applyInPandasWithState`` (one group, one state partition, the session's
RocksDB store) passes it on, and ``foreachBatch`` collects it and runs one
join of two one-row Arrow views to Arrow, as a recompute does. Its trigger
start to the join's end is what Spark alone spends where txjoin's batch
spends trigger start to Delta commit.

    .venv/bin/python -m bench.fixed_cost --txs 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2

from bench.common import bench_postgres, bench_spark, machine, write_figures
from txjoin.debezium.topics import transaction_topic
from txjoin.decode import changelog_input
from txjoin.join.batch import BatchStats
from txjoin.pg import admin
from txjoin.pipeline import Pipeline
from txjoin.runner import CaptureProcesses
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec

SCHEMA = """
CREATE TABLE clients (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE orders (id int PRIMARY KEY, client_id int NOT NULL, amount numeric(10,2) NOT NULL);
INSERT INTO clients SELECT g, 'client ' || g FROM generate_series(1, 1000) g;
INSERT INTO orders SELECT g, 1 + g % 1000, g % 97 FROM generate_series(1, 10000) g;
"""
SQL = (
    "SELECT orders.id AS order_id, clients.name, orders.amount "
    "FROM orders JOIN clients ON clients.id = orders.client_id"
)
SPARK_STAGES = ("latestOffset", "getBatch", "queryPlanning", "walCommit")
#: txjoin's own timings of a batch (BatchStats) up to its Delta commit.
BATCH_STAGES = ("collect", "apply", "fetch", "recompute", "commit")
#: The split of commit to visible, in order (see the module docstring).
STAGES = (
    "capture", "trigger", "planning", "collect", "apply", "fetch", "recompute", "commit", "other", "offsets",
)  # fmt: skip
#: The split of Spark's floor (the baseline), in order.
FLOOR_STAGES = ("planning", "collect", "recompute", "other", "offsets")


def _progress(query: Any) -> dict[int, dict[str, float]]:
    out = {}
    for p in query.recentProgress:
        d = p["durationMs"]
        out[int(p["batchId"])] = {
            k: float(d.get(k, 0)) / 1000
            for k in (*SPARK_STAGES, "commitOffsets", "addBatch", "triggerExecution")
        }
        # When the trigger started (Spark's progress timestamp, UTC).
        started = dt.datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
        out[int(p["batchId"])]["started"] = started.timestamp()
    return out


def _segment_written(topic: Path, xid: int) -> float:
    """When capture wrote the segment that holds transaction ``xid``'s END (its mtime)."""
    for seg in sorted(topic.glob("*.jsonl"), reverse=True)[:8]:
        text = seg.read_text()
        if f'"id": "{xid}:' in text or f'"id":"{xid}:' in text:
            return seg.stat().st_mtime
    raise RuntimeError(f"no segment of {topic} holds transaction {xid}")


def run(txs: int, gap: float, trigger: str, conf: dict[str, str]) -> dict[str, Any]:
    # Both queries' progress is read at their end: keep all of it (Spark keeps 100 by default).
    keep = {"spark.sql.streaming.numRecentProgressUpdates": str(max(100, 2 * txs + 40))}
    spark_conf = {"conf": {**keep, **conf}}
    with (
        bench_postgres() as pg,
        bench_spark("txjoin-bench-fixed", "txjoin-bench-fixed-", **spark_conf) as (
            spark,
            home,
        ),
    ):
        dsn = admin.fresh_database(pg.dsn(), "fixed")
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute(SCHEMA)
        conn.commit()
        spec = build_spec(
            {
                "name": "fixed",
                "state_dir": str(home / "state"),
                "sources": {"s": {"dsn": dsn, "tables": ["public.clients", "public.orders"]}},
                "outputs": {"orders": {"key": ["order_id"], "sql": SQL}},
                "options": {"trigger_interval": trigger},
            },
            home,
            "fixed-cost bench",
        )
        every = changelog_input(spec).trigger(spec.options.trigger_interval)  # the pipeline's and the floor's
        captures = CaptureProcesses(spec)
        captures.start()
        batches: dict[int, BatchStats] = {}
        ended = threading.Event()

        def on_batch(b: BatchStats) -> None:
            batches[b.batch] = b
            ended.set()

        pipeline = Pipeline(spec, spark, on_batch=on_batch)
        delta = DeltaRsStore()
        path = spec.outputs["orders"].path
        rows: list[dict[str, float]] = []
        # (batch id, seconds from commit to visible, commit time, Delta commit time)
        carried: list[tuple[int, float, float, float]] = []
        written: list[float] = []  # when capture's segment holding each transaction's END appeared
        try:
            pipeline.start()
            while not delta.exists(path):
                pipeline.check()
                time.sleep(0.1)
            time.sleep(3)  # past the first batches' warm-up
            for i in range(txs):
                with conn.cursor() as cur:
                    cur.execute("SELECT txid_current() % 4294967296")
                    got = cur.fetchone()
                    assert got is not None
                    xid = int(got[0])
                    cur.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (1 + i,))
                conn.commit()
                committed = time.time()
                # The Delta log is read once per ended batch, not polled: reading its history
                # in a loop took a quarter of a core and the GIL from the pipeline it measures.
                while True:
                    if not ended.wait(1.0):
                        pipeline.check()
                        continue
                    ended.clear()
                    last = delta.history(path)[-1]
                    if last.cut["s"].xid == xid:
                        break
                visible = last.timestamp_ms / 1000 - committed
                if int(last.batch or -1) not in batches:
                    raise RuntimeError(f"Delta version {last.version} has no batch stats ({last.batch})")
                carried.append((int(last.batch or -1), visible, committed, last.timestamp_ms / 1000))
                written.append(_segment_written(spec.changelog / transaction_topic("s"), xid))
                time.sleep(gap)
            time.sleep(1)  # Spark posts a batch's progress once it has ended
            progress = _progress(pipeline.query)
            pipeline.stop()  # the floor runs in the same session, alone
            floor = spark_floor(spark, home, txs, every)
            for (batch_id, visible, committed_at, delta_at), seg_at in zip(carried, written, strict=True):
                b = batches[batch_id]
                spark_p = progress.get(batch_id, {})
                row = {"visible": visible, "batch": b.seconds}
                row.update({k: spark_p.get(k, 0.0) for k in SPARK_STAGES})
                row["planning"] = sum(row[k] for k in SPARK_STAGES)
                row["offsets"] = spark_p.get("commitOffsets", 0.0)
                for stage in BATCH_STAGES:
                    row[stage] = b.timings.get(stage, 0.0)
                started = spark_p.get("started", committed_at)
                # Before the trigger: capture's flush, then the wait for the trigger.
                row["capture"] = seg_at - committed_at
                row["trigger"] = started - seg_at
                # In the batch up to the Delta commit, outside the stages above (py4j, callbacks).
                row["other"] = (delta_at - started) - row["planning"] - sum(row[k] for k in BATCH_STAGES)
                rows.append(row)
        finally:
            pipeline.close()
            captures.stop()
            conn.close()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    # Trigger start to the Delta commit: what the floor's trigger start to its join's end compares with.
    med["in_spark"] = statistics.median(r["visible"] - r["capture"] - r["trigger"] for r in rows)
    return {
        "txs": txs,
        "median": med,
        "floor": floor,
        "p90_visible": sorted(r["visible"] for r in rows)[int(len(rows) * 0.9)],
        "trigger": every,
    }


def spark_floor(spark: Any, home: Path, batches: int, trigger: str, warmup: int = 5) -> dict[str, float]:
    """Medians over ``batches`` micro-batches of Spark's floor (module docstring), after ``warmup``."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from txjoin.assemble.spark import state_partitions

    def identity(key: Any, frames: Any, state: Any) -> Any:
        n = sum(len(f) for f in frames)
        state.update((n,))
        yield pd.DataFrame({"k": [str(key[0])], "n": [n]})

    left = pa.table({"id": [1], "client_id": [1], "amount": [1.5]})
    right = pa.table({"id": [1], "name": ["client 1"]})
    done: dict[int, dict[str, float]] = {}

    def each(df: Any, batch_id: int) -> None:
        t0 = time.monotonic()
        df.toPandas()
        t1 = time.monotonic()
        spark.createDataFrame(left).createOrReplaceTempView("floor_orders")
        spark.createDataFrame(right).createOrReplaceTempView("floor_clients")
        spark.sql(
            "SELECT o.id, c.name, o.amount FROM floor_orders o JOIN floor_clients c ON c.id = o.client_id"
        ).toArrow()
        done[batch_id] = {"collect": t1 - t0, "recompute": time.monotonic() - t1, "ended": time.time()}

    rows = spark.readStream.format("rate").option("rowsPerSecond", 1).option("numPartitions", 1).load()
    stream = (
        rows.withColumn("k", F.lit("s"))
        .groupBy("k")
        .applyInPandasWithState(identity, "k string, n long", "n long", "append", GroupStateTimeout.NoTimeout)
    )
    writer = stream.writeStream.foreachBatch(each).option(
        "checkpointLocation", str(home / "floor-checkpoint")
    )
    with state_partitions(spark, 1):
        query = writer.trigger(processingTime=trigger).start()
    try:
        deadline = time.monotonic() + 60 + 5 * (batches + warmup)
        while len(done) < batches + warmup + 1:
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Spark's floor query stopped after {len(done)} batches: {query.exception()}"
                )
            time.sleep(0.1)
        time.sleep(1)  # the last batch's progress
        progress = _progress(query)
    finally:
        query.stop()
    out: list[dict[str, float]] = []
    for batch_id in sorted(done)[warmup : warmup + batches]:
        p, d = progress[batch_id], done[batch_id]
        planning = sum(p[k] for k in SPARK_STAGES)
        to_end = d["ended"] - p["started"]
        out.append({
            "planning": planning, "collect": d["collect"], "recompute": d["recompute"],
            "other": to_end - planning - d["collect"] - d["recompute"], "offsets": p["commitOffsets"],
            "in_spark": to_end,
        })  # fmt: skip
    return {k: statistics.median(r[k] for r in out) for k in out[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--txs", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.5, help="seconds between a version and the next commit")
    ap.add_argument("--trigger", default="", help="[options] trigger_interval (default: txjoin's)")
    ap.add_argument("--conf", action="append", default=[], metavar="spark.K=V", help="a Spark setting")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    f = run(args.txs, args.gap, args.trigger, dict(c.split("=", 1) for c in args.conf))
    print(
        f"fixed cost per micro-batch ({machine()}): {args.txs} one-row transactions, one per batch, "
        f"trigger {f['trigger']}"
    )
    m = f["median"]
    print(f"  commit to visible: median {m['visible']:.2f} s, p90 {f['p90_visible']:.2f} s")
    print("  | stage | median s |")
    print("  |---|---|")
    for stage in STAGES:
        print(f"  | {stage} | {m[stage]:.3f} |")
    print("  planning: " + ", ".join(f"{k} {m[k]:.3f}" for k in SPARK_STAGES))
    fl = f["floor"]
    print(
        f"  trigger start to Delta commit: median {m['in_spark']:.3f} s; Spark's floor (same shape, "
        f"no txjoin code), trigger start to its join's end: {fl['in_spark']:.3f} s "
        f"({m['in_spark'] / fl['in_spark']:.2f}x); floor: "
        + ", ".join(f"{k} {fl[k]:.3f}" for k in FLOOR_STAGES)
    )
    write_figures(args.json, f)


if __name__ == "__main__":
    main()
