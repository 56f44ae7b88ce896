"""What the planner hands its callers (:class:`TableInfo` in,
:class:`OutputPlan` out), and the working state its modules share while they
plan one output.

The shared pieces live here, below analysis, type rules and translation, so
that those modules can all use them without importing one another in a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres

from txjoin.errors import UnsupportedQuery
from txjoin.pg.names import QualifiedName

__all__ = ["PG", "Analysis", "Edge", "OutputPlan", "TableInfo", "any_array", "refuse"]


@dataclass(frozen=True)
class TableInfo:
    """What the planner needs to know of a captured table."""

    name: QualifiedName
    source: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    #: Column -> PostgreSQL type: ``pg_type.typname`` ('int4', 'text', '_int4'
    #: for int4[]), with the modifiers that change how values are written:
    #: 'numeric(10,2)', 'bpchar(3)'. Columns left out have an unknown type and
    #: get no type-aware translation or checks.
    types: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: Column -> collation ordering its text ('C', an ICU or libc locale);
    #: text columns left out order as under 'C'.
    collations: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: Enum column -> its labels in declared order (its type is 'enum:<typname>').
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    #: The source database's default collation, which orders text computed from no text column
    #: (casts to text, string constants, ->>); '' when unknown, which orders as no 'C' does.
    default_collation: str = ""
    #: Text columns whose collation is the database's default rather than declared: weaker
    #: than a declared one where both meet, as in PostgreSQL.
    default_collated: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Edge:
    """A join condition between two aliases.

    ``eq``: ``left.left_col = right.right_col``.
    ``any``: ``right.right_col = ANY(left.left_col)`` (``left_col`` is an array).
    """

    kind: Literal["eq", "any"]
    left: str
    left_col: str
    right: str
    right_col: str

    def other(self, alias: str) -> str:
        return self.right if alias == self.left else self.left


@dataclass(frozen=True)
class OutputPlan:
    name: str
    sql: str  # as the user wrote it (PostgreSQL)
    spark_sql: str  # runs over one view per alias, named by view()
    key: tuple[str, ...]  # output key columns
    columns: tuple[str, ...]  # output columns, in order
    aliases: Mapping[str, TableInfo]  # alias -> table
    left_joined: frozenset[str]  # aliases that an outer join can null out
    edges: tuple[Edge, ...]
    mode: Literal["root", "group"]
    anchor: str  # root alias or group alias ("" for a global aggregate)
    anchor_cols: tuple[str, ...]  # root PK or group columns (source names)
    partition_cols: tuple[str, ...]  # output columns holding anchor_cols, same order
    used_columns: Mapping[str, frozenset[str]]  # alias -> source columns the SQL reads
    unordered_columns: frozenset[str] = field(default_factory=frozenset)  # JSON/array aggs without ORDER BY
    json_columns: frozenset[str] = field(default_factory=frozenset)  # JSON text in the output

    def view(self, alias: str) -> str:
        """The Spark view holding ``alias``'s rows during a recompute.

        One view per alias, not per table: in a self-join each alias sees
        only the rows fetched for it.
        """
        return f"txj__{self.name}__{list(self.aliases).index(alias)}"

    def all_views(self) -> str:
        """The Spark view a small recompute's views all select from (``SparkEngine._register``)."""
        return f"txj__{self.name}__all"

    @property
    def tables(self) -> set[QualifiedName]:
        return {t.name for t in self.aliases.values()}

    def index_columns(self) -> dict[QualifiedName, set[str]]:
        """Columns the replica store must index for this plan's lookups."""
        out: dict[QualifiedName, set[str]] = {}
        for e in self.edges:
            for alias, col in ((e.left, e.left_col), (e.right, e.right_col)):
                out.setdefault(self.aliases[alias].name, set()).add(col)
        if self.mode == "group" and self.anchor:
            out.setdefault(self.aliases[self.anchor].name, set()).update(self.anchor_cols)
        return out

    def array_columns(self) -> dict[QualifiedName, set[str]]:
        """Array columns used by ``= ANY()`` joins: indexed element by element."""
        out: dict[QualifiedName, set[str]] = {}
        for e in self.edges:
            if e.kind == "any":
                out.setdefault(self.aliases[e.left].name, set()).add(e.left_col)
        return out


# -- shared by the planner's modules ----------------------------------------------


class PG(Postgres):
    """sqlglot's PostgreSQL with array indexes kept as written: its own shifts an index it can
    type as an integer to count from 0 and folds it (ai[length(t)] became length(t) - 1), while
    one it cannot type stays as written, so the two could not be told apart."""

    INDEX_OFFSET = 0


def refuse(output: str, what: str, fix: str, node: exp.Expression | None = None) -> UnsupportedQuery:
    """The error for a construct txjoin cannot maintain: what it is, where, and how to do without it."""
    snippet = f" (`{node.sql(dialect=PG)[:120]}`)" if node is not None else ""
    return UnsupportedQuery(
        f"output {output!r}: {what}{snippet} cannot be maintained incrementally: {fix}",
        output=output,
        construct=what,
    )


@dataclass
class Analysis:
    """What analysis has learnt of one output's SQL so far; the type rules and
    translation read it too (aliases' column types, the edges)."""

    output: str
    aliases: dict[str, TableInfo] = field(default_factory=dict)
    left_joined: set[str] = field(default_factory=set)
    edges: list[Edge] = field(default_factory=list)
    used: dict[str, set[str]] = field(default_factory=dict)


def any_array(node: exp.Expression) -> exp.Column | None:
    """The array column of ``ANY(col)``, the shape of an ``any`` :class:`Edge`; None otherwise."""
    if isinstance(node, exp.Any):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Column):
            return inner
    return None
