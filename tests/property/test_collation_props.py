"""Whatever text ordering the planner accepts, PostgreSQL orders by code points, as Spark does.

Generated comparisons of text expressions (columns under en-US and C, string constants, casts
of enums and integers to text, ``->>``, ``||``, ``COLLATE "C"``) over generated rows, in an
en-US and in a C database. Where the planner accepts ``WHERE a < b``, PostgreSQL's answer must
equal the comparison of a's and b's text by code point (Spark's byte order for UTF-8); where
they differ, the planner must have refused. Needs PostgreSQL, not Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tests.support.pg import en_us_database
from tests.support.profiles import examples
from txjoin.errors import UnsupportedQuery
from txjoin.join.plan import plan_output
from txjoin.join.planned import table_info
from txjoin.pg import admin
from txjoin.pg.catalog import describe
from txjoin.pg.names import QualifiedName

pytestmark = [pytest.mark.postgres]

T = QualifiedName("public", "t")
DDL = """
CREATE TYPE mood AS ENUM ('Open', 'closed', 'ÉTÉ', 'a b');
CREATE TABLE t (id int PRIMARY KEY, t text, tc text COLLATE "C", e mood, n int, jb jsonb);
"""
# Case, accents, punctuation and digits: where en-US and code point order part.
_TEXT = st.text(st.sampled_from("aAbBzZéÉ_- 1"), max_size=3)
ROW = st.fixed_dictionaries(
    {
        "t": st.none() | _TEXT,
        "tc": st.none() | _TEXT,
        "e": st.none() | st.sampled_from(["Open", "closed", "ÉTÉ", "a b"]),
        "n": st.none() | st.integers(-20, 20),
        "k": st.none() | _TEXT,
    }
)


def _leaf() -> st.SearchStrategy[str]:
    literal = _TEXT.map(lambda s: "'" + s.replace("'", "''") + "'")
    columns = st.sampled_from(["t.t", "t.tc", "t.e::text", "t.n::text", "(t.jb ->> 'k')"])
    # One leaf in ten COLLATE "C": an explicit collation anywhere decides the whole comparison.
    return st.tuples(columns | literal, st.integers(0, 9)).map(
        lambda p: f'({p[0]} COLLATE "C")' if p[1] == 0 else p[0]
    )


EXPR = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]} || {p[1]})"),
        st.tuples(st.sampled_from(["coalesce", "nullif"]), inner, inner).map(lambda p: f"{p[0]}({p[1]}, {p[2]})"),
        st.tuples(inner, inner).map(lambda p: f"(CASE WHEN t.n > 0 THEN {p[0]} ELSE {p[1]} END)"),
        st.tuples(st.sampled_from(["lower({})", "upper({})", "substring({}, 1, 2)", "left({}, 2)"]), inner).map(
            lambda p: p[0].format(p[1])
        ),
    ),
    max_leaves=4,
)


@pytest.fixture(scope="module", params=["en_us", "c"])
def database(pg_server: Any, request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A database of each default collation, its table t, and the planner's view of t."""
    name = f"collation_props_{request.param}"
    if request.param == "en_us":
        dsn = en_us_database(pg_server, name)
    else:
        admin.drop_database(pg_server.dsn(), name)
        dsn = pg_server.create_database(name)  # the server's databases are C
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(DDL)
        conn.commit()
        info = table_info(describe(conn, [T])[T])
        conn.rollback()
        yield request.param, (conn, info)
    finally:
        conn.close()
        admin.drop_database(pg_server.dsn(), name)


