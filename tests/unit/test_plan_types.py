"""Type-aware translation of output SQL: where PostgreSQL and Spark compute
different values for the same SQL, the planner rewrites or refuses it.

Each test asserts on the translated Spark SQL or on the planner's refusal;
none starts Spark or PostgreSQL. docs/types.md explains each rule.
"""

from __future__ import annotations

import pytest

from txjoin.capture.values import ColumnType
from txjoin.errors import UnsupportedQuery
from txjoin.join.engine import TableSchema, type_label
from txjoin.join.plan import OutputPlan, TableInfo, plan_output
from txjoin.pg.names import QualifiedName as Q

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


def test_join_types_are_not_checked_without_column_types() -> None:
    plan("SELECT t.id, o.id AS oid FROM t JOIN o ON t.n = o.i", ("id", "oid"), types=False)


def test_table_schema_info_carries_column_types() -> None:
    schema = TableSchema(
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
    info = schema.info
    assert info.types == {
        "id": "int4",
        "amount": "numeric",
        "price": "numeric(10,2)",
        "many": "_numeric",
        "at": "time",
    }
    assert type_label(ColumnType(1042, "bpchar", 7)) == "bpchar(3)"
    assert type_label(ColumnType(1014, "_bpchar", 9)) == "_bpchar(5)"
    assert type_label(ColumnType(1231, "_numeric", ((12 << 16) | 3) + 4)) == "_numeric(12,3)"
    assert type_label(ColumnType(1043, "varchar", 20)) == "varchar"
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
