"""The initial load at size: a 200k-row table through the bulk path.

Capture writes the snapshot as Parquet (in chunks, over several connections);
the join stage loads it into the replicas in bulk and Spark computes the
first version as one job whose files are committed as the table's content.
The first version equals the SQL on PostgreSQL at the snapshot's cut, and
changes streamed on top keep every later version equal too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.changelog import ChangelogReader
from txjoin.changelog.snapshots import read_manifest
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

ORDERS = 200_000
CLIENTS = ORDERS // 20
SQL = (
    "SELECT o.id AS order_id, o.amount, o.note, o.created, c.name AS client, c.region "
    "FROM orders o JOIN clients c ON c.id = o.client_id"
)
COLUMNS = ("order_id", "amount", "note", "created", "client", "region")


@pytest.mark.slow(50)
def test_large_initial_load_then_streaming_stays_equal(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE clients (id int PRIMARY KEY, name text, region text);"
        "CREATE TABLE orders (id bigint PRIMARY KEY, client_id int, amount numeric(12,2), note text, "
        "created timestamptz);"
        f"INSERT INTO clients SELECT g, 'client ' || g, (ARRAY['EU','US','APAC'])[1 + g % 3] "
        f"FROM generate_series(1, {CLIENTS}) g;"
        f"INSERT INTO orders SELECT g, 1 + g % {CLIENTS}, (g % 100000) / 100.0, "
        "CASE WHEN g % 7 = 0 THEN NULL ELSE 'note, \"quoted\"' || g END, "
        f"timestamptz '2026-01-01' + g * interval '1.5 second' FROM generate_series(1, {ORDERS}) g;"
        "ANALYZE",
    )
    spec = build_spec(
        {
            "name": "load",
            "state_dir": str(tmp_path / "state"),
            "sources": {"shop": {"dsn": pg_db, "tables": ["public.orders", "public.clients"]}},
            "outputs": {"enriched": {"key": ["order_id"], "sql": SQL}},
            "options": {"output_file_bytes": 4 << 20},
        },
        tmp_path,
        "load spec",
    )
    # Small chunks, two workers: the table is read as many chunks in parallel.
    config = spec.sources["shop"].capture_config(spec.changelog, roll_interval=0.02, snapshot_chunk_mb=2)
    expected_first = query(pg_db, SQL)
    with running_capture(config) as ct:
        snapshot = read_transactions(ChangelogReader(spec.changelog), "shop")[0]
        assert snapshot.manifest is not None
        manifest = read_manifest(spec.changelog, snapshot.manifest)
        assert manifest.rows == {"public.orders": ORDERS, "public.clients": CLIENTS}
        assert len(manifest.files["public.orders"]) > 3, "the snapshot was not read in chunks"

        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            out = spec.outputs["enriched"].path
            delta = DeltaRsStore()
            history = delta.history(out)
            assert len(history) == 1
            first = history[0]
            assert first.cut["shop"].xid == snapshot.xid
            assert first.cut["shop"].lsn == snapshot.end_lsn
            # The bulk path: Spark wrote the first version's files (one job), committed as they are.
            assert any(p.name.startswith("txjoin-") for p in out.iterdir())
            assert pipeline.store.count(next(t for t in pipeline.tables if t.table == "orders")) == ORDERS
            got = delta.read(out, first.version).to_pylist()
            assert len(got) == ORDERS
            diff = compare_rows(got, expected_first, COLUMNS)
            assert not diff, diff.describe()

            # Streamed on top: updates reaching many rows, inserts, deletes.
            xids = {
                commit(pg_db, "UPDATE clients SET region = 'MARS' WHERE id % 97 = 0"),
                commit(
                    pg_db,
                    "UPDATE orders SET amount = amount + 1 WHERE id % 1000 = 3",
                    f"INSERT INTO orders VALUES ({ORDERS + 1}, 5, 12.50, 'new', '2026-02-01 10:00:00+00')",
                ),
                commit(pg_db, "DELETE FROM orders WHERE id % 5000 = 0", "DELETE FROM clients WHERE id = 7"),
            }
            wait_for_xids(spec.changelog, "shop", xids, ct)
            pipeline.run_available()
            last = delta.history(out)[-1]
            assert last.version > first.version
            got = delta.read(out).to_pylist()
            diff = compare_rows(got, query(pg_db, SQL), COLUMNS)
            assert not diff, diff.describe()
        finally:
            pipeline.close()
