"""Type-aware translation of output SQL: where PostgreSQL and Spark compute
different values for the same SQL, the planner rewrites or refuses it.

Each test asserts on the translated Spark SQL or on the planner's refusal;
none starts Spark or PostgreSQL. docs/types.md explains each rule.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from txjoin.errors import ProtocolError, UnsupportedQuery
from txjoin.join.engine import spark_arrow_type, to_arrow
from txjoin.join.plan import NUMERIC_SCALE, OutputPlan, TableInfo, plan_output
from txjoin.join.planned import table_info
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName as Q
from txjoin.pg.types import ColumnType

T_TYPES = {
    "id": "int4",
    "i": "int4",
    "j": "int4",
    "s": "int2",
    "b": "int8",
    "n": "numeric(10,2)",
    "wide": "numeric(20,14)",
    "u": "numeric",
    "f": "float8",
    "r": "float4",
    "t": "text",
    "v": "varchar",
    "c3": "bpchar(3)",
    "c5": "bpchar(5)",
    "ts": "timestamp",
    "tz": "timestamptz",
    "d": "date",
    "ia": "_int4",
    "ta": "_text",
    "j1": "jsonb",
    "iv": "interval",
}


def tables(types: bool = True) -> dict[Q, TableInfo]:
    out = {}
    for name in ("t", "o"):
        q = Q("public", name)
        out[q] = TableInfo(q, "s", tuple(T_TYPES), ("id",), types=dict(T_TYPES) if types else {})
    return out


def plan(sql: str, key: tuple[str, ...] = ("id",), *, types: bool = True) -> OutputPlan:
    return plan_output("out", sql, key, tables(types))


def spark(sql: str, key: tuple[str, ...] = ("id",), *, types: bool = True) -> str:
    return plan(sql, key, types=types).spark_sql


def refusal(sql: str, key: tuple[str, ...] = ("id",)) -> UnsupportedQuery:
    with pytest.raises(UnsupportedQuery) as err:
        plan(sql, key)
    return err.value


# -- 5. join keys of different types ---------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("n", "i"),  # numeric(10,2) = int4: "1.00" vs 1
        ("u", "i"),
        ("t", "c3"),  # text = char(3): 'ab' vs 'ab '
        ("c3", "c5"),  # char(3) = char(5): different padding
        ("ts", "tz"),
        ("n", "wide"),  # numeric(10,2) = numeric(20,14): "1.00" vs "1.00000000000000"
        ("f", "r"),
        ("t", "i"),
    ],
)
def test_join_between_columns_of_different_types_is_refused(left: str, right: str) -> None:
    err = refusal(f"SELECT t.id, o.id AS oid FROM t JOIN o ON t.{left} = o.{right}", ("id", "oid"))
    text = str(err)
    assert f"t.{left} (public.t.{left}: {T_TYPES[left]})" in text
    assert f"o.{right} (public.o.{right}: {T_TYPES[right]})" in text
    assert "different types" in text
    assert "same type at the source" in text


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("s", "b"),  # int2 = int8: the same JSON number
        ("i", "b"),
        ("t", "v"),  # text = varchar
        ("c3", "c3"),
        ("n", "n"),
        ("ts", "ts"),
    ],
)
def test_join_between_columns_written_alike_is_accepted(left: str, right: str) -> None:
    p = plan(f"SELECT t.id, o.id AS oid FROM t JOIN o ON t.{left} = o.{right}", ("id", "oid"))
    assert p.edges[0].left_col == left


def test_numeric_with_the_same_scale_joins() -> None:
    tabs = tables()
    q = Q("public", "o")
    tabs[q] = TableInfo(q, "s", tuple(T_TYPES), ("id",), types={**T_TYPES, "n": "numeric(12,2)"})
    plan_output("out", "SELECT t.id, o.id AS oid FROM t JOIN o ON t.n = o.n", ("id", "oid"), tabs)


@pytest.mark.parametrize("col", ["u", "iv"])
def test_join_on_a_type_whose_equal_values_are_written_differently_is_refused(col: str) -> None:
    err = refusal(f"SELECT t.id, o.id AS oid FROM t JOIN o ON t.{col} = o.{col}", ("id", "oid"))
    assert f"t.{col} (public.t.{col}: {T_TYPES[col]})" in str(err)
    assert "written alike" in str(err)


@pytest.mark.parametrize("col", ["ia", "ta", "j1"])
def test_equality_join_on_array_or_json_columns_is_refused(col: str) -> None:
    err = refusal(f"SELECT t.id, o.id AS oid FROM t JOIN o ON t.{col} = o.{col}", ("id", "oid"))
    assert "an equality join on an array or JSON column" in str(err)
    assert f"public.o.{col}: {T_TYPES[col]}" in str(err)


def test_any_join_compares_the_element_type() -> None:
    p = plan("SELECT t.id, o.id AS oid FROM t JOIN o ON o.b = ANY(t.ia)", ("id", "oid"))
    assert p.edges[0].kind == "any"
    err = refusal("SELECT t.id, o.id AS oid FROM t JOIN o ON o.i = ANY(t.ta)", ("id", "oid"))
    assert "t.ta (public.t.ta: _text)" in str(err)
    assert "o.i (public.o.i: int4)" in str(err)


def test_group_by_a_column_whose_equal_values_are_written_differently_is_refused() -> None:
    err = refusal("SELECT t.u, count(*) AS n FROM t GROUP BY t.u", ("u",))
    assert "GROUP BY t.u (public.t.u: numeric)" in str(err)
    plan("SELECT t.n, count(*) AS k FROM t GROUP BY t.n", ("n",))


def test_columns_of_unknown_type_are_refused() -> None:
    # Default deny: without its type a column's semantics are unknown.
    with pytest.raises(UnsupportedQuery, match=r"column t\.id of type unknown"):
        plan("SELECT t.id, o.id AS oid FROM t JOIN o ON t.n = o.i", ("id", "oid"), types=False)


def table(name: Q, source: str, columns: tuple[tuple[str, ColumnType], ...], pk: tuple[str, ...]) -> Table:
    return Table(name, source, tuple(Column(n, t) for n, t in columns), pk)


def test_table_schema_info_carries_column_types() -> None:
    schema = table(
        Q("public", "x"),
        "s",
        (
            ("id", ColumnType(23, "int4")),
            ("amount", ColumnType(1700, "numeric")),
            ("price", ColumnType(1700, "numeric", ((10 << 16) | 2) + 4)),
            ("many", ColumnType(1231, "_numeric")),
            ("at", ColumnType(1083, "time")),
        ),
        ("id",),
    )
    info = table_info(schema)
    assert info.types == {
        "id": "int4",
        "amount": "numeric",
        "price": "numeric(10,2)",
        "many": "_numeric",
        "at": "time",
    }
    assert ColumnType(1042, "bpchar", 7).label == "bpchar(3)"
    assert ColumnType(1014, "_bpchar", 9).label == "_bpchar(5)"
    assert ColumnType(1231, "_numeric", ((12 << 16) | 3) + 4).label == "_numeric(12,3)"
    assert ColumnType(1043, "varchar", 20).label == "varchar"
    hash(info)  # still usable as a set member or dict key


# -- 3. ordered-set aggregates -------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "name"),
    [
        ("percentile_cont(0.5) WITHIN GROUP (ORDER BY t.f)", "percentile_cont"),
        ("percentile_disc(0.5) WITHIN GROUP (ORDER BY t.i)", "percentile_disc"),
        ("mode() WITHIN GROUP (ORDER BY t.i)", "mode"),
        ("rank(3) WITHIN GROUP (ORDER BY t.i)", "rank"),
    ],
)
def test_ordered_set_aggregates_are_refused(call: str, name: str) -> None:
    err = refusal(f"SELECT t.i AS id, {call} AS x FROM t GROUP BY t.i")
    assert f"the ordered-set aggregate {name}() WITHIN GROUP" in str(err)
    assert "cannot be maintained incrementally" in str(err)
    assert err.details["construct"] == f"the ordered-set aggregate {name}() WITHIN GROUP"
    assert "percentile_approx" in str(err)


def test_ordered_set_aggregate_is_refused_without_column_types() -> None:
    with pytest.raises(UnsupportedQuery, match="percentile_cont"):
        plan(
            "SELECT t.i AS id, percentile_cont(0.5) WITHIN GROUP (ORDER BY t.f) AS x FROM t GROUP BY t.i",
            types=False,
        )


# -- 1. integer division ---------------------------------------------------------


def test_int_division_truncates_like_postgresql() -> None:
    # PostgreSQL: 7/2 = 3, -7/2 = -3 (toward zero), int4/int4 is int4; Spark's
    # `/` would give 3.5. Spark's DIV truncates toward zero (Java long division).
    sql = spark("SELECT t.id, t.i / t.j AS q, 7 / 2 AS lit, -7 / 2 AS neg FROM t")
    assert "CAST(t.i DIV t.j AS INT) AS `q`" in sql
    assert "CAST(7 DIV 2 AS INT) AS `lit`" in sql
    assert "CAST(-7 DIV 2 AS INT) AS `neg`" in sql
    assert " / " not in sql


def test_int_division_result_type_follows_postgresql() -> None:
    sql = spark(
        "SELECT t.id, t.s / t.s AS small, t.b / t.i AS big, t.i / 3000000000 AS big_lit, "
        "(t.i + t.j) / (t.s * 2) AS expr FROM t"
    )
    assert "CAST(t.s DIV t.s AS SMALLINT) AS `small`" in sql  # int2 / int2 is int2
    assert "CAST(t.b DIV t.i AS BIGINT) AS `big`" in sql  # int8 / int4 is int8
    assert "CAST(t.i DIV 3000000000 AS BIGINT) AS `big_lit`" in sql  # the constant is int8
    assert "CAST((t.i + t.j) DIV (t.s * 2) AS INT) AS `expr`" in sql


def test_int_division_of_aggregates() -> None:
    # sum(int4) and count(*) are int8: PostgreSQL divides them as integers.
    sql = spark("SELECT t.i AS id, sum(t.j) / count(*) AS mean FROM t GROUP BY t.i")
    assert "CAST(SUM(t.j) DIV COUNT(*) AS BIGINT) AS `mean`" in sql
    # sum(int8) is numeric in PostgreSQL: a numeric division, whose scale
    # PostgreSQL picks per value; refused until computed exactly.
    with pytest.raises(UnsupportedQuery, match=r"numeric division whose result is not rounded"):
        spark("SELECT t.i AS id, sum(t.b) / count(*) AS mean FROM t GROUP BY t.i")


def test_nested_int_divisions_are_each_truncated() -> None:
    sql = spark("SELECT t.id, t.i / 2 / 3 AS q FROM t")
    assert "CAST(CAST(t.i DIV 2 AS INT) DIV 3 AS INT) AS `q`" in sql


def test_division_with_a_fractional_operand_stays_fractional() -> None:
    sql = spark("SELECT t.id, t.f / t.i AS b FROM t")
    assert "DIV" not in sql
    assert (
        "ELSE CAST(t.f AS DOUBLE) / CAST(t.i AS DOUBLE) END) AS `b`" in sql
    )  # overflow checked, as in PostgreSQL
    # Numeric quotients: PostgreSQL picks each one's scale from the operands' values.
    for e in ("t.n / t.i", "t.i / 2.0", "t.i::numeric / t.j"):
        with pytest.raises(UnsupportedQuery, match=r"numeric division whose result is not rounded"):
            spark(f"SELECT t.id, {e} AS a FROM t")


def test_int_division_inside_json_agg_and_where() -> None:
    sql = spark(
        "SELECT t.i AS id, json_agg(t.j / 2 ORDER BY t.j) AS js FROM t WHERE t.j / 2 > 1 GROUP BY t.i"
    )
    assert sql.count("CAST(t.j DIV 2 AS INT)") == 3  # twice inside the aggregate, once in WHERE


def test_a_string_constant_in_arithmetic_is_refused() -> None:
    # A string constant's type is decided by its context in PostgreSQL: not guessed.
    with pytest.raises(UnsupportedQuery, match=r"operator / over integer, a string constant"):
        spark("SELECT t.id, t.i / '2' AS q FROM t")


# -- 2. casts to integer types -----------------------------------------------------


def test_numeric_to_int_cast_rounds_half_away_from_zero() -> None:
    # PostgreSQL: 2.5::int = 3, -1.5::int = -2; Spark's CAST truncates (2, -1).
    sql = spark(
        "SELECT t.id, t.n::int AS a, CAST(t.u AS bigint) AS b, t.n::smallint AS c, 2.5::int AS d, "
        "(t.n * 2)::int AS e FROM t"
    )
    assert "CAST(ROUND(t.n) AS INT) AS `a`" in sql
    assert "CAST(ROUND(t.u) AS BIGINT) AS `b`" in sql
    assert "CAST(ROUND(t.n) AS SMALLINT) AS `c`" in sql
    assert "CAST(ROUND(2.5) AS INT) AS `d`" in sql
    assert "CAST(ROUND((t.n * 2)) AS INT) AS `e`" in sql


def test_float_to_int_cast_rounds_half_to_even() -> None:
    # PostgreSQL converts float8 and float4 to integers with rint(): 2.5 -> 2, 3.5 -> 4.
    sql = spark("SELECT t.id, t.f::int AS a, t.r::bigint AS b, round(t.f) AS c, round(t.n) AS d FROM t")
    assert "CAST(BROUND(t.f) AS INT) AS `a`" in sql
    assert "CAST(BROUND(t.r) AS BIGINT) AS `b`" in sql
    assert "ELSE BROUND(CAST(t.f AS DOUBLE)) END) AS `c`" in sql  # round(float8) is rint() too
    assert "ROUND(t.n) AS `d`" in sql
    assert "BROUND(t.n)" not in sql


def test_casts_that_need_no_rounding_are_unchanged() -> None:
    sql = spark("SELECT t.id, t.b::int AS b, '7'::int AS c, (t.i / t.j)::bigint AS d FROM t")
    assert "CAST(t.b AS INT) AS `b`" in sql
    assert "CAST('7' AS INT) AS `c`" in sql
    assert "CAST((CAST(t.i DIV t.j AS INT)) AS BIGINT) AS `d`" in sql
    assert "ROUND" not in sql


def test_text_columns_cast_to_numbers_are_refused() -> None:
    # PostgreSQL and Spark accept different spellings ('12.0', unicode blanks): only constants.
    with pytest.raises(UnsupportedQuery, match=r"a cast from text to INT"):
        spark("SELECT t.id, t.t::int AS a FROM t")


def test_cast_to_unconstrained_numeric_keeps_fractions() -> None:
    # Spark's bare DECIMAL is DECIMAL(10,0): 2.5::numeric would become 3.
    sql = spark("SELECT t.id, t.i::numeric AS a, CAST(t.b AS decimal) AS b, t.n::numeric(10,3) AS c FROM t")
    assert f"CAST(t.i AS DECIMAL(38, {NUMERIC_SCALE})) AS `a`" in sql
    assert f"CAST(t.b AS DECIMAL(38, {NUMERIC_SCALE})) AS `b`" in sql
    assert "CAST(t.n AS DECIMAL(10, 3)) AS `c`" in sql
    # float8 -> numeric keeps 15 significant digits in PostgreSQL 15, every bit in Spark.
    with pytest.raises(UnsupportedQuery, match=r"a cast from double precision to DECIMAL"):
        spark("SELECT t.id, t.f::numeric AS a FROM t")


# -- 6. avg --------------------------------------------------------------------


def test_avg_is_refused_until_computed_exactly() -> None:
    # PostgreSQL's avg is a numeric division: its scale depends on the values
    # (avg of 0, 0, 1 has 20 fractional digits, of 1, 2 has 16).
    for arg in ("t.j", "t.n", "DISTINCT t.b", "t.f", "t.u"):
        with pytest.raises(UnsupportedQuery, match=r"avg\(\)"):
            spark(f"SELECT t.i AS id, avg({arg}) AS a FROM t GROUP BY t.i")


# -- 4. unconstrained numeric in the join stage -----------------------------------------

NUMERIC = ColumnType(1700, "numeric")


def numeric(p: int, s: int) -> ColumnType:
    return ColumnType(1700, "numeric", ((p << 16) | (s & 0xFFFF)) + 4)


def test_numeric_columns_are_decimals_in_the_join_stage() -> None:
    assert spark_arrow_type(NUMERIC) == pa.decimal128(38, NUMERIC_SCALE)
    assert NUMERIC_SCALE == 18
    assert spark_arrow_type(numeric(10, 2)) == pa.decimal128(10, 2)
    assert spark_arrow_type(numeric(38, 0)) == pa.decimal128(38, 0)
    assert spark_arrow_type(numeric(50, 4)) == pa.decimal128(38, 4)
    assert spark_arrow_type(numeric(5, -2)) == pa.decimal128(7, 0)  # up to 9999900
    assert spark_arrow_type(numeric(2, 4)) == pa.decimal128(4, 4)  # |v| < 0.01
    assert spark_arrow_type(ColumnType(1231, "_numeric")) == pa.list_(pa.decimal128(38, NUMERIC_SCALE))
    assert spark_arrow_type(ColumnType(1083, "time")) == pa.string()


SCHEMA = table(
    Q("public", "ledger"),
    "s",
    (
        ("id", ColumnType(23, "int4")),
        ("amount", NUMERIC),
        ("price", numeric(10, 2)),
        ("many", ColumnType(1231, "_numeric")),
        ("at", ColumnType(1083, "time")),
    ),
    ("id",),
)


def test_unconstrained_numeric_values_convert_exactly() -> None:
    rows: list[dict[str, Any]] = [
        {
            "id": 1,
            "amount": "12345678901234567890.123456789012345678",
            "price": "1.50",
            "many": ["1.5", None],
            "at": 1,
        },
        {"id": 2, "amount": "-0.000000000000000001", "price": None, "many": None, "at": None},
        {"id": 3, "amount": "7.50000000000000000000000", "price": "0.00", "many": [], "at": 0},
        {"id": 4, "amount": None, "price": "-99999999.99", "many": ["0"], "at": 3723000004},
    ]
    table = to_arrow(rows, SCHEMA)
    assert table.schema.field("amount").type == pa.decimal128(38, 18)
    assert table.column("amount").to_pylist() == [
        Decimal("12345678901234567890.123456789012345678"),
        Decimal("-0.000000000000000001"),
        Decimal("7.5"),
        None,
    ]
    assert table.column("price").to_pylist() == [
        Decimal("1.50"),
        None,
        Decimal("0.00"),
        Decimal("-99999999.99"),
    ]
    assert table.column("many").to_pylist() == [[Decimal("1.5"), None], None, [], [Decimal(0)]]
    assert table.column("at").to_pylist() == ["00:00:00.000001", None, "00:00:00", "01:02:03.000004"]


@pytest.mark.parametrize(
    ("column", "value", "fragment"),
    [
        ("amount", "1.0000000000000000001", "more than 18 digits after the decimal point"),
        ("amount", "123456789012345678901", "more than 20 digits before the decimal point"),
        ("amount", "NaN", "has no decimal equivalent"),
        ("price", "NaN", "has no decimal equivalent"),  # was silently NULL before
        ("many", ["1", "Infinity"], "has no decimal equivalent"),
    ],
)
def test_numeric_values_that_do_not_fit_are_refused(column: str, value: Any, fragment: str) -> None:
    row: dict[str, Any] = {"id": 1, "amount": "1", "price": "1.00", "many": None, "at": None, column: value}
    with pytest.raises(ProtocolError, match=fragment) as err:
        to_arrow([row], SCHEMA)
    text = str(err.value)
    assert f"column {column!r} of public.ledger" in text
    assert "numeric(p,s)" in text
    assert err.value.details["table"] == "public.ledger"
    assert err.value.details["column"] == column


def test_only_used_columns_are_converted() -> None:
    # A value no output reads must not stop the pipeline.
    row = {"id": 1, "amount": "NaN", "price": "1.00", "many": None, "at": None}
    assert to_arrow([row], SCHEMA, used={"id", "price"}).column_names == ["id", "price"]


# -- names as PostgreSQL gives them ---------------------------------------------------


def test_unaliased_columns_are_named_as_postgresql_names_them() -> None:
    # Checked against PostgreSQL 15: SELECT ... shows these column names.
    p = plan(
        "SELECT t.id, count(*), sum(t.i), string_agg(t.t, ',' ORDER BY t.id), t.i::text, 1::int, "
        "json_build_object('a', t.i), coalesce(t.i, 0), CASE WHEN t.i > 0 THEN 1 END, (t.j), "
        "json_agg(t.i ORDER BY t.id), t.i + 1, sum(t.i) FILTER (WHERE t.i > 0) AS s2, "
        "bool_or(t.i > 0) FILTER (WHERE t.i > 0), (array_agg(t.i ORDER BY t.id))[1] FROM t GROUP BY t.id"
    )
    assert p.columns == (
        "id", "count", "sum", "string_agg", "i", "int4", "json_build_object", "coalesce", "case", "j",
        "json_agg", "?column?", "s2", "bool_or", "array_agg",
    )  # fmt: skip


def test_unquoted_identifiers_fold_to_lower_case() -> None:
    p = plan('SELECT T.Id, T.I AS Big, t.j AS "Mixed" FROM T JOIN O ON T.I = O.Id', ("id",))
    assert p.columns == ("id", "big", "Mixed")
    with pytest.raises(UnsupportedQuery, match=r"reads table public\.T, which no source captures"):
        plan('SELECT "T".id FROM "T"')


# -- constructs PostgreSQL and Spark compute differently: refused, named -------------


@pytest.mark.parametrize(
    ("expr", "named"),
    [
        ("regexp_replace(t.t, 'a', 'b')", "regexp_replace"),  # Spark replaces every match
        ("t.t ~ '[[:alpha:]]'", "t.t ~ '[[:alpha:]]'"),  # POSIX classes
        ("trunc(t.n, 1)", "trunc"),  # Spark drops the scale
        ("t.ts::time", "timestamp to TIME"),
        ("t.f::text", "double precision to TEXT"),  # float formatting
        ("length(t.c3)", "length"),  # char(n) ignores trailing blanks
        ("t.c3 || 'x'", "||"),
        ("substring(t.t, 0, 3)", "substring"),  # Spark reads a start below 1 from the end or as 1
        ("date_part('dow', t.ts)", "date_part"),
        ("json_build_object('f', t.f)", "json_build_object"),  # float JSON text differs
        ("jsonb_build_object('n', t.u)", "jsonb_build_object"),  # numeric without a scale
        ("json_build_object(t.t, 1)", "key that is not a text constant"),
    ],
)
def test_constructs_computed_differently_are_refused_by_name(expr: str, named: str) -> None:
    with pytest.raises(UnsupportedQuery) as e:
        plan(f"SELECT t.id, {expr} AS x FROM t")
    assert named in str(e.value), str(e.value)
    assert str(e.value).startswith("output 'out': "), str(e.value)


# -- string constants compared with dates and timestamps ------------------------------


def test_a_string_constant_compared_with_a_date_or_timestamp_is_read_as_one() -> None:
    sql = spark(
        "SELECT t.id FROM t WHERE t.d >= '2024-01-31' AND t.ts BETWEEN '2024-01-01' AND '2024-01-31 13:45'"
    )
    assert "CAST('2024-01-31' AS DATE)" in sql
    assert "CAST('2024-01-01' AS TIMESTAMP)" in sql
    assert "CAST('2024-01-31 13:45' AS TIMESTAMP)" in sql
    assert "CAST('2024-01-02' AS DATE)" in spark("SELECT t.id FROM t WHERE t.d IN ('2024-01-02', t.d)")


@pytest.mark.parametrize(
    "condition",
    [
        "t.d = '2024-02-30'",  # PostgreSQL raises: no such day
        "t.d = '01/02/2024'",  # January 2nd or February 1st by DateStyle
        "t.ts < '2024-01-01 24:00'",  # PostgreSQL: the next day's midnight
        "t.ts > '2024-01-01 12:00:60'",
        "t.d <> '0000-01-01'",
        "t.d > '2024-01-31 10:00'",  # PostgreSQL drops the time; txjoin reads ISO days only
    ],
)
def test_a_date_constant_postgresql_reads_otherwise_is_refused(condition: str) -> None:
    err = refusal(f"SELECT t.id FROM t WHERE {condition}")
    assert "compared with a" in str(err), err
    assert "ISO forms" in str(err), err


def test_a_string_constant_compared_with_a_timestamptz_is_refused() -> None:
    # PostgreSQL reads it in the session's TimeZone.
    refusal("SELECT t.id FROM t WHERE t.tz >= '2024-01-31'")


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("to_char(t.n, 'FM999.00')", "the function to_char()"),  # sqlglot: TimeToStr
        ("t.j1 #>> '{a,b}'", "the operator #>>"),  # sqlglot: JSONBExtractScalar
        ("t.t ILIKE '%x%'", "the operator ILIKE"),
        ("t.t ~ '^a'", "the operator ~"),
        ("lower(t.t) ~ '^a'", "the operator ~"),
    ],
)
def test_a_refusal_names_the_construct_as_written(expression: str, named: str) -> None:
    assert named in str(refusal(f"SELECT t.id, {expression} AS x FROM t"))


def test_a_non_text_side_of_a_concatenation_is_cast_to_text() -> None:
    sql = spark("SELECT t.id, t.n || ' EUR' AS a, t.i || '-' || t.b AS k FROM t")
    assert "CAST(t.n AS STRING)" in sql
    assert "CAST(t.i AS STRING)" in sql
    assert "CAST(t.b AS STRING)" in sql


@pytest.mark.parametrize("expression", ["t.d || 'x'", "t.c3 || 'x'", "t.i || t.j", "t.u || 'x'"])
def test_a_concatenation_postgresql_prints_otherwise_is_refused(expression: str) -> None:
    # date prints by DateStyle; char(n) loses its padding; int || int does not exist;
    # unconstrained numeric prints each value's own scale.
    assert "||" in str(refusal(f"SELECT t.id, {expression} AS x FROM t"))


# -- jsonb -> and ->> ---------------------------------------------------------------


def test_jsonb_members_are_read_by_txjoins_udf() -> None:
    sql = spark("SELECT t.id, t.j1 ->> 'k' AS a, t.j1 -> 'o' ->> 'x.y' AS b, t.j1 ->> -1 AS c FROM t")
    assert "TXJ_JSONB_GET(t.j1, 'k', NULL, TRUE)" in sql
    assert "TXJ_JSONB_GET(TXJ_JSONB_GET(t.j1, 'o', NULL, FALSE), 'x.y', NULL, TRUE)" in sql
    assert "TXJ_JSONB_GET(t.j1, NULL, -1, TRUE)" in sql
    # The ends of PostgreSQL's integer (an index past them is refused).
    sql = spark("SELECT t.id, t.j1 -> 2147483647 AS a, t.j1 ->> -2147483648 AS b FROM t")
    assert "TXJ_JSONB_GET(t.j1, NULL, 2147483647, FALSE)" in sql
    assert "TXJ_JSONB_GET(t.j1, NULL, -2147483648, TRUE)" in sql


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("t.j1 ->> t.t", "not a constant"),
        ("max(t.j1 ->> 'k')", "(t.j1 ->> 'k') COLLATE"),  # ->> gives text of the database's collation
        ("coalesce(j1 -> 'k', t.j1)", "parentheses"),  # sqlglot reads `x -> y` in arguments as a lambda
        ("t.j1 #>> '{a,b}'", "#>>"),
        # PostgreSQL has no jsonb -> numeric or -> bigint; sqlglot reads them as a key or an index.
        ("t.j1 -> 1.5", "the operator -> with the key 1.5"),
        ("t.j1 ->> 2147483648", "the operator ->> with the key 2147483648"),
        ("t.j1 -> -2147483649", "the operator -> with the key -2147483649"),
        # jsonb compares by value in PostgreSQL (1 = 1.0), by text in Spark.
        ("nullif(t.j1 -> 'a', t.j1 -> 'b')", "nullif() over jsonb"),
        ("CASE t.j1 -> 'a' WHEN '1' THEN 1 END", "CASE value WHEN ... over jsonb"),
        ("count(DISTINCT t.j1 -> 'a')", "count(DISTINCT ...) over jsonb"),
    ],
)
def test_jsonb_member_uses_txjoin_cannot_match_are_refused(expression: str, why: str) -> None:
    aggregate = "max(" in expression or "count(" in expression
    key = ("id",) if not aggregate else ("m",)
    sql = f"SELECT t.id, {expression} AS x FROM t" if not aggregate else f"SELECT {expression} AS m FROM t"
    assert why in str(refusal(sql, key))


@pytest.mark.parametrize(
    "expression",
    [
        "substring(t.t, 0, 2)",  # Spark reads a start of 0 as 1, PostgreSQL counts position 0
        "substring(t.t, 1, -1)",  # PostgreSQL raises
        "substring(t.t, t.i, 2)",
        "left(t.t, -1)",  # PostgreSQL: all but the last character
        "right(t.t, t.i)",
        "substring(t.t, 2147483648)",  # PostgreSQL: no substring(text, bigint); Spark: cast overflow
        "left(t.t, 99999999999)",
    ],
)
def test_substring_bounds_where_spark_differs_are_refused(expression: str) -> None:
    assert "not a constant of the range" in str(refusal(f"SELECT t.id, {expression} AS x FROM t"))


# -- the database's default collation -------------------------------------------------------


def plan_under(sql: str, default: str, key: tuple[str, ...] = ("id",)) -> OutputPlan:
    """Plan over t with text column t under en-US, tc under C, in a database whose default is
    ``default`` ('': unknown)."""
    types = {**T_TYPES, "tc": "text", "e": "enum:mood"}
    q = Q("public", "t")
    info = TableInfo(
        q, "s", tuple(types), ("id",), types=types, collations={"t": "en-US", "tc": "C"},
        enums={"e": ("Open", "closed")}, default_collation=default,
    )  # fmt: skip
    return plan_output("out", sql, key, {q: info})


@pytest.mark.parametrize(
    "condition",
    [
        "t.e::text > 'a'",  # enum::text: the default collation
        "t.i::text < 'B'",
        "t.i || 'x' > 'B'",
        "t.j1 ->> 'k' < 'x'",
        "'a' < 'B'",  # two constants
        "(CASE WHEN t.i > 0 THEN 'a' ELSE 'B' END) BETWEEN 'a' AND 'z'",
    ],
)
def test_text_of_no_text_column_orders_under_the_databases_default(condition: str) -> None:
    sql = f"SELECT t.id FROM t WHERE {condition}"
    plan_under(sql, "C")
    for default, named in (("en-US", "'en-US'"), ("", "\"the database's default\"")):
        with pytest.raises(UnsupportedQuery, match=f"ordering text under the collation {named}"):
            plan_under(sql, default)


@pytest.mark.parametrize(
    "condition",
    [
        "t.tc < 'B'",  # a C column's implicit collation beats the constant's default
        "t.tc || t.i < 'B'",
        "t.e::text COLLATE \"C\" > 'a'",
        "(t.t COLLATE \"C\") < t.tc",  # explicit beats t's implicit en-US
        "t.i < 5",
        "t.e < 'closed'",  # an enum orders by its labels' order, not as text
    ],
)
def test_a_c_collation_decides_over_the_default(condition: str) -> None:
    plan_under(f"SELECT t.id FROM t WHERE {condition}", "en-US")


def test_case_mapping_of_default_text_follows_the_database() -> None:
    sql = "SELECT t.id, upper(t.e::text) AS u FROM t"
    assert "TRANSLATE(" in plan_under(sql, "C").spark_sql
    assert "UPPER(CAST(" in plan_under(sql, "en-US").spark_sql
    with pytest.raises(UnsupportedQuery, match="upper\\(\\) under the collation 'de-DE'"):
        plan_under(sql, "de-DE")


def test_two_columns_collations_conflict_where_one_must_decide() -> None:
    # PostgreSQL takes tc's C if t has the database's default collation (lower() maps ASCII
    # only), and raises if t's was declared: txjoin cannot tell which, so it refuses.
    for sql in ("SELECT t.id, lower(t.t || t.tc) AS x FROM t", "SELECT t.id FROM t WHERE t.t || t.tc < 'a'"):
        with pytest.raises(UnsupportedQuery, match=r"collation 'conflicting \(C, en-US\)'"):
            plan_under(sql, "C")
    plan_under('SELECT t.id FROM t WHERE (t.t || t.tc) COLLATE "C" < \'a\'', "en-US")


def test_two_explicit_collations_are_refused_as_postgresql_raises() -> None:
    # PostgreSQL: collation mismatch between explicit collations "C" and "POSIX".
    with pytest.raises(UnsupportedQuery, match=r"collation 'conflicting \(C, POSIX\)'"):
        plan_under('SELECT t.id FROM t WHERE t.tc COLLATE "C" < t.t COLLATE "POSIX"', "C")
    plan_under('SELECT t.id FROM t WHERE t.tc COLLATE "POSIX" < t.t COLLATE "POSIX"', "en-US")


def test_a_declared_collation_decides_over_a_column_of_the_databases_default() -> None:
    # t has the database's en-US by default, tc declares C: PostgreSQL compares and maps as C.
    types = {**T_TYPES, "tc": "text"}
    q = Q("public", "t")
    info = TableInfo(
        q, "s", tuple(types), ("id",), types=types, collations={"t": "en-US", "tc": "C"},
        default_collation="en-US", default_collated=frozenset({"t"}),
    )  # fmt: skip
    plan_output("out", "SELECT t.id FROM t WHERE t.t < t.tc", ("id",), {q: info})
    assert "TRANSLATE(" in plan_output("out", "SELECT t.id, lower(t.t || t.tc) AS l FROM t", ("id",), {q: info}).spark_sql
    with pytest.raises(UnsupportedQuery, match="collation 'en-US'"):
        plan_output("out", "SELECT t.id FROM t WHERE t.t < 'x'", ("id",), {q: info})


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("1e-1 + t.i", "the number 1e-1"),  # numeric in PostgreSQL, double in Spark
        ("t.ts::timestamp(0)", "TIMESTAMP(0)"),  # rounds to whole seconds in PostgreSQL
        ("t.t::varchar(3)", "VARCHAR(3)"),  # cuts to 3 characters in PostgreSQL
        ("t.i::float(10)", "FLOAT(10)"),  # real in PostgreSQL
    ],
)
def test_constants_and_casts_spark_reads_otherwise_are_refused(expression: str, why: str) -> None:
    assert why in str(refusal(f"SELECT t.id, {expression} AS x FROM t"))


@pytest.mark.parametrize("delimiter", ["NULL", "t.t"])
def test_string_agg_needs_a_constant_delimiter(delimiter: str) -> None:
    sql = f"SELECT t.i, string_agg(t.t, {delimiter} ORDER BY t.id) AS x FROM t GROUP BY t.i"
    assert "delimiter is not a string constant" in str(refusal(sql, ("i",)))


@pytest.mark.parametrize(
    "condition",
    ["(t.i, t.t) IS NULL", "(t.i, t.j) = (t.j, t.i)", "(t.t, t.i) < (t.v, t.j)", "(t.i, t.j) IN ((1, 2), (t.s, 3))"],
)
def test_row_constructors_are_refused(condition: str) -> None:
    # (NULL, NULL) IS NULL is true in PostgreSQL; Spark's struct is not NULL.
    assert "a row constructor" in str(refusal(f"SELECT t.id FROM t WHERE {condition}"))


def test_nullif_of_two_kinds_is_refused() -> None:
    # nullif(i, n) is numeric in PostgreSQL (nullif(3, 1.5) / 2 = 1.5), int in Spark (1).
    assert "nullif" in str(refusal("SELECT t.id, nullif(t.i, t.n) / 2 AS x FROM t"))
    for same in ("nullif(t.n, 0)", "nullif(t.i, t.b)", "nullif(t.t, '')"):
        spark(f"SELECT t.id, {same} AS x FROM t")


@pytest.mark.parametrize(
    "expression", ["greatest(t.r, t.i)", "coalesce(t.r, t.n)", "CASE WHEN t.i > 0 THEN t.r ELSE t.i END", "t.r IN (0.1, 0.2)"]
)
def test_real_beside_an_integer_or_numeric_is_refused_where_postgresql_resolves_real(expression: str) -> None:
    # greatest(real 16777216, int 16777217) is 16777216 in PostgreSQL, 16777217 computed in double.
    refusal(f"SELECT t.id, {expression} AS x FROM t")
    for same in ("t.r + t.i", "greatest(t.r, t.f)", "coalesce(t.r, t.r)"):
        spark(f"SELECT t.id, {same} AS x FROM t")


def test_a_refusal_prints_array_indexes_as_written() -> None:
    # The fix it suggests is pasted back: printed with sqlglot's own PostgreSQL, ia[2] read ia[3].
    err = refusal("SELECT t.id, t.n / t.ia[2] AS q FROM t")
    assert "round(t.n / t.ia[2], 6)" in str(err)
