"""Seed 003's order join through capture, assembly, replicas and Delta: every
Delta version equals the SQL on PostgreSQL at its cut."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.support.capture import current_xid, execute, running_capture
from tests.support.oracle import Oracle, check_every_version, wait_until
from txjoin.changelog import ChangelogReader
from txjoin.pipeline import Pipeline
from txjoin.spec import build_spec
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pizzeria"
ORDERS_SQL = """
select orders.id order_id, clients.name client_name, tables.name table_name,
       JSON_AGG(JSON_BUILD_OBJECT('pizza', pizzas.name, 'price', pizzas.price))
from orders
  join table_assignment on orders.table_assignment_id = table_assignment.id
  join pizzas on pizzas.id = ANY (orders.pizzas)
  join clients on table_assignment.client_id = clients.id
  join tables on table_assignment.table_id = tables.id
group by orders.id, clients.name, tables.name
"""
TABLES = ["public.tables", "public.pizzas", "public.clients", "public.table_assignment", "public.orders"]


def _workload(dsn: str, oracle: Oracle, n: int, seed: int, pause: float = 0.05) -> list[int]:
    rng = random.Random(seed)
    conn = psycopg2.connect(dsn)
    xids = []
    next_order, next_client, next_ta = 100, 100, 100
    orders = [1, 2, 3, 4, 5]
    tas = [1, 2, 3, 4]
    for _ in range(n):
        with conn.cursor() as cur:
            xid = current_xid(cur)
            action = rng.choice(["order", "order", "edit", "move", "price", "newclient", "cancel"])
            if action == "order":
                cur.execute(
                    "INSERT INTO orders VALUES (%s, %s, now(), %s)",
                    (next_order, rng.choice(tas), [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]),
                )
                # The fast-change case of seed 003: edited right after being placed.
                cur.execute("UPDATE orders SET pizzas = %s WHERE id = %s", ([rng.randint(1, 4)], next_order))
                orders.append(next_order)
                next_order += 1
            elif action == "edit":
                cur.execute(
                    "UPDATE orders SET pizzas = pizzas || %s WHERE id = %s",
                    ([rng.randint(1, 4)], rng.choice(orders)),
                )
            elif action == "move":
                cur.execute(
                    "UPDATE table_assignment SET table_id = %s WHERE id = %s",
                    (rng.randint(1, 4), rng.choice(tas)),
                )
            elif action == "price":
                cur.execute(
                    "UPDATE pizzas SET price = price + %s WHERE id = %s",
                    (rng.choice([-1, 1, 2]), rng.randint(1, 4)),
                )
            elif action == "newclient":
                cur.execute("INSERT INTO clients VALUES (%s, %s)", (next_client, f"client {next_client}"))
                cur.execute(
                    "INSERT INTO table_assignment VALUES (%s, %s, %s, now(), null)",
                    (next_ta, next_client, rng.randint(1, 4)),
                )
                tas.append(next_ta)
                next_client += 1
                next_ta += 1
            else:
                cur.execute("DELETE FROM orders WHERE id = %s", (orders.pop(rng.randrange(len(orders))),))
        conn.commit()
        oracle.record(xid)  # before the next commit: the state at this commit
        xids.append(xid)
        time.sleep(rng.random() * pause * 2)
    conn.close()
    return xids


def test_every_delta_version_equals_the_order_join_on_postgresql(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, (FIXTURES / "load_dims.sql").read_text())
    execute(pg_db, "ALTER TABLE orders ADD PRIMARY KEY (id)")
    spec = build_spec(
        {
            "name": "pizzeria",
            "state_dir": str(tmp_path / "state"),
            "sources": {"shop": {"dsn": pg_db, "tables": TABLES}},
            "outputs": {"orders_enriched": {"key": ["order_id"], "sql": ORDERS_SQL}},
            "options": {"trigger_interval": "300 milliseconds"},
        },
        tmp_path,
        "test spec",
    )
    oracle = Oracle(pg_db, {"orders_enriched": ORDERS_SQL})
    with running_capture(spec.sources["shop"].capture_config(spec.changelog, roll_interval=0.05)) as ct:
        snapshot_xid = read_transactions(ChangelogReader(spec.changelog), "shop")[0].xid
        oracle.record(snapshot_xid)
        pipeline = Pipeline(spec, spark)
        pipeline.start()
        try:
            out = spec.outputs["orders_enriched"].path
            wait_until(
                lambda: (out / "_delta_log").exists(), 120, "the first output version", check=pipeline.check
            )
            xids = _workload(pg_db, oracle, 60, seed=3)
            last = xids[-1]
            wait_until(
                lambda: "shop" in pipeline.progress and pipeline.progress["shop"].xid == last,
                120,
                "the pipeline to catch up",
                check=lambda: _check_all(ct.check, pipeline.check),
            )
        finally:
            pipeline.stop()
    plan = pipeline.plans["orders_enriched"]
    versions = check_every_version(
        plan, spec.outputs["orders_enriched"].path, "shop", oracle.results["orders_enriched"]
    )
    assert versions >= 3
    final = check_final(pipeline, oracle)
    assert final > 5
    oracle.close()
    # One source, one group: the assembly's state has one partition, and the join stage's queries
    # keep the session's shuffle partitions.
    first = (spec.checkpoint / "offsets" / "0").read_text()
    assert '"spark.sql.shuffle.partitions":"1"' in first, first
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def _check_all(*checks: Any) -> None:
    for check in checks:
        check()


def check_final(pipeline: Pipeline, oracle: Oracle) -> int:
    from txjoin.sink.delta import DeltaRsStore
    from txjoin.verify.compare import compare_rows

    plan = pipeline.plans["orders_enriched"]
    got = DeltaRsStore().read(pipeline.spec.outputs["orders_enriched"].path).to_pylist()
    want = oracle.query("orders_enriched")
    diff = compare_rows(
        got, want, plan.columns, json_columns=plan.json_columns, unordered_columns=plan.unordered_columns
    )
    assert not diff, diff.describe()
    return len(got)