@settings(max_examples=examples(ci=150, thorough=1500))
@given(left=EXPR, op=st.sampled_from(["<", "<=", ">", ">="]), right=EXPR, row=ROW)
# Accepted before 2026-11-30 in an en-US database and wrong there: an enum's text and a
# constant order under the database's default collation.
@example(left="t.e::text", op="<", right="'a'", row={"t": None, "tc": None, "e": "Open", "n": None, "k": None})
@example(left="'a'", op="<", right="'B'", row={"t": None, "tc": None, "e": None, "n": None, "k": None})
@example(left="(t.jb ->> 'k')", op=">", right="'a'", row={"t": None, "tc": None, "e": None, "n": None, "k": "B"})
def test_accepted_text_ordering_is_code_point_order(
    database: tuple[str, Any], left: str, op: str, right: str, row: dict[str, Any]
) -> None:
    kind, (conn, info) = database
    condition = f"{left} {op} {right}"
    refusal = ""
    try:
        plan_output("o", f"SELECT t.id FROM t WHERE {condition}", ("id",), {T: info})
    except UnsupportedQuery as e:
        refusal = str(e)
    event(f"{kind}: {'refused' if refusal else 'accepted'}")
    if refusal:
        assert kind == "en_us" or "collation" not in refusal, f"refused in a C database: {condition}: {refusal}"
        return
    got = _on_postgresql(conn, row, f"SELECT ({left})::text, ({right})::text, ({condition}) FROM t", condition)
    if got is None:
        return
    a, b, pg = got
    spark = None if a is None or b is None else {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    assert pg == spark, f"{condition} on {row} ({kind}): PostgreSQL {pg}, code point order {spark}"


def _on_postgresql(conn: Any, row: dict[str, Any], select: str, accepted: str) -> tuple[Any, ...] | None:
    """``select``'s one row over t holding ``row``; None where PostgreSQL raises for another
    reason than collations (unknown || unknown: other tests hold those rules)."""
    with conn.cursor() as cur:
        cur.execute("TRUNCATE t")
        jb = None if row["k"] is None else json.dumps({"k": row["k"]})
        cur.execute(
            "INSERT INTO t VALUES (1, %s, %s, %s, %s, %s)", (row["t"], row["tc"], row["e"], row["n"], jb)
        )
        error = ""
        try:
            cur.execute(select)
        except psycopg2.Error as e:
            error = str(e)
        result = None if error else tuple(cur.fetchone())
    conn.rollback()
    assert "collation" not in error, f"txjoin accepts {accepted}, PostgreSQL: {error}"
    return result


def _spark_case(value: str, function: str, spark_sql: str) -> str:
    """What txjoin's translation computes: A-Z only (TRANSLATE) or Unicode's mapping (Java's,
    which Python's matches over this alphabet)."""
    if "TRANSLATE(" in spark_sql:
        upper, lower = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
        table = str.maketrans(upper, lower) if function == "lower" else str.maketrans(lower, upper)
        return value.translate(table)
    return value.lower() if function == "lower" else value.upper()


@settings(max_examples=examples(ci=100, thorough=1000))
@given(
    function=st.sampled_from(["lower", "upper"]),
    inner=EXPR.filter(lambda x: "lower(" not in x and "upper(" not in x),
    row=ROW,
)
# Mapped A-Z only before 2026-11-30 in an en-US database, where PostgreSQL maps 'ÉTÉ' too.
@example(function="lower", inner="t.e::text", row={"t": None, "tc": None, "e": "ÉTÉ", "n": None, "k": None})
# t has the database's default collation, tc C: PostgreSQL maps as C (A-Z only).
@example(function="lower", inner="(t.t || t.tc)", row={"t": "É", "tc": "A", "e": None, "n": None, "k": None})
def test_accepted_case_mapping_is_postgresqls(
    database: tuple[str, Any], function: str, inner: str, row: dict[str, Any]
) -> None:
    kind, (conn, info) = database
    expression = f"{function}({inner})"
    try:
        plan = plan_output("o", f"SELECT t.id, {expression} AS v FROM t", ("id",), {T: info})
    except UnsupportedQuery:
        event(f"{kind}: refused")
        return
    event(f"{kind}: accepted")
    got = _on_postgresql(conn, row, f"SELECT ({inner})::text, {expression} FROM t", expression)
    if got is None:
        return
    value, pg = got
    spark = None if value is None else _spark_case(value, function, plan.spark_sql)
    assert pg == spark, f"{expression} on {row} ({kind}): PostgreSQL {pg!r}, txjoin {spark!r}"
