"""Seed 003's order join and seed 000's users/favorite-colour LEFT JOIN pass
the property check on their own schemas (issue [3 of 5], acceptance 3).

Both run through ``txjoin check``'s engine (:func:`txjoin.check.suite.check_spec`):
random rows and concurrent transactions generated from each schema's own
catalog and join plan, through real capture, Spark and Delta, with every
Delta version compared with the SQL on PostgreSQL at its cut.

Pizzeria semantics (../shared/fixtures/pizzeria/README.md): the join uses
``pizzas.id = ANY(orders.pizzas)``, so an order listing a pizza twice lists
it once, as PostgreSQL does; ``json_agg`` has no ORDER BY upstream, so its
elements compare as a multiset. ``orders`` gets the primary key it lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import execute
from tests.support.pg import drop_database
from tests.support.profiles import THOROUGH, examples
from txjoin.check.suite import check_spec
from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pizzeria"

PIZZERIA_SQL = """
select orders.id order_id, clients.name client_name, tables.name table_name,
       JSON_AGG(JSON_BUILD_OBJECT('pizza', pizzas.name, 'price', pizzas.price))
from orders
  join table_assignment on orders.table_assignment_id = table_assignment.id
  join pizzas on pizzas.id = ANY (orders.pizzas)
  join clients on table_assignment.client_id = clients.id
  join tables on table_assignment.table_id = tables.id
group by orders.id, clients.name, tables.name
"""

USERS_SQL = """
SELECT u.id, u.full_name, ufc.favorite_color
FROM users AS u
  LEFT JOIN users_favorite_color AS ufc
  ON u.id = ufc.user_id
"""
USERS_DDL = """
CREATE TABLE users (id bigserial PRIMARY KEY, full_name text);
CREATE TABLE users_favorite_color (id bigserial PRIMARY KEY, user_id bigint NOT NULL UNIQUE, favorite_color text);
"""


def _run(
    server: EmbeddedPostgres,
    spark: Any,
    tmp: Path,
    name: str,
    ddl: str,
    tables: list[str],
    sql: str,
    key: list[str],
) -> None:
    db = f"seed_{name}"
    drop_database(server, db)
    dsn = server.create_database(db)
    try:
        execute(dsn, ddl)
        spec = build_spec(
            {
                "name": name,
                "state_dir": str(tmp / "state"),
                "sources": {"src": {"dsn": dsn, "tables": tables}},
                "outputs": {"out": {"key": key, "sql": sql}},
            },
            tmp,
            f"{name} spec",
        )
        result = check_spec(
            spec,
            spark,
            admin_dsn=server.dsn(),
            examples=examples(ci=5, thorough=60),
            seed=None if THOROUGH else 3,  # make test: the same examples every run
        )
        assert result.ok, result.failure
        assert result.examples >= examples(ci=5, thorough=60)
        # Not vacuous: transactions committed, and outputs changed after their snapshot.
        assert result.committed > 0
        assert any(max(r.versions.values()) >= 2 for r in result.results)
    finally:
        drop_database(server, db)


@pytest.mark.slow(105)
def test_seed_003_order_join(pg_server: EmbeddedPostgres, spark: Any, tmp_path: Path) -> None:
    ddl = (FIXTURES / "load_dims.sql").read_text() + "\nALTER TABLE orders ADD PRIMARY KEY (id);"
    tables = ["public.tables", "public.pizzas", "public.clients", "public.table_assignment", "public.orders"]
    _run(pg_server, spark, tmp_path, "pizzeria", ddl, tables, PIZZERIA_SQL, ["order_id"])


@pytest.mark.slow(90)
def test_seed_000_users_favorite_color_left_join(
    pg_server: EmbeddedPostgres, spark: Any, tmp_path: Path
) -> None:
    tables = ["public.users", "public.users_favorite_color"]
    _run(pg_server, spark, tmp_path, "users", USERS_DDL, tables, USERS_SQL, ["id"])
