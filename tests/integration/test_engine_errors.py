"""Which Spark errors a recompute reports, and as what.

Spark's analysis errors mean the translated SQL is wrong for Spark: txjoin names
the output and its SQL (UnsupportedQuery). A data exception while the job runs
(a division by zero, an overflow: SQLSTATE class 22, as PostgreSQL raises for
the same values) is the rows' doing: UnsupportedQuery says so, naming the
output. Anything else (a job that a stop cancelled) is neither and keeps
Spark's own error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException

from txjoin.debezium.arrow import from_values
from txjoin.errors import UnsupportedQuery
from txjoin.join.engine import SparkEngine, spark_error
from txjoin.join.plan import plan_output
from txjoin.join.planned import table_info
from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

pytestmark = [pytest.mark.spark]

A = QualifiedName("public", "a")
INT4 = ColumnType(23, "int4")
TABLE = Table(A, "s", (Column("id", INT4), Column("d", INT4)), ("id",))


def _rows(ids: list[int], ds: list[int]) -> pa.Table:
    return pa.Table.from_arrays([from_values(ids, INT4), from_values(ds, INT4)], names=["id", "d"])


def test_a_value_s_runtime_error_names_the_value_not_the_sql(spark: Any) -> None:
    plan = plan_output("q", "select a.id, a.id / a.d q from a", ("id",), {A: table_info(TABLE)})
    engine = SparkEngine(spark, {A: TABLE})
    assert engine.run(plan, {"a": _rows([6], [3])}).column("q").to_pylist() == [2]
    with pytest.raises(UnsupportedQuery, match=r"output 'q': a value makes its SQL fail") as err:
        engine.run(plan, {"a": _rows([6], [0])})  # PostgreSQL too: ERROR: division by zero
    assert "DIVIDE_BY_ZERO" in str(err.value)
    assert err.value.details == {"output": "q"}


def test_an_error_that_is_not_spark_s_sql_or_data_error_goes_on_as_it_is() -> None:
    plan = plan_output("q", "select a.id from a", ("id",), {A: table_info(TABLE)})
    assert spark_error(plan, RuntimeError("Job 7 cancelled because SparkContext was shut down")) is None


def test_an_analysis_error_names_the_output_and_its_translated_sql(spark: Any) -> None:
    plan = plan_output("q", "select a.id, a.d from a", ("id",), {A: table_info(TABLE)})
    broken = dataclasses.replace(plan, spark_sql=plan.spark_sql.replace("a.d", "a.nowhere"))
    with pytest.raises(UnsupportedQuery, match=r"output 'q': Spark could not run the translated SQL") as err:
        SparkEngine(spark, {A: TABLE}).run(broken, {"a": _rows([1], [2])})
    assert "a.nowhere" in str(err.value)
    assert err.value.__cause__ is None
    assert isinstance(err.value.__context__, AnalysisException)
