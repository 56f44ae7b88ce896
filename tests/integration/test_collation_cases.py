"""Text ordering and case mapping in SQL shapes where PostgreSQL's collation rules have
corners: an array's element, simple CASE, BETWEEN, FILTER, an aggregate's ORDER BY. Each
case is refused by the planner, or PostgreSQL's answer equals what txjoin's Spark SQL
computes, emulated on PostgreSQL: byte order is COLLATE "C"; case mapping is translate()
of A-Z where the translation uses TRANSLATE, Unicode's (lower/upper under en-US) where it
uses LOWER/UPPER. Needs PostgreSQL, not Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from tests.support.pg import en_us_database
from txjoin.errors import UnsupportedQuery
from txjoin.join.plan import plan_output
from txjoin.join.planned import table_info
from txjoin.pg import admin
from txjoin.pg.catalog import describe
from txjoin.pg.names import QualifiedName

pytestmark = [pytest.mark.postgres]

T = QualifiedName("public", "t")
DDL = {
    "en": """
        CREATE TYPE mood AS ENUM ('Open', 'closed', 'ÉTÉ');
        CREATE TABLE t (id int PRIMARY KEY, i int, t text, tc text COLLATE "C", e mood, j1 jsonb);
    """,
    "ci": """
        CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
        CREATE TABLE t (id int PRIMARY KEY, i int, name text COLLATE ci);
    """,
    "c": """
        CREATE TABLE t (id int PRIMARY KEY, i int, t text, tu text COLLATE "en-US-x-icu",
                        arrc text[] COLLATE "en-US-x-icu");
    """,
}
#: {lower(x)} in an emulation: txjoin's mapping of x, as its Spark SQL does it.
ASCII = "translate({x}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
UNICODE = 'lower(({x}) COLLATE "en-US-x-icu")'

# (database, case, output SQL, rows, txjoin's answer emulated on PostgreSQL)
CASES = [
    ("c", "an en-US array's element orders under en-US",
     "SELECT t.id FROM t WHERE t.arrc[1] < 'b'",
     "INSERT INTO t (id, arrc) VALUES (1, '{a}'), (2, '{B}')",
     "SELECT t.id FROM t WHERE t.arrc[1] COLLATE \"C\" < 'b'"),
    ("c", "lower() of an en-US array's element maps by Unicode",
     "SELECT t.id, lower(t.arrc[1]) AS l FROM t",
     "INSERT INTO t (id, arrc) VALUES (1, '{ÉTÉ}')",
     "SELECT t.id, {lower(t.arrc[1])} FROM t"),
    ("en", "CASE x WHEN: x does not collate the results",
     "SELECT t.i, max(CASE t.tc WHEN 'x' THEN 'a' ELSE 'B' END) AS m FROM t GROUP BY t.i",
     "INSERT INTO t (id, i, tc) VALUES (1, 1, 'x'), (2, 1, 'y')",
     "SELECT t.i, max(CASE t.tc WHEN 'x' THEN 'a' ELSE 'B' END COLLATE \"C\") FROM t GROUP BY t.i"),
    ("en", "lower() over CASE x WHEN",
     "SELECT t.id, lower(CASE t.tc WHEN 'x' THEN t.e::text END) AS l FROM t",
     "INSERT INTO t (id, tc, e) VALUES (1, 'x', 'ÉTÉ')",
     "SELECT t.id, {lower(CASE t.tc WHEN 'x' THEN t.e::text END)} FROM t"),
    ("en", "BETWEEN is two comparisons: a C column as one bound",
     "SELECT t.id FROM t WHERE (t.j1 ->> 'k') BETWEEN t.tc AND 'Z'",
     "INSERT INTO t (id, tc, j1) VALUES (1, 'A', '{\"k\": \"a\"}')",
     "SELECT t.id FROM t WHERE (t.j1 ->> 'k') COLLATE \"C\" BETWEEN t.tc AND 'Z'"),
    ("en", "BETWEEN is two comparisons: COLLATE on one bound",
     "SELECT t.id FROM t WHERE (t.j1 ->> 'k') BETWEEN 'a' AND 'z' COLLATE \"C\"",
     "INSERT INTO t (id, j1) VALUES (1, '{\"k\": \"B\"}')",
     "SELECT t.id FROM t WHERE (t.j1 ->> 'k') COLLATE \"C\" BETWEEN 'a' AND 'z'"),
    ("en", "BETWEEN with a NULL bound",
     "SELECT t.id, (t.t BETWEEN NULL AND 'M') AS b FROM t",
     "INSERT INTO t (id, t) VALUES (1, 'a')",
     "SELECT t.id, (t.t COLLATE \"C\" BETWEEN NULL AND 'M') FROM t"),
    ("en", "an aggregate with FILTER compared with a constant",
     "SELECT t.i, (string_agg(t.t, ',' ORDER BY t.id) FILTER (WHERE t.id > 0) < 'b') AS m FROM t GROUP BY t.i",
     "INSERT INTO t (id, i, t) VALUES (1, 1, 'B')",
     "SELECT t.i, (string_agg(t.t, ',' ORDER BY t.id) FILTER (WHERE t.id > 0) COLLATE \"C\" < 'b') "
     "FROM t GROUP BY t.i"),
    ("c", "an aggregate with FILTER compared with an en-US column",
     "SELECT t.tu, (max(t.t) FILTER (WHERE t.id > 0) < t.tu) AS b FROM t GROUP BY t.tu",
     "INSERT INTO t (id, t, tu) VALUES (1, 'a', 'B')",
     "SELECT t.tu, (max(t.t) FILTER (WHERE t.id > 0) < t.tu COLLATE \"C\") FROM t GROUP BY t.tu"),
    ("en", "an aggregate's ORDER BY key does not collate its result",
     "SELECT t.i, lower(string_agg(t.e::text, ',' ORDER BY t.tc)) AS l FROM t GROUP BY t.i",
     "INSERT INTO t (id, i, tc, e) VALUES (1, 1, 'x', 'ÉTÉ')",
     "SELECT t.i, {lower(string_agg(t.e::text, ',' ORDER BY t.tc))} FROM t GROUP BY t.i"),
    ("ci", "= under a nondeterministic collation takes 'ABC' for 'abc'",
     "SELECT t.id FROM t WHERE t.name = 'abc'",
     "INSERT INTO t (id, name) VALUES (1, 'ABC')",
     "SELECT t.id FROM t WHERE t.name COLLATE \"C\" = 'abc'"),
    ("ci", "GROUP BY under a nondeterministic collation",
     "SELECT t.i, count(DISTINCT t.name) AS n FROM t GROUP BY t.i",
     "INSERT INTO t (id, i, name) VALUES (1, 1, 'ABC'), (2, 1, 'abc')",
     "SELECT t.i, count(DISTINCT t.name COLLATE \"C\") FROM t GROUP BY t.i"),
    ("ci", "COLLATE \"C\" over a nondeterministic column compares bytes",
     "SELECT t.id, t.name COLLATE \"C\" AS name FROM t WHERE t.name COLLATE \"C\" = 'abc'",
     "INSERT INTO t (id, name) VALUES (1, 'ABC'), (2, 'abc')",
     "SELECT t.id, t.name COLLATE \"C\" FROM t WHERE t.name COLLATE \"C\" = 'abc'"),
]  # fmt: skip


@pytest.fixture(scope="module")
def databases(pg_server: Any) -> Iterator[dict[str, tuple[Any, Any]]]:
    out: dict[str, tuple[Any, Any]] = {}
    try:
        for kind, ddl in DDL.items():
            name = f"collation_cases_{kind}"
            if kind in ("en", "ci"):
                dsn = en_us_database(pg_server, name)
            else:
                admin.drop_database(pg_server.dsn(), name)
                dsn = pg_server.create_database(name)  # the server's databases are C
            conn = psycopg2.connect(dsn)
            with conn.cursor() as cur:
                cur.execute(ddl)
            conn.commit()
            out[kind] = (conn, table_info(describe(conn, [T])[T]))
            conn.rollback()
        yield out
    finally:
        for kind, (conn, _) in out.items():
            conn.close()
            admin.drop_database(pg_server.dsn(), f"collation_cases_{kind}")


def _emulate(template: str, spark_sql: str) -> str:
    """``{lower(x)}`` in ``template`` as txjoin's translation maps it."""
    mapping = ASCII if "TRANSLATE(" in spark_sql else UNICODE
    start = template.find("{lower(")
    if start < 0:
        return template
    end = template.rindex(")}")
    return template[:start] + mapping.format(x=template[start + 7 : end]) + template[end + 2 :]


