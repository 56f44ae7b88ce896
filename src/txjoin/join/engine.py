"""Recompute output partitions with the pipeline's SQL on Spark.

The rows a recompute needs (:func:`txjoin.join.propagate.closure`, per
alias of the SQL) become typed Arrow tables, registered as one Spark view
per alias (:meth:`txjoin.join.plan.OutputPlan.view`); the translated SQL
runs over them and the result comes back as Arrow for the Delta commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from txjoin.capture.values import ColumnType, arrow_type, from_debezium
from txjoin.errors import SchemaChangeError, SourceError, UnsupportedQuery
from txjoin.join.plan import OutputPlan, TableInfo
from txjoin.pg import admin
from txjoin.pg.names import QualifiedName

__all__ = ["SparkEngine", "TableSchema", "load_schemas", "to_arrow", "type_label"]

Row = dict[str, Any]


@dataclass(frozen=True)
class TableSchema:
    name: QualifiedName
    source: str
    columns: tuple[tuple[str, ColumnType], ...]
    primary_key: tuple[str, ...]

    @property
    def info(self) -> TableInfo:
        return TableInfo(
            self.name,
            self.source,
            tuple(n for n, _ in self.columns),
            self.primary_key,
            types={n: type_label(c) for n, c in self.columns},
        )


def type_label(col: ColumnType) -> str:
    """``col`` as :attr:`TableInfo.types` names it: the type name plus the
    modifiers that change how values are written ('numeric(10,2)', 'bpchar(3)')."""
    if col.is_array:
        return "_" + type_label(col.element)
    ps = col.numeric_precision_scale
    if ps is not None:
        return f"numeric({ps[0]},{ps[1]})"
    if col.name == "bpchar" and col.typmod >= 4:
        return f"bpchar({col.typmod - 4})"
    return col.name


def load_schemas(dsn: str, source: str, tables: Sequence[QualifiedName]) -> dict[QualifiedName, TableSchema]:
    """Column names, types and primary keys of ``tables`` from the source catalog."""
    where = admin.describe_dsn(dsn)
    conn = admin.connect(dsn)
    out: dict[QualifiedName, TableSchema] = {}
    try:
        with conn.cursor() as cur:
            for t in tables:
                cur.execute(
                    """
                    SELECT a.attname, a.atttypid, ty.typname, a.atttypmod,
                           COALESCE(a.attnum = ANY(i.indkey), false), array_position(i.indkey, a.attnum)
                    FROM pg_attribute a
                    JOIN pg_class c ON c.oid = a.attrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    JOIN pg_type ty ON ty.oid = a.atttypid
                    LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
                    WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0
                      AND NOT a.attisdropped AND a.attgenerated = ''
                    ORDER BY a.attnum
                    """,
                    (t.schema, t.table),
                )
                rows = cur.fetchall()
                if not rows:
                    raise SourceError(f"table {t} does not exist on {where}", table=str(t))
                pk = tuple(r[0] for r in sorted((r for r in rows if r[4]), key=lambda r: r[5]))
                if not pk:
                    raise SourceError(f"table {t} on {where} has no primary key", table=str(t))
                cols = tuple((r[0], ColumnType(int(r[1]), r[2], int(r[3]))) for r in rows)
                out[t] = TableSchema(t, source, cols, pk)
        conn.rollback()
    finally:
        conn.close()
    return out


def _spark_type(col: ColumnType) -> pa.DataType:
    t = arrow_type(col)
    if pa.types.is_time(t):
        return pa.string()  # Spark has no time-of-day type
    if pa.types.is_list(t) and pa.types.is_time(t.value_type):
        return pa.list_(pa.string())
    return t


def _spark_value(v: Any) -> Any:
    if isinstance(v, dt.time):
        return v.isoformat()
    if isinstance(v, list):
        return [_spark_value(x) for x in v]
    return v


def to_arrow(rows: Sequence[Row], schema: TableSchema, used: set[str] | None = None) -> pa.Table:
    """Replica rows (Debezium JSON values) as a typed Arrow table."""
    arrays = []
    names = []
    for name, col in schema.columns:
        if used is not None and name not in used:
            continue
        values = []
        for r in rows:
            if name not in r:
                raise SchemaChangeError(
                    f"rows of {schema.name} no longer have column {name!r}, which an output reads: the "
                    "column was dropped or renamed at the source. The outputs stay at their last good "
                    "version; restore the column or start a new pipeline for the new schema",
                    table=str(schema.name),
                    column=name,
                )
            values.append(_spark_value(from_debezium(r[name], col)))
        arrays.append(pa.array(values, type=_spark_type(col)))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


class SparkEngine:
    """Runs output SQL over small sets of rows on a Spark session."""

    def __init__(self, spark: Any, schemas: Mapping[QualifiedName, TableSchema]) -> None:
        self.spark = spark
        self.schemas = dict(schemas)

    def run(self, plan: OutputPlan, rows: Mapping[str, Sequence[Row]]) -> pa.Table:
        """The SQL's result over ``rows`` (per alias of the SQL)."""
        for alias, info in plan.aliases.items():
            schema = self.schemas[info.name]
            used = set(plan.used_columns.get(alias, ())) | set(schema.primary_key)
            arrow = to_arrow(rows.get(alias, []), schema, used)
            self.spark.createDataFrame(arrow).createOrReplaceTempView(plan.view(alias))
        try:
            result: pa.Table = self.spark.sql(plan.spark_sql).toArrow()
        except Exception as e:  # Spark's analysis errors: name the output
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UnsupportedQuery(
                f"output {plan.name!r}: Spark could not run the translated SQL: {text}. "
                f"Translated SQL: {plan.spark_sql}",
                output=plan.name,
            ) from None
        return _storable(result)

    def empty_result(self, plan: OutputPlan) -> pa.Table:
        """The output's schema, from running its SQL over no rows."""
        return self.run(plan, {})


def _storable(t: pa.Table) -> pa.Table:
    """Delta cannot store Arrow's null type; Spark gives it to all-NULL literals."""
    fields = []
    changed = False
    for f in t.schema:
        if pa.types.is_null(f.type):
            fields.append(pa.field(f.name, pa.string()))
            changed = True
        else:
            fields.append(pa.field(f.name, f.type))
    schema = pa.schema(fields)
    return t.cast(schema) if changed else t.replace_schema_metadata(None)
