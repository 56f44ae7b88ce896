"""A full recompute on Spark: every partition of an output as one distributed job.

Used where every partition must be recomputed and the tables are large (the
first version after an initial load, an output whose SQL changed, a batch
that touches most of an output). Each alias's rows are exported from the
replicas to Parquet in the Spark views' types (in record batches: bounded
memory), Spark runs the output's SQL over them, and writes the result as
Parquet straight into the output table's directory; the sink then commits
those files as the table's new content (one Delta version). Nothing of the
result passes through the driver.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from txjoin.errors import TxJoinError
from txjoin.join.engine import register_udfs, spark_errors, to_spark
from txjoin.join.plan import OutputPlan
from txjoin.join.replica import ReplicaStore
from txjoin.pg.catalog import Table
from txjoin.pg.names import QualifiedName

__all__ = ["export", "recompute_files"]


def export(store: ReplicaStore, table: Table, columns: list[str], directory: Path) -> int:
    """``table``'s live rows (``columns``) as Parquet in ``directory``, in Spark's types; the row count."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for batch in store.scan(table.name, select=columns):
            data = to_spark(pa.Table.from_batches([batch]), table)
            if writer is None:
                writer = pq.ParquetWriter(directory / "part-00000.parquet", data.schema)
            writer.write_table(data)
            rows += data.num_rows
        if writer is None:  # no rows: an empty file still carries the schema
            empty = store.tables[table.name].schema(columns).empty_table()
            pq.write_table(to_spark(empty, table), directory / "part-00000.parquet")
    finally:
        if writer is not None:
            writer.close()
    return rows


def _columns(plan: OutputPlan, store: ReplicaStore, alias: str) -> list[str]:
    spec = store.tables[plan.aliases[alias].name]
    want = set(spec.primary_key) | set(plan.used_columns.get(alias, ()))
    return [c for c, _ in spec.columns if c in want]


def recompute_files(
    spark: Any,
    plan: OutputPlan,
    store: ReplicaStore,
    tables: dict[QualifiedName, Table],
    work: Path,
    target: Path,
    *,
    rows_per_file: int,
) -> tuple[list[Path], pa.Schema, int]:
    """The output's rows as Parquet files in ``target`` (inside its table); files, schema, rows."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)  # a replayed batch's leftovers: never committed
    exported = 0
    try:
        for alias, info in plan.aliases.items():
            d = work / alias
            exported += export(store, tables[info.name], _columns(plan, store, alias), d)
            spark.read.parquet(str(d)).createOrReplaceTempView(plan.view(alias))
        with spark_errors(plan):
            register_udfs(spark)
            df = spark.sql(plan.spark_sql)
            for f in df.schema.fields:  # Delta cannot store Spark's NullType (all-NULL literals)
                if f.dataType.typeName() == "void":
                    df = df.withColumn(f.name, df[f.name].cast("string"))
            order = list(plan.partition_cols or plan.key)
            parts = max(1, exported // max(1, rows_per_file))
            if parts > 1:
                df = df.repartitionByRange(parts, *order)
            else:
                df = df.coalesce(1)
            df.sortWithinPartitions(*order).write.mode("error").parquet(str(target))
            if not any(target.glob("part-*.parquet")):  # no rows and no file: keep the schema
                pq.write_table(df.limit(0).toArrow(), target / "part-00000-empty.parquet")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    files = sorted(target.glob("part-*.parquet"))
    schema = pq.read_schema(files[0]) if files else pa.schema([])
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    _check_unique(plan, files)
    return files, schema.remove_metadata(), rows


def _check_unique(plan: OutputPlan, files: list[Path]) -> None:
    if not files:
        return
    con = duckdb.connect()
    try:
        keys = ", ".join('"' + k.replace('"', '""') + '"' for k in plan.key)
        paths = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"
        rel = con.sql(
            f"SELECT {keys} FROM read_parquet({paths}) GROUP BY ALL HAVING count(*) > 1 LIMIT 1"  # noqa: S608
        )
        assert rel is not None
        dup = rel.fetchall()
    finally:
        con.close()
    if dup:
        first = dict(zip(plan.key, dup[0], strict=True))
        raise TxJoinError(
            f"output {plan.name!r}: key {list(plan.key)} is not unique: {first} "
            "appears more than once. Add columns to the key so each output row has its own",
            output=plan.name,
        )
