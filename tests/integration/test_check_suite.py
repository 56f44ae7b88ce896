"""``txjoin check`` on schemas it has not seen: generation that fits a
four-table schema with foreign keys and cascades (few constraint failures,
several Delta versions per example), and scratch copies that keep the
source's enums, domains, time and jsonb columns, partitioned tables and its
ICU en-US collation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import execute
from tests.support.pg import en_us_database
from tests.support.profiles import THOROUGH, examples
from txjoin.check.suite import check_spec
from txjoin.pg import admin
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SHOP = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text UNIQUE);
CREATE TABLE products (id int PRIMARY KEY, title text NOT NULL, price numeric(10,2) NOT NULL CHECK (price >= 0));
CREATE TABLE carts (
  id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers(id) ON DELETE CASCADE, opened date
);
CREATE TABLE cart_items (
  cart_id int REFERENCES carts(id) ON DELETE CASCADE,
  product_id int REFERENCES products(id) ON DELETE CASCADE,
  qty int NOT NULL CHECK (qty > 0),
  PRIMARY KEY (cart_id, product_id)
);
"""
SHOP_SQL = """
SELECT c.id, c.name, count(ci.product_id) AS items, sum(ci.qty * p.price) AS total
FROM customers c LEFT JOIN carts ca ON ca.customer_id = c.id
LEFT JOIN cart_items ci ON ci.cart_id = ca.id LEFT JOIN products p ON p.id = ci.product_id
GROUP BY c.id, c.name
"""


@pytest.mark.slow(65)
def test_generation_fits_a_four_table_schema(spark: Any, pg_server: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SHOP)
    tables = ["public.customers", "public.products", "public.carts", "public.cart_items"]
    spec = build_spec(
        {
            "name": "shop",
            "state_dir": str(tmp_path / "state"),
            "sources": {"shop": {"dsn": pg_db, "tables": tables}},
            "outputs": {"per_customer": {"key": ["id"], "sql": SHOP_SQL}},
        },
        tmp_path,
        "shop spec",
    )
    n = examples(ci=3, thorough=25)
    result = check_spec(spec, spark, admin_dsn=pg_server.dsn(), examples=n, seed=None if THOROUGH else 1)
    print(result.totals())
    assert result.ok, result.failure
    assert result.examples == n
    assert result.setups["shop"].ddl_origin == "pg_dump"
    # Acceptance: < 10% of transactions fail on a constraint; >= 5 versions per example.
    assert result.constraint_failures < 0.10 * result.transactions, result.totals()
    assert result.versions >= 5 * result.examples, result.totals()
    assert result.committed >= 5 * result.examples


TYPED = """
CREATE TYPE size AS ENUM ('small', 'medium', 'large');
CREATE DOMAIN cents AS bigint CHECK (VALUE >= 0);
CREATE TABLE shops (code text PRIMARY KEY, name text NOT NULL, opens time NOT NULL, tags int[]);
CREATE TABLE sales (
  id int, region text, shop text REFERENCES shops(code) ON DELETE CASCADE,
  size size, amount cents, meta jsonb, at timestamptz,
  PRIMARY KEY (id, region)
) PARTITION BY LIST (region);
CREATE TABLE sales_ab PARTITION OF sales FOR VALUES IN ('a', 'b');
CREATE TABLE sales_rest PARTITION OF sales DEFAULT;
"""
TYPED_SQL = """
SELECT s.code, s.name, s.opens, s.tags[1] AS first_tag, count(x.id) AS n, max(x.size) AS biggest,
       sum(x.amount) AS total, max(x.region COLLATE "C") AS last_region,
       json_agg(json_build_object('id', x.id, 'meta', x.meta, 'size', x.size::text) ORDER BY x.id, x.region COLLATE "C") AS items
FROM shops s LEFT JOIN sales x ON x.shop = s.code
GROUP BY s.code, s.name, s.opens, s.tags
"""
BY_TIME_SQL = 'SELECT s.opens, count(*) AS n, min(s.name COLLATE "C") AS first FROM shops s GROUP BY s.opens'


@pytest.mark.slow(55)
def test_check_keeps_the_sources_types_partitions_and_collation(
    spark: Any, pg_server: Any, tmp_path: Path
) -> None:
    name = "check_typed_icu"
    dsn = en_us_database(pg_server, name, timezone="America/New_York")
    try:
        execute(dsn, TYPED)
        spec = build_spec(
            {
                "name": "typed",
                "state_dir": str(tmp_path / "state"),
                "sources": {"s": {"dsn": dsn, "tables": ["public.shops", "public.sales"]}},
                "outputs": {
                    "per_shop": {"key": ["code"], "sql": TYPED_SQL},
                    "by_time": {"key": ["opens"], "sql": BY_TIME_SQL},
                },
            },
            tmp_path,
            "typed spec",
        )
        n = examples(ci=2, thorough=20)
        result = check_spec(spec, spark, admin_dsn=pg_server.dsn(), examples=n, seed=None if THOROUGH else 2)
        print(result.totals())
        assert result.ok, f"{result.failure}\n{result.failure_sql}"
        setup = result.setups["s"]
        assert (setup.provider, setup.icu_locale, setup.timezone) == ("icu", "en-US", "America/New_York")
        assert "ATTACH PARTITION public.sales_ab" in setup.ddl
        assert "CREATE TYPE public.size AS ENUM" in setup.ddl
        assert result.committed >= 4 * result.examples, result.totals()
        assert result.versions >= 5 * result.examples, result.totals()
    finally:
        admin.drop_database(pg_server.dsn(), name)
