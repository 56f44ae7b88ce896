"""A recompute gives the same rows whichever way its views reach Spark.

SparkEngine sends a small recompute's rows as ONE DataFrame with a WITH query
per view, and a large one as a DataFrame per view (``SparkEngine._register``),
in a session where large views are RDDs of Arrow batches rather than local
relations. Generated rows, different per alias of a self-join, with a column
of every type a view can have in Spark (edge values and NULLs) and column names
that need quoting, go through all three ways and must give the same schema and
rows. A large recompute whose plan would be a cartesian product over RDDs runs
over local relations instead.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.debezium.arrow import from_values
from txjoin.debezium.values import to_debezium
from txjoin.join.engine import SparkEngine
from txjoin.join.plan import plan_output
from txjoin.join.planned import table_info
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

pytestmark = [pytest.mark.spark]

A = QualifiedName("public", "a")
TYPES = {
    "id": ColumnType(23, "int4"),
    "Grp Name": ColumnType(25, "text"),
    "Amt": ColumnType(1700, "numeric", ((10 << 16) | 2) + 4),
    "ts": ColumnType(1114, "timestamp"),
    "tags": ColumnType(1007, "_int4"),
    "parent": ColumnType(23, "int4"),
    # Every other type a view's column can have in Spark (txjoin.join.engine.spark_arrow_type).
    "flag": ColumnType(16, "bool"),
    "small": ColumnType(21, "int2"),
    "big": ColumnType(20, "int8"),
    "f4": ColumnType(700, "float4"),
    "f8": ColumnType(701, "float8"),
    "d": ColumnType(1082, "date"),
    "tstz": ColumnType(1184, "timestamptz"),
    "tm": ColumnType(1083, "time"),
    "bin": ColumnType(17, "bytea"),
    "num": ColumnType(1700, "numeric"),
    "names": ColumnType(1009, "_text"),
}
TABLE = Table(A, "s", tuple(Column(n, t) for n, t in TYPES.items()), ("id",))

SQLS = {
    "joined": """select a.id, a."Grp Name", p."Amt" parent_amt, a.ts, a.tags, c.id child, a.flag, a.small,
                        a.big, a.f4, p.f8, a.d, a.tstz, c.tm, a.bin, p.num, c.names
                 from a left join a p on a.parent = p.id join a c on c.parent = a.id""",
    "grouped": """select a."Grp Name", count(c.id) n, sum(c."Amt") total, max(p.ts) latest
                  from a join a c on c.parent = a.id left join a p on a.parent = p.id
                  group by a."Grp Name\"""",
}

_IDS = st.integers(1, 4)  # few ids: most examples join rows


def _array_text(xs: list[int | None]) -> str:
    return "{" + ",".join("NULL" if x is None else str(x) for x in xs) + "}"


_ROW = st.fixed_dictionaries(
    {
        "id": _IDS,
        "Grp Name": st.none() | st.sampled_from(["x", "y", "É", "a b"]),
        "Amt": st.none() | st.decimals(-999, 999, places=2, allow_nan=False).map(str),
        "ts": st.none() | st.sampled_from(["2024-01-02 03:04:05.123456", "1999-12-31 23:59:59"]),
        "tags": st.none() | st.lists(st.none() | st.integers(-5, 5), max_size=3).map(_array_text),
        "parent": _IDS | st.none(),
        "flag": st.none() | st.sampled_from(["t", "f"]),
        "small": st.none() | st.sampled_from(["-32768", "0", "32767"]),
        "big": st.none() | st.sampled_from(["-9223372036854775808", "1", "9223372036854775807"]),
        "f4": st.none() | st.sampled_from(["NaN", "-Infinity", "1.5", "-0", "3.4028235e+38"]),
        "f8": st.none() | st.sampled_from(["NaN", "Infinity", "0.1", "-1e-300", "1.7976931348623157e+308"]),
        "d": st.none() | st.sampled_from(["2024-02-29", "0001-01-01", "9999-12-31", "1970-01-01"]),
        "tstz": st.none() | st.sampled_from(["2024-01-02 03:04:05.123456+00", "1900-01-01 00:00:00+00"]),
        "tm": st.none() | st.sampled_from(["00:00:00", "23:59:59.999999", "12:30:00.5"]),
        "bin": st.none() | st.sampled_from(["\\x", "\\x00ff10", "\\x41"]),
        "num": st.none() | st.sampled_from(["0", "-12345678901234567890.123456789", "1e-10"]),  # NaN: refused
        "names": st.none() | st.sampled_from(["{}", '{"a b",NULL}', '{É,"x,y"}']),
    }
)


def _rows(rows: list[dict[str, Any]]) -> pa.Table:
    unique = list({r["id"]: r for r in rows}.values())
    return pa.Table.from_arrays(
        [from_values([to_debezium(r.get(n), t) for r in unique], t) for n, t in TYPES.items()],
        names=list(TYPES),
    )