@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_accepted_text_semantics_are_postgresqls(databases: dict[str, tuple[Any, Any]], case: Any) -> None:
    kind, _, sql, rows, emulation = case
    conn, info = databases[kind]
    key = ("i",) if "GROUP BY t.i" in sql else ("tu",) if "GROUP BY t.tu" in sql else ("id",)
    try:
        plan = plan_output("o", sql, key, {T: info})
    except UnsupportedQuery:
        return  # refused before anything runs
    with conn.cursor() as cur:
        cur.execute("TRUNCATE t")
        cur.execute(rows)
        cur.execute(sql)
        postgresql = sorted(cur.fetchall(), key=repr)
        cur.execute(_emulate(emulation, plan.spark_sql))
        txjoin = sorted(cur.fetchall(), key=repr)
    conn.rollback()
    assert postgresql == txjoin, f"accepted {sql}: PostgreSQL {postgresql}, txjoin {txjoin}"


def test_a_nondeterministic_collation_is_refused_with_its_remedy(databases: dict[str, tuple[Any, Any]]) -> None:
    _, info = databases["ci"]
    assert info.collations["name"] == "nondeterministic und-u-ks-level2"
    with pytest.raises(UnsupportedQuery) as refused:
        plan_output("o", "SELECT t.id, t.name FROM t", ("id",), {T: info})
    message = str(refused.value)
    assert "whose collation is nondeterministic und-u-ks-level2" in message
    assert 'write `t.name COLLATE "C"`' in message
    plan_output("o", 'SELECT t.id, (t.name) COLLATE "C" AS name FROM t', ("id",), {T: info})
