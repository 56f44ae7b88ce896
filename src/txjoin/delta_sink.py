"""The Delta seam: every read and write of an output Delta table goes here.

Backed by delta-rs (``deltalake``), because Delta's Spark jars cannot be
loaded where txjoin is developed. A cluster with delta-spark could provide
another :class:`DeltaStore` implementing the same five methods.

Each output commit is ONE Delta commit (a MERGE) that

- replaces the rows of the affected partitions: upsert the recomputed rows
  by key, delete the partition's rows that were not recomputed;
- records the cut in the commit metadata (``txjoin.cut``: per source the
  commit LSN and xid of the last transaction included and the number of
  transactions) and the micro-batch id (``txjoin.batch``);
- carries a delta-rs app transaction ``(txjoin:<output>, batch id)``, so a
  replayed batch finds its commit already there and never commits twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from txjoin.errors import SinkError

__all__ = ["Commit", "DeltaRsStore", "DeltaStore", "sql_literal"]

CUT_KEY = "txjoin.cut"
BATCH_KEY = "txjoin.batch"


@dataclass(frozen=True)
class Commit:
    """One version of an output table as txjoin wrote it."""

    version: int
    cut: dict[str, Any]
    batch: int | None
    operation: str


class DeltaStore(Protocol):
    def committed_batch(self, path: Path, app_id: str) -> int | None:
        """The last batch id committed under ``app_id`` (None if none)."""
        ...

    def replace_partitions(
        self,
        path: Path,
        rows: pa.Table,
        *,
        key: Sequence[str],
        partition_cols: Sequence[str],
        partitions: Sequence[Sequence[Any]] | None,
        cut: dict[str, Any],
        batch: int,
        app_id: str,
    ) -> int:
        """Commit ``rows`` as the new content of ``partitions``; return the version."""
        ...

    def advance(self, path: Path, *, cut: dict[str, Any], batch: int, app_id: str) -> int:
        """Commit no row change, only a newer ``cut``; return the version."""
        ...

    def history(self, path: Path) -> list[Commit]: ...

    def read(self, path: Path, version: int | None = None) -> pa.Table: ...

    def exists(self, path: Path) -> bool: ...


def sql_literal(v: Any) -> str:
    """A DataFusion SQL literal for a partition value."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def _quote(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


def _partition_predicate(cols: Sequence[str], partitions: Sequence[Sequence[Any]]) -> str:
    if len(cols) == 1:
        col = f"t.{_quote(cols[0])}"
        values = ", ".join(sql_literal(p[0]) for p in partitions if p[0] is not None)
        terms = [f"{col} IN ({values})"] if values else []
        if any(p[0] is None for p in partitions):
            terms.append(f"{col} IS NULL")  # NULL IN (...) is never true
        return " OR ".join(terms)
    ors = []
    for p in partitions:
        ands = " AND ".join(
            f"t.{_quote(c)} IS NULL" if v is None else f"t.{_quote(c)} = {sql_literal(v)}"
            for c, v in zip(cols, p, strict=True)
        )
        ors.append(f"({ands})")
    return " OR ".join(ors)


class DeltaRsStore:
    """:class:`DeltaStore` on delta-rs."""

    def exists(self, path: Path) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(str(path)))

    def committed_batch(self, path: Path, app_id: str) -> int | None:
        from deltalake import DeltaTable

        if not self.exists(path):
            return None
        v = DeltaTable(str(path)).transaction_version(app_id)
        return None if v is None else int(v)

    def replace_partitions(
        self,
        path: Path,
        rows: pa.Table,
        *,
        key: Sequence[str],
        partition_cols: Sequence[str],
        partitions: Sequence[Sequence[Any]] | None,
        cut: dict[str, Any],
        batch: int,
        app_id: str,
    ) -> int:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        props = CommitProperties(
            custom_metadata={CUT_KEY: json.dumps(cut, sort_keys=True), BATCH_KEY: str(batch)},
            app_transactions=[Transaction(app_id=app_id, version=batch)],
        )
        try:
            if partitions is None:
                # Every partition: one overwrite (also creates the table, or
                # replaces it when the output's SQL changed its columns).
                if self.exists(path):
                    write_deltalake(
                        str(path), rows, mode="overwrite", schema_mode="overwrite", commit_properties=props
                    )
                else:
                    write_deltalake(str(path), rows, mode="append", commit_properties=props)
                return int(DeltaTable(str(path)).version())
            dt = DeltaTable(str(path))
            # Parenthesized: DataFusion's parser binds AND tighter than IS NOT DISTINCT FROM.
            predicate = " AND ".join(f"(t.{_quote(k)} IS NOT DISTINCT FROM s.{_quote(k)})" for k in key)
            merger = dt.merge(
                source=rows, predicate=predicate, source_alias="s", target_alias="t", commit_properties=props
            )
            merger = merger.when_matched_update_all().when_not_matched_insert_all()
            if partitions:
                merger = merger.when_not_matched_by_source_delete(
                    predicate=_partition_predicate(partition_cols, partitions)
                )
            merger.execute()
            return int(DeltaTable(str(path)).version())
        except Exception as e:  # delta-rs raises its own exception types
            raise SinkError(
                f"could not commit batch {batch} to Delta table {path}: {e}. Nothing was committed for this "
                "batch; the query stops and the batch is retried on restart",
                path=str(path),
                batch=batch,
            ) from e

    def advance(self, path: Path, *, cut: dict[str, Any], batch: int, app_id: str) -> int:
        from deltalake import CommitProperties, DeltaTable, Transaction

        props = CommitProperties(
            custom_metadata={CUT_KEY: json.dumps(cut, sort_keys=True), BATCH_KEY: str(batch)},
            app_transactions=[Transaction(app_id=app_id, version=batch)],
        )
        try:
            dt = DeltaTable(str(path))
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=props)
            return int(DeltaTable(str(path)).version())
        except Exception as e:  # delta-rs raises its own exception types
            raise SinkError(
                f"could not commit batch {batch}'s cut to Delta table {path}: {e}. Nothing was committed; "
                "the query stops and the batch is retried on restart",
                path=str(path),
                batch=batch,
            ) from e

    def history(self, path: Path) -> list[Commit]:
        from deltalake import DeltaTable

        out = []
        for h in DeltaTable(str(path)).history():
            cut = json.loads(h[CUT_KEY]) if CUT_KEY in h else {}
            batch = int(h[BATCH_KEY]) if BATCH_KEY in h else None
            out.append(Commit(int(h["version"]), cut, batch, str(h.get("operation", ""))))
        return sorted(out, key=lambda c: c.version)

    def read(self, path: Path, version: int | None = None) -> pa.Table:
        from deltalake import DeltaTable

        dt = DeltaTable(str(path)) if version is None else DeltaTable(str(path), version=version)
        table: pa.Table = dt.to_pyarrow_table()
        return table