def _sorted(t: pa.Table) -> list[str]:
    return sorted(repr(r) for r in t.to_pylist())


@settings(max_examples=examples(ci=15, thorough=150), deadline=None)
@given(
    output=st.sampled_from(sorted(SQLS)),
    per_alias=st.tuples(*(st.lists(_ROW, max_size=6) for _ in range(3))),  # empty views too
)
def test_one_dataframe_for_all_views_equals_one_per_view(
    spark: Any, output: str, per_alias: tuple[list[dict[str, Any]], ...]
) -> None:
    key = ("id", "child") if output == "joined" else ("Grp Name",)
    plan = plan_output(output, SQLS[output], key, {A: table_info(TABLE)})
    rows = {alias: _rows(r) for alias, r in zip(plan.aliases, per_alias, strict=True)}
    combined = SparkEngine(spark, {A: TABLE}).run(plan, rows)
    apart = SparkEngine(spark, {A: TABLE}, combine_rows=0, local_relation_bytes=50 << 20).run(plan, rows)
    as_rdds = SparkEngine(spark, {A: TABLE}, combine_rows=0, local_relation_bytes=1).run(plan, rows)
    assert combined.schema == apart.schema == as_rdds.schema
    assert _sorted(combined) == _sorted(apart) == _sorted(as_rdds)


def test_the_large_recompute_session_has_the_pipeline_sessions_settings(spark: Any) -> None:
    """Settings made on the running session (not in Spark's defaults) reach the large recomputes'."""
    key = "spark.sql.jsonGenerator.ignoreNullFields"
    before = spark.conf.get(key)
    spark.conf.set(key, "true" if before == "false" else "false")
    try:
        engine = SparkEngine(spark, {A: TABLE}, local_relation_bytes=1234)
        large = engine._large_session()
        assert large.conf.get(key) == spark.conf.get(key) != before
        assert large.conf.get("spark.sql.execution.arrow.localRelationThreshold") == "1234"
        assert spark.conf.get("spark.sql.execution.arrow.localRelationThreshold") != "1234"
        assert (
            large.sql("SELECT to_json(named_struct('a', NULL)) AS j").first().j
            == spark.sql("SELECT to_json(named_struct('a', NULL)) AS j").first().j
        )
    finally:
        spark.conf.set(key, before)


def test_every_record_batch_reaches_spark(spark: Any) -> None:
    """An empty chunk between two rows: PySpark's createDataFrame alone keeps only the first row."""
    from txjoin.join.engine import _spark_frame

    t = pa.table({"x": pa.chunked_array([[1], [], [2]], pa.int32())})
    assert sorted(r.x for r in _spark_frame(spark, t).collect()) == [1, 2]


@pytest.mark.parametrize("over", ["rows", "bytes"])
def test_a_large_recompute_sends_its_views_as_arrow_batches(spark: Any, over: str) -> None:
    """Over ``combine_rows`` rows or ``local_relation_bytes`` in all, a view of more than
    ``local_relation_bytes`` is an RDD of Arrow batches (not rows copied into the plan), and the
    result is the combined way's."""
    n = 8_000  # three views: 24,000 rows (over combine_rows), each over 256 KiB
    rows = [
        {
            "id": i,
            "Grp Name": f"g{i % 7}",
            "Amt": f"{i % 1000}.25",
            "ts": None,
            "tags": None,
            "parent": i // 3,
        }
        for i in range(1, n + 1)
    ]
    plan = plan_output("grouped", SQLS["grouped"], ("Grp Name",), {A: table_info(TABLE)})
    table = _rows(rows)
    views = {alias: table for alias in plan.aliases}
    engine = SparkEngine(spark, {A: TABLE}, combine_rows=10 * n if over == "bytes" else 20_000)
    large = engine.run(plan, views)
    combined = SparkEngine(spark, {A: TABLE}, combine_rows=10 * n, local_relation_bytes=50 << 20).run(
        plan, views
    )
    assert _sorted(large) == _sorted(combined)
    assert len(large) == 7
    assert engine.broadcast_fallbacks == 0  # equi-joins: the views stay RDDs
    for alias in plan.aliases:
        analyzed = engine._large_session().table(plan.view(alias))._jdf.queryExecution().analyzed().toString()
        assert "LocalRelation" not in analyzed, analyzed
        assert "ExistingRDD" in analyzed or "LogicalRDD" in analyzed, analyzed


