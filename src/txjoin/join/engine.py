"""Recompute output partitions with the pipeline's SQL on Spark.

The rows a recompute needs (:func:`txjoin.join.propagate.closure`, per
alias of the SQL, Debezium values in Arrow) are converted column by column
to the Spark views' types (:func:`to_spark`), registered as one Spark view
per alias (:meth:`txjoin.join.plan.OutputPlan.view`); the translated SQL
runs over them and the result comes back as Arrow for the Delta commit.

Every numeric column becomes a Spark decimal (numeric without a declared
scale: DECIMAL(38, :data:`NUMERIC_SCALE`)), so that it compares, sums and
sorts as a number; a value the decimal cannot hold exactly is refused, never
rounded (docs/types.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txjoin.debezium.arrow import from_values, value_type
from txjoin.debezium.values import arrow_type, from_debezium
from txjoin.errors import SchemaChangeError, TxJoinError, UnsupportedQuery, ValueNotRepresentable
from txjoin.faults import mutated
from txjoin.join import pgjson, pgnumeric
from txjoin.join.plan import NUMERIC_SCALE, OutputPlan
from txjoin.pg.catalog import Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = [
    "COMBINE_ROWS", "NUMERIC_SCALE", "SparkEngine", "register_udfs", "spark_arrow_type", "spark_column",
    "to_arrow", "to_spark",
]  # fmt: skip

Row = dict[str, Any]

#: Recomputes over at most this many rows (and LOCAL_RELATION_BYTES) send all views' rows to Spark
#: at once (SparkEngine._register).
COMBINE_ROWS = 20_000
#: Recomputes whose views hold more Arrow bytes than this in all (or more than COMBINE_ROWS rows)
#: send a DataFrame per view, and a view of more bytes than this is an RDD of Arrow batches, not a
#: local relation (Spark's spark.sql.execution.arrow.localRelationThreshold, 48 MB by default).
LOCAL_RELATION_BYTES = 256 << 10
_VIEW_TAG = "txj__view"
_OUTPUT_TAG = "txj__output"


def spark_arrow_type(col: ColumnType) -> pa.DataType:
    """The Arrow type a column has in the join stage's Spark views."""
    if col.is_array:
        return pa.list_(spark_arrow_type(col.element))
    if col.name == "numeric":
        ps = col.numeric_precision_scale
        if ps is None:
            return pa.decimal128(38, NUMERIC_SCALE)
        p, s = ps
        if s < 0:  # numeric(p, -k): integers of up to p + k digits; Spark has no negative scale
            return pa.decimal128(min(p - s, 38), 0)
        return pa.decimal128(min(max(p, s), 38), min(s, 38))
    t = arrow_type(col)
    if pa.types.is_time(t):
        return pa.string()  # Spark has no time-of-day type
    return t


def _decimal(value: Any, t: pa.Decimal128Type, table: QualifiedName, column: str) -> Decimal:
    """A Debezium numeric (decimal text) as a Decimal that ``t`` holds exactly."""

    def refuse(why: str) -> ValueNotRepresentable:
        return ValueNotRepresentable(
            f"column {column!r} of {table}: numeric value {str(value)[:80]!r} {why}, so the join stage "
            f"cannot read it exactly as DECIMAL({t.precision},{t.scale}). The outputs reading it hold at "
            "their last version and catch up once the value changes at the source; to keep such values, "
            "declare the column numeric(p,s) with p <= 38 and the scale its values need (numeric without "
            f"a declared scale is read with scale {NUMERIC_SCALE})",
            table=str(table),
            column=column,
            value=str(value)[:200],
        )

    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise refuse("is not a number") from None
    sign, digits, exponent = d.as_tuple()
    if not isinstance(exponent, int):  # NaN, Infinity
        raise refuse("has no decimal equivalent")
    ds = list(digits)
    if not any(ds):
        return Decimal(0)
    while exponent < 0 and len(ds) > 1 and ds[-1] == 0:  # trailing zeros lose nothing
        ds.pop()
        exponent += 1
    if exponent > 0:
        ds += [0] * exponent
        exponent = 0
    if -exponent > t.scale:
        raise refuse(f"has more than {t.scale} digits after the decimal point")
    if len(ds) + exponent > t.precision - t.scale:
        raise refuse(f"has more than {t.precision - t.scale} digits before the decimal point")
    return Decimal((sign, tuple(ds), exponent))


