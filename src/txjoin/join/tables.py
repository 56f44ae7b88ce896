"""The replica store's tables: a replicated table's spec, and the DuckDB names and types it takes.

A source column ``x`` is stored as ``c__x`` (so it never clashes with the store's own ``_lsn``,
``_ord`` and ``_del``), in a table named ``r__<schema>__<table>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from txjoin.debezium.arrow import value_type
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = ["TableSpec", "column", "duck_type", "quote", "select_list"]


def quote(ident: str) -> str:
    """A DuckDB identifier, quoted (names come from the source's catalog)."""
    return '"' + ident.replace('"', '""') + '"'


def column(col: str) -> str:
    """A source column's stored name, quoted."""
    return quote("c__" + col)


def duck_type(t: pa.DataType) -> str:
    """The DuckDB type that holds Debezium values of Arrow type ``t``."""
    if pa.types.is_list(t):
        return duck_type(t.value_type) + "[]"
    return {
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }.get(t, "VARCHAR")


@dataclass(frozen=True)
class TableSpec:
    """A replicated table: its columns, primary key and the columns lookups need."""

    name: QualifiedName
    primary_key: tuple[str, ...]
    columns: tuple[tuple[str, ColumnType], ...]
    indexed: frozenset[str] = field(default_factory=frozenset)
    arrays: frozenset[str] = field(default_factory=frozenset)

    @property
    def sql_name(self) -> str:
        return quote(f"r__{self.name.schema}__{self.name.table}")

    @property
    def types(self) -> dict[str, ColumnType]:
        return dict(self.columns)

    @property
    def secondary(self) -> list[str]:
        """Columns with an ART index of their own (scalars; a single-column key has its own)."""
        single_pk = set(self.primary_key[:1] if len(self.primary_key) == 1 else ())
        types = self.types
        return sorted(c for c in self.indexed - single_pk if not types[c].is_array)

    def schema(self, columns: Iterable[str] | None = None) -> pa.Schema:
        """Arrow schema of the Debezium values of ``columns`` (default: all)."""
        types = self.types
        names = list(types) if columns is None else list(columns)
        return pa.schema([(c, value_type(types[c])) for c in names])


def select_list(spec: TableSpec, columns: Sequence[str] | None, prefix: str = "r") -> str:
    """``columns`` (default: all) of the table aliased ``prefix``, under their source names."""
    names = [c for c, _ in spec.columns] if columns is None else list(columns)
    return ", ".join(f"{prefix}.{column(c)} AS {quote(c)}" for c in names)
