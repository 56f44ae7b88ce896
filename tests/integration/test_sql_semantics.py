"""PostgreSQL's answer or a refusal, end to end: partitioned tables through the
partition root (and thousands of their two-column keys in one transaction),
and sources txjoin refuses before capture starts (replica identity on another
index, row-filtered publications, inheritance children).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from tests.support.pg import en_us_database
from txjoin.errors import SourceError, UnsupportedQuery
from txjoin.join.planned import plan_outputs
from txjoin.pg import admin
from txjoin.pg.catalog import describe
from txjoin.pg.names import QualifiedName, parse_table_name
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows

pytestmark = [pytest.mark.postgres]




PARTITIONED = """
CREATE TABLE regions (code text PRIMARY KEY, name text);
CREATE TABLE events (id int, region text, amount int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('EU');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('US');
CREATE TABLE events_other PARTITION OF events DEFAULT;
INSERT INTO regions VALUES ('EU', 'Europe'), ('US', 'United States'), ('AP', 'Asia');
INSERT INTO events SELECT g, (ARRAY['EU','US','AP'])[1 + g % 3], g FROM generate_series(1, 30) g;
"""
SQL = (
    "SELECT r.code, r.name, count(e.id) AS n, sum(e.amount) AS total "
    "FROM regions r LEFT JOIN events e ON e.region = r.code GROUP BY r.code, r.name"
)


def _events_spec(dsn: str, tmp_path: Path, output: str, key: list[str], sql: str) -> Any:
    """A pipeline's spec reading PARTITIONED's two tables into one output."""
    return build_spec(
        {
            "name": "parts",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": dsn, "tables": ["public.regions", "public.events"]}},
            "outputs": {output: {"key": key, "sql": sql}},
        },
        tmp_path,
        "partition spec",
    )


@pytest.mark.spark
def test_partitioned_table_changes_arrive_through_the_root(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, PARTITIONED)
    spec = _events_spec(pg_db, tmp_path, "by_region", ["code"], SQL)
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            out = spec.outputs["by_region"].path
            cols = ("code", "name", "n", "total")
            first = DeltaRsStore().read(out).to_pylist()
            assert not (diff := compare_rows(first, query(pg_db, SQL), cols)), diff.describe()
            xids = {
                commit(pg_db, "INSERT INTO events VALUES (100, 'EU', 1000), (101, 'AP', 5)"),
                # Moves a row to another partition: a delete and an insert under the root.
                commit(pg_db, "UPDATE events SET region = 'US', amount = amount + 1 WHERE id IN (3, 6)"),
                commit(
                    pg_db, "DELETE FROM events WHERE id % 4 = 0", "UPDATE events SET amount = 0 WHERE id = 1"
                ),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            got = DeltaRsStore().read(out).to_pylist()
            expected = query(pg_db, SQL)
            assert not (diff := compare_rows(got, expected, cols)), diff.describe()
            assert {r["code"]: r["total"] for r in got}["EU"] != {r["code"]: r["total"] for r in first}["EU"]
        finally:
            pipeline.close()


ROWS_SQL = "SELECT e.id, e.region, e.amount, r.name FROM events e JOIN regions r ON r.code = e.region"


@pytest.mark.spark
def test_thousands_of_keys_of_two_columns_in_one_transaction(spark: Any, pg_db: str, tmp_path: Path) -> None:
    """Past 4,000 terms a batch's keys (id, region) have no overwrite predicate: the sink rewrites a
    range of one column and keeps the rows of keys it does not replace, here (id, 'EU') beside (id, 'US')
    after a move, and the same ids in other regions."""
    execute(pg_db, PARTITIONED.replace("generate_series(1, 30)", "generate_series(1, 12000)"))
    execute(pg_db, "INSERT INTO events SELECT g, 'US', -g FROM generate_series(1, 12000, 7) g WHERE g % 3 <> 1")
    spec = _events_spec(pg_db, tmp_path, "rows", ["id", "region"], ROWS_SQL)
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            xid = commit(
                pg_db,
                "UPDATE events SET amount = amount + 1 WHERE id % 2 = 0 AND region <> 'US'",  # about 4,000 keys
                "DELETE FROM events WHERE id % 5 = 0 AND region = 'US'",
                "UPDATE events SET region = 'AP' WHERE id % 11 = 1 AND region = 'EU'",  # moves: two keys each
            )
            wait_for_xids(spec.changelog, "s", {xid}, ct)
            pipeline.run_available()
            got = DeltaRsStore().read(spec.outputs["rows"].path).to_pylist()
            expected = query(pg_db, ROWS_SQL)
            assert len(expected) > 12_000
            assert not (diff := compare_rows(got, expected, ("id", "region", "amount", "name"))), diff.describe()
        finally:
            pipeline.close()


def _check(dsn: str, tables: list[str], publication: str = "") -> None:
    conn = psycopg2.connect(dsn)
    try:
        names = [parse_table_name(t) for t in tables]
        admin.check_tables(conn, names, "test")
        if publication:
            admin.ensure_publication(conn, publication, names, "test")
    finally:
        conn.close()


def test_replica_identity_on_another_index_is_refused(pg_db: str) -> None:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL UNIQUE, v int);"
        "CREATE TABLE ok (id int PRIMARY KEY, v int);"
        "ALTER TABLE t REPLICA IDENTITY USING INDEX t_code_key;"
        "ALTER TABLE ok REPLICA IDENTITY USING INDEX ok_pkey",
    )
    _check(pg_db, ["public.ok"])  # the primary key's own index names rows as txjoin does
    with pytest.raises(
        SourceError, match=r"USING INDEX on \(code\), not its primary key \(id\).*REPLICA IDENTITY FULL"
    ):
        _check(pg_db, ["public.t"])


def test_row_filtered_publication_is_refused(pg_db: str) -> None:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int);"
        "CREATE PUBLICATION filtered FOR TABLE t WHERE (v > 0);"
        "CREATE PUBLICATION narrow FOR TABLE t (id)",
    )
    with pytest.raises(SourceError, match=r"publishes public\.t with a row filter"):
        _check(pg_db, ["public.t"], "filtered")
    with pytest.raises(SourceError, match=r"publishes public\.t with a column list"):
        _check(pg_db, ["public.t"], "narrow")


def test_partitions_published_through_leaves_are_refused(pg_db: str) -> None:
    execute(
        pg_db,
        "CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id);"
        "CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100);"
        "CREATE PUBLICATION leaves FOR TABLE p",
    )
    with pytest.raises(SourceError, match=r"publish_via_partition_root = true"):
        _check(pg_db, ["public.p"], "leaves")
    _check(pg_db, ["public.p"], "txjoin_new")  # txjoin's own publication goes via the root
    rows = query(pg_db, "SELECT pubviaroot FROM pg_publication WHERE pubname = 'txjoin_new'")
    assert rows == [{"pubviaroot": True}]


def test_inheritance_children_are_refused(pg_db: str) -> None:
    execute(
        pg_db,
        "CREATE TABLE parent (id int PRIMARY KEY, v int);CREATE TABLE child (extra int) INHERITS (parent);",
    )
    with pytest.raises(SourceError, match=r"inheritance children \(child\)"):
        _check(pg_db, ["public.parent"])


ICU_SCHEMA = """
CREATE TYPE size AS ENUM ('small', 'medium', 'large');
CREATE TABLE products (id int PRIMARY KEY, name text, price numeric(10,2), size size);
INSERT INTO products VALUES
  (1, 'ant', 4.18, 'small'), (2, 'Eve', 1.19, 'large'), (3, 'Zebra', 10.00, 'medium'),
  (4, 'émile', 3.33, 'large'), (5, 'bob', NULL, 'small');
"""
ICU_SQL = (
    "SELECT p.size, count(*) AS n, round(avg(p.price), 4) AS avg_price, "
    'round(sum(p.price) / count(*), 6) AS mean, max(p.name COLLATE "C") AS last_name, '
    "(max(p.price) / 3)::numeric(12,5) AS third "
    "FROM products p GROUP BY p.size"
)


@pytest.mark.spark
def test_numbers_enums_and_collated_text_end_to_end(spark: Any, pg_server: Any, tmp_path: Path) -> None:
    """On an en-US ICU database: numeric quotients at PostgreSQL's scale, an enum
    key, text ordered by COLLATE "C"; ordering under en-US itself is refused."""
    name = "semantics_icu"
    dsn = en_us_database(pg_server, name)
    try:
        execute(dsn, ICU_SCHEMA)
        raw = {
            "name": "icu",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": dsn, "tables": ["public.products"]}},
            "outputs": {"by_size": {"key": ["size"], "sql": ICU_SQL}},
        }
        refused = dict(
            raw,
            outputs={
                "bad": {
                    "key": ["size"],
                    "sql": "SELECT p.size, max(p.name) AS m FROM products p GROUP BY p.size",
                }
            },
        )
        spec = build_spec(refused, tmp_path, "refused spec")
        with pytest.raises(
            UnsupportedQuery, match=r"ordering text under the collation 'en-US'.*COLLATE \"C\""
        ):
            plan_outputs(spec)
        spec = build_spec(raw, tmp_path, "icu spec")
        config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
        cols = ("size", "n", "avg_price", "mean", "last_name", "third")
        with running_capture(config) as ct:
            pipeline = Pipeline(spec, spark)
            try:
                pipeline.run_available()
                out = spec.outputs["by_size"].path
                first = DeltaRsStore().read(out).to_pylist()
                assert not (diff := compare_rows(first, query(dsn, ICU_SQL), cols)), diff.describe()
                xids = {
                    commit(
                        dsn,
                        "INSERT INTO products VALUES (6, 'Ant', 0.01, 'medium'), (7, 'ÿ', 99999.99, 'small')",
                    ),
                    commit(dsn, "UPDATE products SET price = price * 3, size = 'large' WHERE id IN (1, 3)"),
                    commit(dsn, "DELETE FROM products WHERE id = 2"),
                }
                wait_for_xids(spec.changelog, "s", xids, ct)
                pipeline.run_available()
                got = DeltaRsStore().read(out).to_pylist()
                expected = query(dsn, ICU_SQL)
                assert not (diff := compare_rows(got, expected, cols)), diff.describe()
                # Exactly, not within compare_rows' tolerance: PostgreSQL's digits.
                exact = {r["size"]: (r["avg_price"], r["mean"], r["third"]) for r in expected}
                assert {r["size"]: (r["avg_price"], r["mean"], r["third"]) for r in got} == exact
            finally:
                pipeline.close()
    finally:
        admin.drop_database(pg_server.dsn(), name)


DOMAIN_SQL = "SELECT a.owner, max(a.amount) AS top, sum(a.amount) AS total, count(*) AS n FROM accounts a GROUP BY a.owner"


@pytest.mark.spark
def test_domain_columns_are_their_base_type(spark: Any, pg_db: str, tmp_path: Path) -> None:
    """A domain over bigint compares and sums as bigint, in the snapshot and
    in streamed changes (pgoutput names the domain's type; capture resolves it)."""
    execute(
        pg_db,
        "CREATE DOMAIN cents AS bigint CHECK (VALUE >= 0);"
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text, amount cents);"
        "INSERT INTO accounts VALUES (1, 'a', 5), (2, 'a', 1001), (3, 'b', 20), (4, 'b', NULL)",
    )
    spec = build_spec(
        {
            "name": "domains",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": pg_db, "tables": ["public.accounts"]}},
            "outputs": {"by_owner": {"key": ["owner"], "sql": DOMAIN_SQL}},
        },
        tmp_path,
        "domain spec",
    )
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    cols = ("owner", "top", "total", "n")
    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            out = spec.outputs["by_owner"].path
            first = {r["owner"]: r["top"] for r in DeltaRsStore().read(out).to_pylist()}
            assert first == {"a": 1001, "b": 20}  # as text, '5' > '1001'
            xids = {
                commit(pg_db, "INSERT INTO accounts VALUES (5, 'b', 300), (6, 'a', 99)"),
                commit(pg_db, "UPDATE accounts SET amount = 7 WHERE id = 2"),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            got = DeltaRsStore().read(out).to_pylist()
            assert not (diff := compare_rows(got, query(pg_db, DOMAIN_SQL), cols)), diff.describe()
            assert {r["owner"]: r["top"] for r in got} == {"a": 99, "b": 300}
        finally:
            pipeline.close()


@pytest.mark.spark
def test_case_mapping_follows_a_c_database(spark: Any, pg_db: str) -> None:
    """Under the C collation PostgreSQL's lower/upper change ASCII letters only;
    Spark's would change 'É' too, so txjoin maps A-Z alone there."""
    from tests.property.test_conformance import _capture_rows, _txjoin

    words = ["Straße", "ÉCOLE", "İstanbul", "mIxEd", "ǅ", ""]
    execute(pg_db, "CREATE TABLE c (id int PRIMARY KEY, t text)")
    for i, w in enumerate(words):
        execute(pg_db, "INSERT INTO c VALUES (%s, %s)", (i, w))
    conn = psycopg2.connect(pg_db)
    try:
        table = describe(conn, [QualifiedName("public", "c")])[QualifiedName("public", "c")]
    finally:
        conn.close()
    assert table.column("t").collation == "C"
    sql = "SELECT id, lower(t) AS l, upper(t) AS u FROM c"
    got = _txjoin(spark, table, _capture_rows(pg_db, table), sql, ["id"])
    assert not isinstance(got, Exception), got
    expected = {r["id"]: (r["l"], r["u"]) for r in query(pg_db, sql)}
    assert {r["id"]: (r["l"], r["u"]) for r in got} == expected
    assert expected[1] == ("École", "ÉCOLE")  # only A-Z changed
