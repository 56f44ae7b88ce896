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

    .venv/bin/python -m bench.fixed_cost --txs 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
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
from txjoin.runner import CaptureThreads
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
    spark_conf = {"conf": conf} if conf else {}
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
        captures = CaptureThreads(spec)
        captures.start()
        batches: dict[int, BatchStats] = {}
        pipeline = Pipeline(spec, spark, on_batch=lambda b: batches.__setitem__(b.batch, b))
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
                while True:
                    pipeline.check()
                    last = delta.history(path)[-1]
                    if last.cut["s"].xid == xid:
                        break
                    time.sleep(0.01)
                visible = last.timestamp_ms / 1000 - committed
                while int(last.batch or -1) not in batches:  # its stats arrive once the batch returns
                    time.sleep(0.01)
                carried.append((int(last.batch or -1), visible, committed, last.timestamp_ms / 1000))
                written.append(_segment_written(spec.changelog / transaction_topic("s"), xid))
                time.sleep(gap)
            time.sleep(1)  # Spark posts a batch's progress once it has ended
            progress = _progress(pipeline.query)
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
    return {
        "txs": txs,
        "median": med,
        "p90_visible": sorted(r["visible"] for r in rows)[int(len(rows) * 0.9)],
        "trigger": changelog_input(spec).trigger(spec.options.trigger_interval),
    }


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
    write_figures(args.json, f)


if __name__ == "__main__":
    main()