def test_a_large_join_on_any_keeps_its_views_broadcastable(spark: Any) -> None:
    """Two large views joined on ``= ANY``: Spark cannot weigh an RDD, so over Arrow batches the
    join would be a cartesian product; the engine runs it over local relations instead, which
    Spark joins by a nested loop over a broadcast view, and gets the combined way's rows."""
    n = 2_500  # each view over 256 KiB (its names are long), 5,000 rows in all
    rows = [
        {"id": i, "Grp Name": f"g{i}-" + "x" * 100, "Amt": None, "ts": None, "tags": _array_text([i + 1, i + 2]),
         "parent": None}
        for i in range(1, n + 1)
    ]  # fmt: skip
    sql = 'select a.id, c."Grp Name" tagged from a join a c on c.id = any (a.tags)'
    plan = plan_output("tagged", sql, ("id", "tagged"), {A: table_info(TABLE)})
    table = _rows(rows)
    assert table.nbytes > 256 << 10
    views = {alias: table for alias in plan.aliases}
    engine = SparkEngine(spark, {A: TABLE})
    large = engine.run(plan, views)
    combined = SparkEngine(spark, {A: TABLE}, combine_rows=10 * n, local_relation_bytes=50 << 20).run(
        plan, views
    )
    assert engine.broadcast_fallbacks == 1
    assert len(large) == 2 * n - 3  # ids n - 1 and n have one tag and none inside 1..n
    assert _sorted(large) == _sorted(combined)
    assert not any(t.name in {plan.view(a) for a in plan.aliases} for t in spark.catalog.listTables())


@settings(max_examples=examples(ci=10, thorough=100), deadline=None)
@given(
    outputs=st.lists(st.sampled_from(sorted(SQLS)), min_size=2, max_size=3),
    per_alias=st.tuples(*(st.lists(_ROW, max_size=6) for _ in range(3))),
)
def test_several_outputs_in_one_query_equal_each_on_its_own(
    spark: Any, outputs: list[str], per_alias: tuple[list[dict[str, Any]], ...]
) -> None:
    """Outputs recomputed together (one UNION ALL, their columns side by side) give each output's
    own rows and column types; only nullability may differ (a UNION's other branches are NULL)."""
    engine = SparkEngine(spark, {A: TABLE})
    work = {}
    for i, output in enumerate(outputs):
        key = ("id", "child") if output == "joined" else ("Grp Name",)
        plan = plan_output(f"{output}{i}", SQLS[output], key, {A: table_info(TABLE)})
        rows = {alias: _rows(r) for alias, r in zip(plan.aliases, per_alias, strict=True)}
        work[plan.name] = (plan, engine.views(plan, rows))
    together = engine.run_many(work)
    assert list(together) == list(work)
    for name, (plan, views) in work.items():
        alone = engine.run_views(plan, views)
        assert [(f.name, f.type) for f in together[name].schema] == [(f.name, f.type) for f in alone.schema]
        assert _sorted(together[name]) == _sorted(alone)


def test_outputs_together_leave_a_failing_query_to_each_output(spark: Any) -> None:
    """A value that makes one output's SQL fail in Spark: run_many gives nothing, so each output runs
    alone and the failing one is named; views past the engine's limit for one query are left too."""
    from txjoin.errors import UnsupportedQuery

    engine = SparkEngine(spark, {A: TABLE})
    rows = _rows([{"id": 1, "small": "0"}, {"id": 2, "small": "5"}])
    ok = plan_output("ok", "select a.id, a.small from a", ("id",), {A: table_info(TABLE)})
    bad = plan_output("bad", "select a.id, 10 / a.small as q from a", ("id",), {A: table_info(TABLE)})
    work = {p.name: (p, engine.views(p, {alias: rows for alias in p.aliases})) for p in (ok, bad)}
    assert engine.run_many(work) == {}
    assert sorted(r["small"] for r in engine.run_views(ok, work["ok"][1]).to_pylist()) == [0, 5]
    with pytest.raises(UnsupportedQuery, match="output 'bad'"):
        engine.run_views(bad, work["bad"][1])
    small = SparkEngine(spark, {A: TABLE}, combine_rows=3)
    assert small.run_many({"ok": work["ok"], "ok2": (ok, work["ok"][1])}) == {}


def test_outputs_whose_names_differ_in_case_each_run_alone(spark: Any, capfd: Any) -> None:
    """Spark's names are case-insensitive: in one query the views of outputs 'Orders' and 'orders'
    would clash (DUPLICATED_CTE_NAMES, logged at every batch), so such outputs each run alone."""
    engine = SparkEngine(spark, {A: TABLE})
    work = {}
    for name, ids in (("Orders", [1]), ("orders", [2, 3])):
        plan = plan_output(name, "select a.id, a.small from a", ("id",), {A: table_info(TABLE)})
        rows = _rows([{"id": i, "small": str(i)} for i in ids])
        work[name] = (plan, engine.views(plan, {alias: rows for alias in plan.aliases}))
    assert engine.run_many(work) == {}
    assert "DUPLICATED_CTE_NAMES" not in capfd.readouterr().err  # PySpark logs Spark's refusal there
    assert sorted(r["id"] for r in engine.run_views(*work["orders"]).to_pylist()) == [2, 3]
