"""Which Spark errors a recompute reports as the output's SQL's fault.

Spark's analysis errors mean the translated SQL is wrong for Spark: txjoin names
the output and its SQL (UnsupportedQuery). Errors while the job runs (a value's
division by zero, a job cancelled by a stop) are not the SQL's fault and keep
Spark's own error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, PySparkException

from txjoin.debezium.arrow import from_values
from txjoin.errors import UnsupportedQuery
from txjoin.join.engine import SparkEngine
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


def test_a_runtime_error_keeps_spark_s_error_not_a_refusal_of_the_sql(spark: Any) -> None:
    plan = plan_output("q", "select a.id, a.id / a.d q from a", ("id",), {A: table_info(TABLE)})
    engine = SparkEngine(spark, {A: TABLE})
    assert engine.run(plan, {"a": _rows([6], [3])}).column("q").to_pylist() == [2]
    with pytest.raises(PySparkException) as err:
        engine.run(plan, {"a": _rows([6], [0])})  # PostgreSQL too: ERROR: division by zero
    assert not isinstance(err.value, UnsupportedQuery)
    assert "DIVIDE_BY_ZERO" in str(err.value)


def test_an_analysis_error_names_the_output_and_its_translated_sql(spark: Any) -> None:
    plan = plan_output("q", "select a.id, a.d from a", ("id",), {A: table_info(TABLE)})
    broken = dataclasses.replace(plan, spark_sql=plan.spark_sql.replace("a.d", "a.nowhere"))
    with pytest.raises(UnsupportedQuery, match=r"output 'q': Spark could not run the translated SQL") as err:
        SparkEngine(spark, {A: TABLE}).run(broken, {"a": _rows([1], [2])})
    assert "a.nowhere" in str(err.value)
    assert err.value.__cause__ is None
    assert isinstance(err.value.__context__, AnalysisException)
