"""Teeth, measured: ``txjoin check`` must catch every deliberate fault.

Each fault of :data:`txjoin.faults.MUTATIONS` is switched on through
``TXJOIN_MUTATION`` in a ``txjoin check`` subprocess (so Spark's Python
workers see it too), on a spec whose SQL exercises what the fault breaks,
with the command's default settings except ``--no-shrink`` (shrinking only
makes the report smaller). The mutation score, caught / injected, is
printed; every fault must be caught. Run by ``make test-thorough``: nine
checks took 294 s on 2026-11-30.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import execute
from tests.support.pg import en_us_database
from tests.support.profiles import THOROUGH
from txjoin.faults import MUTATIONS
from txjoin.pg import admin

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not THOROUGH, reason="nine txjoin check runs: make test-thorough"),
]

SHOP = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text UNIQUE);
CREATE TABLE products (id int PRIMARY KEY, title text NOT NULL, price numeric(10,2) NOT NULL CHECK (price >= 0));
CREATE TABLE carts (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers(id) ON DELETE CASCADE);
CREATE TABLE cart_items (
  cart_id int REFERENCES carts(id) ON DELETE CASCADE, product_id int REFERENCES products(id) ON DELETE CASCADE,
  qty int NOT NULL CHECK (qty > 0), PRIMARY KEY (cart_id, product_id)
);
"""
SHOP_OUTPUT = """
[outputs.per_customer]
key = ["id"]
sql = \"\"\"
SELECT c.id, c.name, count(ci.product_id) AS items, sum(ci.qty * p.price) AS total
FROM customers c LEFT JOIN carts ca ON ca.customer_id = c.id
LEFT JOIN cart_items ci ON ci.cart_id = ca.id LEFT JOIN products p ON p.id = ci.product_id
GROUP BY c.id, c.name
\"\"\"
"""
TYPED = """
CREATE TYPE size AS ENUM ('small', 'medium', 'large');
CREATE TABLE shops (code text PRIMARY KEY, name text NOT NULL);
CREATE TABLE sales (
  id int, region text, shop text REFERENCES shops(code) ON DELETE CASCADE, size size, meta jsonb,
  PRIMARY KEY (id, region)
) PARTITION BY LIST (region);
CREATE TABLE sales_ab PARTITION OF sales FOR VALUES IN ('a', 'b');
CREATE TABLE sales_rest PARTITION OF sales DEFAULT;
"""
TYPED_OUTPUT = """
[outputs.per_shop]
key = ["code"]
sql = \"\"\"
SELECT s.code, count(x.id) AS n, max(x.size) AS biggest,
       json_agg(json_build_object('id', x.id, 'meta', x.meta) ORDER BY x.id, x.region COLLATE "C") AS items
FROM shops s LEFT JOIN sales x ON x.shop = s.code GROUP BY s.code
\"\"\"
"""
# Refused without the fault: ordering text under en-US.
COLLATED_OUTPUT = """
[outputs.names]
key = ["n"]
sql = "SELECT count(*) AS n, max(s.name) AS top, min(s.name) AS bottom FROM shops s"
"""

#: fault -> (schema, output) whose SQL exercises it.
TARGETS = {
    "no-before-images": ("shop", SHOP_OUTPUT),
    "early-release": ("shop", SHOP_OUTPUT),
    "numeric-scale": ("shop", SHOP_OUTPUT),
    "double-commit": ("shop", SHOP_OUTPUT),
    "offset-reader-skips": ("shop", SHOP_OUTPUT),  # only in the examples that read by offset
    "binary-collation": ("typed", COLLATED_OUTPUT),
    "enum-alphabetical": ("typed", TYPED_OUTPUT),
    "jsonb-as-text": ("typed", TYPED_OUTPUT),
    "partition-leaves": ("typed", TYPED_OUTPUT),
}


def test_every_deliberate_fault_is_caught(pg_server: Any, tmp_path: Path) -> None:
    assert set(TARGETS) == set(MUTATIONS), "every fault needs a spec that exercises it"
    dsns = {}
    for name, ddl, icu in (("shop", SHOP, False), ("typed", TYPED, True)):
        db = f"mutations_{name}"
        admin.drop_database(pg_server.dsn(), db)
        dsns[name] = en_us_database(pg_server, db) if icu else pg_server.create_database(db)
        execute(dsns[name], ddl)
    tables = {
        "shop": '["public.customers", "public.products", "public.carts", "public.cart_items"]',
        "typed": '["public.shops", "public.sales"]',
    }
    # The embedded PostgreSQL runs unprivileged when tests run as root: a searchable path.
    home = Path(tempfile.mkdtemp(prefix="txjoin-mutations-"))
    home.chmod(0o755)
    caught: dict[str, str] = {}
    try:
        for fault, (schema, output) in TARGETS.items():
            spec = tmp_path / f"{fault}.toml"
            spec.write_text(
                f'name = "m_{fault.replace("-", "_")}"\nstate_dir = "{tmp_path / "state" / fault}"\n'
                f'[sources.{schema}]\ndsn = "{dsns[schema]}"\ntables = {tables[schema]}\n{output}'
            )
            env = {**os.environ, "TXJOIN_MUTATION": fault}
            proc = subprocess.run(
                [sys.executable, "-m", "txjoin.cli", "check", str(spec), "--home", str(home), "--no-shrink"],
                capture_output=True, text=True, env=env, timeout=1800, check=False,
            )  # fmt: skip
            totals = [line for line in proc.stdout.splitlines() if " examples: " in line]
            verdict = "caught" if proc.returncode == 1 and "VIOLATION" in proc.stdout else "MISSED"
            caught[fault] = (
                f"{verdict}: exit {proc.returncode}; {totals[-1] if totals else proc.stderr[-300:]}"
            )
            print(f"{fault}: {caught[fault]}", flush=True)
    finally:
        subprocess.run(
            [sys.executable, "-m", "txjoin.cli", "db", "stop", "--data-dir", str(home / "check-pg")],
            capture_output=True, check=False,
        )  # fmt: skip
        for name in dsns:
            admin.drop_database(pg_server.dsn(), f"mutations_{name}")
        shutil.rmtree(home, ignore_errors=True)
    score = sum(v.startswith("caught") for v in caught.values())
    print(f"mutation score: {score}/{len(TARGETS)} = {100 * score / len(TARGETS):.0f}%")
    assert score == len(TARGETS), caught