def _decimals(arr: pa.Array, t: pa.Decimal128Type, table: QualifiedName, column: str) -> pa.Array:
    """Decimal text as ``t``, exactly; the per-value path names a value that does not fit."""
    if mutated("numeric-scale") and pa.types.is_string(arr.type):
        arr = pc.replace_substring_regex(arr, pattern=r"(\.[0-9]*)[0-9]$", replacement=r"\10")
    try:
        return arr.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # Arrow refuses what would round; say which value, or take the exact per-value result.
        return pa.array([None if v is None else _decimal(v, t, table, column) for v in arr.to_pylist()], t)


def _times(arr: pa.Array) -> pa.Array:
    """Microseconds of the day as PostgreSQL prints a time: 'HH:MM:SS[.f]', the
    fraction without trailing zeros, 24:00:00 kept. That text orders as the
    times do, so Spark compares, groups and joins it as a string."""
    us = arr.cast(pa.int64())
    clamped = pc.min_element_wise(us, pa.scalar(86_399_999_999, pa.int64()), skip_nulls=False)
    text = clamped.cast(pa.time64("us")).cast(pa.string())
    text = pc.replace_substring_regex(text, pattern=r"\.0+$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"(\.[0-9]*[1-9])0+$", replacement=r"\1")
    midnight = pc.greater_equal(us, pa.scalar(86_400_000_000, pa.int64()))
    return pc.if_else(midnight, pa.scalar("24:00:00"), text)


def spark_column(
    arr: pa.Array | pa.ChunkedArray, col: ColumnType, table: QualifiedName, column: str
) -> pa.Array:
    """A column of Debezium values (:func:`txjoin.debezium.arrow.value_type`) as Spark's Arrow type."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = spark_arrow_type(col)
    if col.is_array:
        lists = arr.cast(pa.list_(arr.type.value_type))
        values = spark_column(lists.values, col.element, table, column)
        return pa.ListArray.from_arrays(lists.offsets, values, mask=lists.is_null())
    name = col.name
    if pa.types.is_decimal(t):
        return _decimals(arr, t, table, column)
    if name == "time":
        return _times(arr)
    if name == "bytea":
        return pa.array([None if v is None else from_debezium(v, col) for v in arr.to_pylist()], t)
    if name == "date":
        return arr.cast(pa.date32())
    if name == "timestamp":
        return arr.cast(pa.timestamp("us"))
    if name == "timestamptz":
        try:
            return arr.cast(pa.timestamp("us", tz="UTC"))
        except pa.ArrowInvalid:
            return pa.array([None if v is None else from_debezium(v, col) for v in arr.to_pylist()], t)
    return arr if arr.type == t else arr.cast(t)


def to_spark(rows: pa.Table, table: Table) -> pa.Table:
    """Replica rows (Debezium values, :mod:`txjoin.join.replica`) in the types of the Spark views."""
    types = table.types
    return pa.Table.from_arrays(
        [spark_column(rows.column(c), types[c], table.name, c) for c in rows.column_names],
        names=rows.column_names,
    )


def to_arrow(rows: Sequence[Row], table: Table, used: set[str] | None = None) -> pa.Table:
    """Replica rows as Python Debezium values, in the types of the Spark views."""
    arrays = []
    names = []
    for column in table.columns:
        name, col = column.name, column.type
        if used is not None and name not in used:
            continue
        for r in rows:
            if name not in r:
                raise SchemaChangeError(
                    f"rows of {table.name} no longer have column {name!r}, which an output reads: the "
                    "column was dropped or renamed at the source. The outputs stay at their last good "
                    "version; restore the column or start a new pipeline for the new schema",
                    table=str(table.name),
                    column=name,
                )
        arrays.append(spark_column(from_values([r[name] for r in rows], col), col, table.name, name))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def spark_error(plan: OutputPlan, e: BaseException) -> TxJoinError | None:
    """txjoin's error for Spark's ``e`` while running ``plan``'s SQL; None: ``e`` is no fault of the
    SQL or its rows (a job that a stop cancelled, a lost executor) and goes on as it is."""
    from pyspark.errors import AnalysisException, PySparkException, PythonException  # lazily

    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, AnalysisException):
        return UnsupportedQuery(
            f"output {plan.name!r}: Spark could not run the translated SQL: {text}. "
            f"Translated SQL: {plan.spark_sql}",
            output=plan.name,
        )
    # A data exception (SQLSTATE class 22: overflow, division by zero, a bad cast), the translation's
    # own raise_error for values PostgreSQL refuses (P0001), or a txjoin UDF's refusal.
    state = str(e.getSqlState() or "") if isinstance(e, PySparkException) else ""
    if state.startswith("22") or state == "P0001" or isinstance(e, PythonException):
        return UnsupportedQuery(
            f"output {plan.name!r}: a value makes its SQL fail in Spark: {text}. No version can show "
            "PostgreSQL's answer at this cut; guard the expression in the SQL (NULLIF, CASE) or correct "
            f"the rows. Translated SQL: {plan.spark_sql}",
            output=plan.name,
        )
    return None


@contextmanager
def spark_errors(plan: OutputPlan) -> Iterator[None]:
    """Raise txjoin's error (:func:`spark_error`) for Spark's errors in the block, others as they are."""
    try:
        yield
    except Exception as e:
        err = spark_error(plan, e)
        if err is None:
            raise
        raise err from None


class SparkEngine:
    """Runs output SQL over small sets of rows on a Spark session."""

    def __init__(
        self,
        spark: Any,
        tables: Mapping[QualifiedName, Table],
        *,
        combine_rows: int = COMBINE_ROWS,
        local_relation_bytes: int = LOCAL_RELATION_BYTES,
    ) -> None:
        self.spark = spark
        self.tables = dict(tables)
        self.combine_rows = combine_rows
        self.local_relation_bytes = local_relation_bytes
        self._large: Any = None
        #: Large recomputes run over local relations because their plan was a cartesian product.
        self.broadcast_fallbacks = 0
        if spark is not None:  # None: a join stage that never recomputes (bench.apply)
            register_udfs(spark)

    def run(self, plan: OutputPlan, rows: Mapping[str, pa.Table]) -> pa.Table:
        """The SQL's result over ``rows`` (per alias of the SQL, Debezium values)."""
        return self.run_views(plan, self.views(plan, rows))

    def views(self, plan: OutputPlan, rows: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
        """``rows`` (per alias, Debezium values) as the plan's views, in Spark's types."""
        views: dict[str, pa.Table] = {}
        for alias, info in plan.aliases.items():
            table = self.tables[info.name]
            data = rows.get(alias)
            if data is None:
                used = set(plan.used_columns.get(alias, ())) | set(table.primary_key)
                names = [c.name for c in table.columns if c.name in used]
                data = pa.schema([(n, value_type(table.types[n])) for n in names]).empty_table()
            views[plan.view(alias)] = to_spark(data, table)
        return views

    def small(self, rows: int, nbytes: int) -> bool:
        """Whether views of ``rows`` rows and ``nbytes`` Arrow bytes in all go to Spark as one DataFrame."""
        return rows <= self.combine_rows and nbytes <= self.local_relation_bytes

    def run_many(self, work: Mapping[str, tuple[OutputPlan, Mapping[str, pa.Table]]]) -> dict[str, pa.Table]:
        """Several outputs' results (``work``: output -> its plan and :meth:`views`) from ONE Spark
        query: all views in one DataFrame, each output's SQL a branch of a UNION ALL whose columns
        are every output's, NULL in the other branches. Spark's cost per query, not its rows, is most
        of a small recompute: 4 outputs took 379 against 698 ms one by one (bench/NOTES.md).

        {} where the views are not :meth:`small` together, where two outputs' names differ only in
        case (their views would clash), or where Spark refuses the query for its SQL or rows: each
        output's own :meth:`run_views` then says which one fails."""
        if len(work) == 1:
            ((name, (plan, views)),) = work.items()
            return {name: self.run_views(plan, views)}
        every = [t for _, views in work.values() for t in views.values()]
        if not work or not self.small(sum(t.num_rows for t in every), sum(t.nbytes for t in every)):
            return {}
        view_names = [n.lower() for _, views in work.values() for n in views]
        if len(set(view_names)) < len(view_names):  # outputs 'Orders' and 'orders': Spark ignores case
            return {}
        base = "txj___together"  # every output's views end in __<n> or __all: none is named so
        parts: list[pa.Table] = []
        ctes = []
        for _, views in work.values():
            for name, t in views.items():
                ctes.append(_tagged_view(parts, base, name, t))
        branches = []
        for k, (plan, _) in enumerate(work.values()):
            cols = [
                f"q.c{j} AS o{i}_{j}" if i == k else f"NULL AS o{i}_{j}"
                for i, (other, _) in enumerate(work.values())
                for j in range(len(other.columns))
            ]
            names = ", ".join(f"c{j}" for j in range(len(plan.columns)))
            # The translated SQL, as run() runs it; the rest are txjoin's own names.
            select = f"SELECT {k} AS {_OUTPUT_TAG}, {', '.join(cols)}"
            branches.append(f"{select} FROM ({plan.spark_sql}) AS q({names})")
        combined = pa.concat_tables(parts, promote_options="default")
        _spark_frame(self.spark, combined).createOrReplaceTempView(base)
        try:
            result = self.spark.sql(f"WITH {', '.join(ctes)}\n" + "\nUNION ALL\n".join(branches)).toArrow()
        except Exception as e:
            if spark_error(next(iter(work.values()))[0], e) is None:
                raise  # no fault of the SQL or its rows
            return {}
        tag = result.column(_OUTPUT_TAG)
        out = {}
        for k, (name, (plan, _)) in enumerate(work.items()):
            mine = result.filter(pc.equal(tag, k)).select([f"o{k}_{j}" for j in range(len(plan.columns))])
            out[name] = _storable(mine.rename_columns(list(plan.columns)))
        return out

    def run_views(self, plan: OutputPlan, views: Mapping[str, pa.Table]) -> pa.Table:
        """The SQL's result over :meth:`views`."""
        session, sql = self._register(plan, views)
        with spark_errors(plan):
            frame = session.sql(sql)
            if session is self._large and _cartesian(frame):
                return _storable(self._broadcastable(views, sql))
            result: pa.Table = frame.toArrow()  # reuses the plan just inspected
        return _storable(result)

    def _broadcastable(self, views: Mapping[str, pa.Table], sql: str) -> pa.Table:
        """``sql`` over ``views`` as local relations in the pipeline's session.

        An RDD has no size for Spark to weigh, so an inner join of two large views on a range or
        ``= ANY`` becomes a cartesian product instead of a nested loop over a broadcast view:
        10.6 s against 6.0 s for 30,000 x 12,000 rows (bench/NOTES.md). Such a recompute goes the
        way it went before views became RDDs.
        """
        self.broadcast_fallbacks += 1
        try:
            _register_views(self.spark, views)
            result: pa.Table = self.spark.sql(sql).toArrow()
        finally:
            for name in views:  # the rows would stay in the session's catalog
                self.spark.catalog.dropTempView(name)
        return result

    def _register(self, plan: OutputPlan, views: Mapping[str, pa.Table]) -> tuple[Any, str]:
        """Give Spark the rows of every view; return the session and the SQL to run over them.

        Up to ``combine_rows`` rows and ``local_relation_bytes`` of Arrow (most micro-batches) go
        over as ONE DataFrame, each view a WITH query selecting its rows from it: one Arrow
        transfer and one temporary view per recompute instead of one of each per alias (15-20 ms
        of py4j calls apiece). More keep one DataFrame per alias, which pads no columns with
        NULLs, in a session where views over ``local_relation_bytes`` are RDDs of Arrow batches:
        Spark copies a local relation's rows into its plan and folds filters and projections over
        them while optimizing, which cost 264 ms against 163 ms for a join of 50,000 rows, 841 ms
        against 373 ms for 200,000, and 424-459 ms against 270-300 ms for the pizzeria's five
        views over 12,784 rows (bench/NOTES.md). Small views stay local relations, which Spark
        can broadcast.
        """
        large = not self.small(sum(t.num_rows for t in views.values()), sum(t.nbytes for t in views.values()))
        if len(views) < 2 or large:
            session = self._large_session() if large else self.spark
            _register_views(session, views)
            return session, plan.spark_sql
        base = plan.all_views()
        parts: list[pa.Table] = []
        ctes = [_tagged_view(parts, base, name, t) for name, t in views.items()]
        combined = pa.concat_tables(parts, promote_options="default")
        _spark_frame(self.spark, combined).createOrReplaceTempView(base)
        return self.spark, f"WITH {', '.join(ctes)}\n{plan.spark_sql}"

    def _large_session(self) -> Any:
        """A session of the same Spark, with every setting of the pipeline's, for large recomputes
        (over ``combine_rows`` rows or ``local_relation_bytes``). Settings made on a running
        session (a session got again with other settings) are not in a new one's defaults; they
        are copied when it is first needed, as txjoin's SQL semantics depend on some.
        """
        if self._large is None:
            session = self.spark.newSession()
            for key, value in self.spark.conf.getAll.items():
                if self.spark.conf.isModifiable(key) and session.conf.get(key, None) != value:
                    session.conf.set(key, value)
            threshold = "spark.sql.execution.arrow.localRelationThreshold"
            session.conf.set(threshold, str(self.local_relation_bytes))
            register_udfs(session)
            self._large = session
        return self._large

    def empty_result(self, plan: OutputPlan) -> pa.Table:
        """The output's schema, from running its SQL over no rows."""
        return self.run(plan, {})


def _tagged_view(parts: list[pa.Table], base: str, name: str, t: pa.Table) -> str:
    """Add ``t``'s rows to ``parts`` (its columns renamed, a tag column added); the WITH query that
    selects them back from ``base``, the view of all ``parts``, as view ``name``."""
    i = len(parts)
    cols = [f"c{i}_{j}" for j in range(t.num_columns)]
    tag = pa.repeat(pa.scalar(i, pa.int32()), t.num_rows)
    parts.append(t.rename_columns(cols).append_column(_VIEW_TAG, tag))
    select = ", ".join(f"{c} AS {_quote(orig)}" for c, orig in zip(cols, t.column_names, strict=True))
    # Column names are quoted; view names are txjoin's own (OutputPlan.view, all_views).
    return f"{name} AS (SELECT {select} FROM {base} WHERE {_VIEW_TAG} = {i})"  # noqa: S608


def register_udfs(spark: Any) -> None:
    """txjoin's UDFs the translated SQL may call (numeric quotients, jsonb members)."""
    pgnumeric.register(spark)
    pgjson.register(spark)


def _spark_frame(spark: Any, t: pa.Table) -> Any:
    """``t`` as a Spark DataFrame, every row of it.

    PySpark 4.3's createDataFrame drops the record batches after an empty one
    (chunks [1 row], [], [1 row] give 1 row), and concatenated views have
    empty chunks; one chunk per column avoids that.
    """
    return spark.createDataFrame(t.combine_chunks())


def _register_views(spark: Any, views: Mapping[str, pa.Table]) -> None:
    """Each of ``views`` as a temporary view of its name, a DataFrame apiece."""
    for name, t in views.items():
        _spark_frame(spark, t).createOrReplaceTempView(name)


_CARTESIAN = re.compile(r"^[\s:|+*()\d-]*CartesianProduct\b", re.MULTILINE)


def _cartesian(frame: Any) -> bool:
    """Whether Spark's physical plan for ``frame`` has a cartesian product (a node, not a name)."""
    return bool(_CARTESIAN.search(frame._jdf.queryExecution().executedPlan().toString()))


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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
