"""Bad input is loud, never lossy (issue [3 of 5], acceptance 4).

A spec whose SQL names an uncaptured table or joins on a non-equality is
refused before anything runs; a schema change at the source that drops a
column an output joins on stops the query with an error naming the table,
the column and the transaction. In every case the output stays at its last
good version, and the changelog keeps the events for a later replay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.support.capture import current_xid, execute, running_capture, wait_for_xids
from txjoin.errors import SchemaChangeError, UnsupportedQuery
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import PipelineSpec, build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE clients (id int PRIMARY KEY, name text, region text);
CREATE TABLE orders (id int PRIMARY KEY, client_id int, amount int);
INSERT INTO clients VALUES (1, 'Ann', 'EU'), (2, 'Bob', 'US');
INSERT INTO orders VALUES (10, 1, 5), (11, 2, 7);
"""
GOOD_SQL = (
    "SELECT orders.id AS order_id, clients.name AS client, orders.amount "
    "FROM orders JOIN clients ON clients.id = orders.client_id"
)


def _spec(tmp: Path, dsn: str, sql: str) -> PipelineSpec:
    return build_spec(
        {
            "name": "bad",
            "state_dir": str(tmp / "state"),
            "sources": {"shop": {"dsn": dsn, "tables": ["public.clients", "public.orders"]}},
            "outputs": {"enriched": {"key": ["order_id"], "sql": sql}},
        },
        tmp,
        "test spec",
    )


def _commit(dsn: str, *statements: str) -> int:
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        xid = current_xid(cur)
        for s in statements:
            cur.execute(s)
    conn.commit()
    conn.close()
    return xid


def test_bad_specs_and_a_dropped_join_column_leave_the_output_at_its_last_good_version(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, SCHEMA + "CREATE TABLE secrets (id int PRIMARY KEY, v text);")
    spec = _spec(tmp_path, pg_db, GOOD_SQL)
    out = spec.outputs["enriched"].path
    delta = DeltaRsStore()
    with running_capture(spec.sources["shop"].capture_config(spec.changelog, roll_interval=0.02)) as ct:
        good = _commit(pg_db, "UPDATE orders SET amount = amount + 1 WHERE id = 10")
        wait_for_xids(spec.changelog, "shop", {good}, ct)
        pipeline = Pipeline(spec, spark)
        pipeline.run_available()
        pipeline.close()
        history = delta.history(out)
        assert history[-1].cut["shop"].xid == good
        rows = sorted(r["amount"] for r in delta.read(out).to_pylist())
        assert rows == [6, 7]

        # The spec changes to read a table capture does not have.
        bad = _spec(
            tmp_path,
            pg_db,
            GOOD_SQL.replace("FROM orders", "FROM orders JOIN secrets ON secrets.id = orders.id"),
        )
        with pytest.raises(UnsupportedQuery, match=r"reads table public\.secrets, which no source captures"):
            Pipeline(bad, spark)
        # ... or to join on something other than an equality.
        bad = _spec(
            tmp_path,
            pg_db,
            GOOD_SQL.replace("clients.id = orders.client_id", "clients.id < orders.client_id"),
        )
        with pytest.raises(UnsupportedQuery, match="not an equality"):
            Pipeline(bad, spark)
        assert delta.history(out) == history

        # The source drops the column the output reads, then writes.
        dropped = _commit(
            pg_db,
            "ALTER TABLE clients DROP COLUMN name",
            "UPDATE clients SET region = 'APAC' WHERE id = 1",
        )
        wait_for_xids(spec.changelog, "shop", {dropped}, ct)
        for _attempt in range(2):  # the changelog keeps the events: the same error on every restart
            pipeline = Pipeline(spec, spark, tables=pipeline.tables)
            with pytest.raises(SchemaChangeError) as err:
                pipeline.run_available()
            pipeline.close()
            message = str(err.value)
            assert "public.clients: column name (text) was dropped -> (none)" in message
            assert f"transaction {dropped}" in message
            assert "txjoin resync" in message
            assert delta.history(out) == history
        # A restart that reads the source's catalog anew plans over the replica's columns (the
        # changelog still holds changes written with them), and stops at the same change.
        pipeline = Pipeline(spec, spark)
        with pytest.raises(SchemaChangeError, match="column name"):
            pipeline.run_available()
        pipeline.close()
        assert delta.history(out) == history
        assert sorted(r["amount"] for r in delta.read(out).to_pylist()) == [6, 7]
