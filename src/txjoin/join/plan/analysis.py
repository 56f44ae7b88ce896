"""Plan an output: analyse its PostgreSQL SQL, decide how to maintain it, and
translate it for Spark.

An output is maintained by recomputing *partitions* of it: per micro-batch we
find the partitions the released changes can affect and re-run the SQL on
just the rows those partitions need. A partition is either

- ``root`` mode: one row of the *root* table, the table whose primary key the
  output key (or GROUP BY) contains and which no outer join can null out
  (each order in seed 003's query is a partition); or
- ``group`` mode: one value of the GROUP BY columns, all taken from a single
  table (``GROUP BY owner_id``), or the one global group of an aggregate
  without GROUP BY (a ledger's total).

What cannot be maintained this way is refused with :class:`UnsupportedQuery`
naming the construct: joins other than inner and left, join conditions other
than equality (or ``x = ANY(array)``), joins between columns whose types
write equal values differently, subqueries, set operations, window
functions, ordered-set aggregates, LIMIT, non-deterministic functions, tables
that are not captured.

Translation uses sqlglot (PostgreSQL -> Spark) plus rewrites for what its
Spark output lacks: ``json_agg`` / ``json_build_object`` / ``array_agg``
(made deterministic: unordered aggregates are sorted) and ``= ANY(array)``;
and, where the column types (:attr:`TableInfo.types`) or literals say Spark
would compute a different value, integer division, casts to integer types,
``round(float)``, casts to unconstrained ``numeric`` and ``avg`` (see
docs/types.md).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from txjoin.errors import UnsupportedQuery
from txjoin.pg.names import QualifiedName

__all__ = ["Edge", "OutputPlan", "TableInfo", "plan_output"]


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


_NONDETERMINISTIC = {
    "AGE",  # age(x) is relative to now (two-argument age is refused too, for simplicity)
    "PG_BACKEND_PID",
    "UUID_GENERATE_V4",
    "SETSEED",
    "INET_CLIENT_ADDR",
    "NOW",
    "RANDOM",
    "RAND",
    "CLOCK_TIMESTAMP",
    "STATEMENT_TIMESTAMP",
    "TRANSACTION_TIMESTAMP",
    "TIMEOFDAY",
    "GEN_RANDOM_UUID",
    "UUID",
    "NEXTVAL",
    "TXID_CURRENT",
}
_NONDETERMINISTIC_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, n)
    for n in (
        "CurrentTimestamp", "CurrentDate", "CurrentTime", "CurrentDatetime", "Localtimestamp", "Localtime",
        "Rand", "CurrentUser", "SessionUser", "CurrentRole", "CurrentSchema", "CurrentDatabase",
        "CurrentCatalog",
    )
    if hasattr(exp, n)
)  # fmt: skip
#: Date/time literals PostgreSQL resolves when the statement runs.
_TIME_WORDS = {"now", "today", "tomorrow", "yesterday"}


def _refuse(output: str, what: str, fix: str, node: exp.Expression | None = None) -> UnsupportedQuery:
    snippet = f" (`{node.sql(dialect='postgres')[:120]}`)" if node is not None else ""
    return UnsupportedQuery(
        f"output {output!r}: {what}{snippet} cannot be maintained incrementally: {fix}",
        output=output,
        construct=what,
    )


@dataclass
class _Analysis:
    output: str
    aliases: dict[str, TableInfo] = field(default_factory=dict)
    left_joined: set[str] = field(default_factory=set)
    edges: list[Edge] = field(default_factory=list)
    used: dict[str, set[str]] = field(default_factory=dict)


def _resolve_table(t: exp.Table, tables: Mapping[QualifiedName, TableInfo], output: str) -> TableInfo:
    schema = t.db or "public"
    name = QualifiedName(schema, t.name)
    info = tables.get(name)
    if info is None:
        raise UnsupportedQuery(
            f"output {output!r} reads table {name}, which no source captures: add it to a "
            "source's tables (it needs a primary key) or change the SQL",
            output=output,
            table=str(name),
        )
    return info


def _column_alias(col: exp.Column, a: _Analysis) -> str:
    """The alias a column reference belongs to (qualifying unqualified ones)."""
    if col.table:
        if col.table not in a.aliases:
            raise UnsupportedQuery(
                f"output {a.output!r}: column {col.sql(dialect='postgres')} names "
                f"{col.table!r}, which is not a table or alias in the FROM clause",
                output=a.output,
            )
        alias = col.table
    else:
        owners = [al for al, info in a.aliases.items() if col.name in info.columns]
        if len(owners) != 1:
            raise UnsupportedQuery(
                f"output {a.output!r}: column {col.name!r} is "
                + ("ambiguous" if owners else "not a column of any table in the FROM clause")
                + ": qualify it with its table alias",
                output=a.output,
            )
        alias = owners[0]
        col.set("table", exp.to_identifier(alias))
    if col.name not in a.aliases[alias].columns:
        raise UnsupportedQuery(
            f"output {a.output!r}: {a.aliases[alias].name} has no column {col.name!r}",
            output=a.output,
            table=str(a.aliases[alias].name),
            column=col.name,
        )
    a.used.setdefault(alias, set()).add(col.name)
    return alias


def _aliases_in(node: exp.Expression, a: _Analysis) -> set[str]:
    return {_column_alias(c, a) for c in node.find_all(exp.Column)}


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _any_array(node: exp.Expression) -> exp.Column | None:
    if isinstance(node, exp.Any):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Column):
            return inner
    return None


def _classify(cond: exp.Expression, a: _Analysis, joined: str | None) -> None:
    """Record ``cond`` as a join edge, or accept it as a one-table filter.

    ``joined``: the alias a LEFT JOIN's ON clause belongs to. There, a
    condition between two other tables only decides whether ``joined``
    matches; it does not relate their rows, so it cannot be an edge.
    """
    touched = _aliases_in(cond, a)
    if len(touched) <= 1:
        return
    if joined is not None and joined not in touched:
        raise _refuse(
            a.output,
            f"a condition in the ON clause of LEFT JOIN {joined} that does not involve {joined}",
            "it decides only whether the outer-joined table matches, which txjoin cannot follow; "
            "move it to WHERE if it should filter rows, or join the tables it names on their own",
            cond,
        )
    if isinstance(cond, exp.EQ):
        left, right = cond.this, cond.expression
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            la, ra = _column_alias(left, a), _column_alias(right, a)
            if la != ra:
                a.edges.append(Edge("eq", la, left.name, ra, right.name))
                return
        for scalar, other in ((left, right), (right, left)):
            arr = _any_array(other)
            if isinstance(scalar, exp.Column) and arr is not None:
                a.edges.append(
                    Edge(
                        "any",
                        _column_alias(arr, a),
                        arr.name,
                        _column_alias(scalar, a),
                        scalar.name,
                    )
                )
                return
    raise _refuse(
        a.output,
        "a join condition that is not an equality of two columns (or `col = ANY(array_col)`)",
        "txjoin finds affected rows through equality lookups; rewrite the condition as "
        "column equalities, or move one-table conditions into WHERE",
        cond,
    )


def _check_supported(select: exp.Select, output: str) -> None:
    if select.args.get("with_") or select.args.get("with"):
        raise _refuse(output, "a WITH clause", "inline the common table expression")
    for kind, what in (
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("distinct", None),
    ):
        node = select.args.get(kind)
        if node is not None and what is not None:
            raise _refuse(output, what, "an output table holds all rows; drop it", node)
        if kind == "distinct" and node is not None and node.args.get("on") is not None:
            raise _refuse(output, "DISTINCT ON", "use GROUP BY with aggregates", node)
    for sub in select.find_all(exp.Subquery, exp.Union, exp.Intersect, exp.Except, exp.Exists):
        raise _refuse(output, "a subquery or set operation", "express it with joins", sub)  # type: ignore[arg-type]
    for node in select.find_all(exp.Window):
        raise _refuse(output, "a window function", "window functions span rows of other partitions", node)
    for node in select.find_all(exp.WithinGroup, exp.PercentileCont, exp.PercentileDisc, exp.Mode):
        func = node.this if isinstance(node, exp.WithinGroup) else node
        fname = func.name
        if isinstance(func, exp.Func) and not isinstance(func, exp.Anonymous):
            fname = func.sql_name()
        raise _refuse(
            output,
            f"the ordered-set aggregate {fname.lower()}() WITHIN GROUP",
            "txjoin has no exact Spark translation for ordered-set aggregates (sqlglot would turn "
            "percentile_cont into the approximate percentile_approx); compute it from the output table",
            node,
        )
    for node in select.find_all(exp.Anonymous):
        if node.name.upper() in _NONDETERMINISTIC:
            raise _refuse(
                output,
                f"the function {node.name}()",
                "its result depends on when it runs, not on the data",
                node,
            )
    for node in select.find_all(*_NONDETERMINISTIC_NODES):
        raise _refuse(
            output,
            "a time, random or session function",
            "its result depends on when and where it runs, not on the data",
            node,
        )
    for lit in select.find_all(exp.Literal):
        if lit.is_string and lit.this.strip().lower() in _TIME_WORDS:
            raise _refuse(
                output,
                f"the time literal '{lit.this}'",
                "its value depends on when the statement runs, not on the data",
                lit,
            )


def _from_clause(
    select: exp.Select, tables: Mapping[QualifiedName, TableInfo], a: _Analysis
) -> list[tuple[exp.Join, str]]:
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise UnsupportedQuery(f"output {a.output!r}: the SQL has no FROM clause", output=a.output)
    sources: list[exp.Expression] = [from_.this, *from_.expressions] if from_.expressions else [from_.this]
    joins: list[tuple[exp.Join, str]] = []

    def add(t: exp.Expression) -> str:
        if not isinstance(t, exp.Table):
            raise _refuse(a.output, "a FROM item that is not a table", "use captured tables only", t)
        info = _resolve_table(t, tables, a.output)
        alias = t.alias_or_name
        if alias in a.aliases:
            raise UnsupportedQuery(
                f"output {a.output!r}: alias {alias!r} is used twice: give each table its own alias",
                output=a.output,
            )
        a.aliases[alias] = info
        return alias

    for t in sources:
        add(t)
    for j in select.args.get("joins") or []:
        side = (j.side or "").upper()
        kind = (j.kind or "").upper()
        if side in ("RIGHT", "FULL") or (
            kind == "CROSS" and j.args.get("on") is None and not j.args.get("using")
        ):
            raise _refuse(
                a.output,
                f"{side or kind} JOIN",
                "only INNER and LEFT joins are maintained; rewrite a RIGHT JOIN as a LEFT JOIN",
                j,
            )
        if j.args.get("using"):
            raise _refuse(a.output, "JOIN ... USING", "write the join with ON a.col = b.col", j)
        alias = add(j.this)
        if side == "LEFT":
            a.left_joined.add(alias)
        joins.append((j, alias))
    return joins


def _output_columns(select: exp.Select, output: str) -> list[tuple[str, exp.Expression]]:
    cols = []
    for i, e in enumerate(select.expressions):
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            raise _refuse(output, "SELECT *", "list the output columns", e)
        name = e.alias_or_name if isinstance(e, exp.Alias | exp.Column) else ""
        if not name:
            name = _default_name(e, i)
        cols.append((name, e.this if isinstance(e, exp.Alias) else e))
    names = [n for n, _ in cols]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UnsupportedQuery(
            f"output {output!r}: column name(s) {sorted(dup)} appear more than once: give each "
            "output column its own alias",
            output=output,
        )
    return cols


def _default_name(e: exp.Expression, i: int) -> str:
    # PostgreSQL names an unaliased function column after the function.
    if isinstance(e, exp.JSONArrayAgg):
        return "json_agg"
    if isinstance(e, exp.Func):
        return e.sql_name().lower() if hasattr(e, "sql_name") else f"column{i + 1}"
    return f"column{i + 1}"


def _is_aggregate(node: exp.Expression) -> bool:
    return any(True for _ in node.find_all(exp.AggFunc)) or isinstance(node, exp.AggFunc)


def plan_output(
    name: str,
    sql: str,
    key: Iterable[str],
    tables: Mapping[QualifiedName, TableInfo],
) -> OutputPlan:
    """Analyse ``sql`` (PostgreSQL dialect) for output ``name`` with key ``key``."""
    key = tuple(key)
    if not key:
        raise UnsupportedQuery(
            f"output {name!r} declares no key: list the columns that identify a row", output=name
        )
    try:
        statements = sqlglot.parse(sql, read="postgres")
    except ParseError as e:
        raise UnsupportedQuery(
            f"output {name!r}: the SQL does not parse as PostgreSQL: {e}", output=name
        ) from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise UnsupportedQuery(f"output {name!r}: the SQL must be exactly one SELECT statement", output=name)
    select: exp.Select = statements[0]
    _check_supported(select, name)
    a = _Analysis(name)
    joins = _from_clause(select, tables, a)
    for j, alias in joins:
        for cond in _conjuncts(j.args.get("on")):
            _classify(cond, a, joined=alias if alias in a.left_joined else None)
    where = select.args.get("where")
    for cond in _conjuncts(where.this if where is not None else None):
        _classify(cond, a, joined=None)
    _check_connected(a)
    _check_edge_types(a)
    out_cols = _output_columns(select, name)
    for _, expr in out_cols:
        _aliases_in(expr, a)
    group = select.args.get("group")
    group_exprs: list[exp.Expression] = list(group.expressions) if group else []
    for g in group_exprs:
        _aliases_in(g, a)
    having = select.args.get("having")
    if having is not None:
        _aliases_in(having, a)
    aggregated = bool(group_exprs) or any(_is_aggregate(x) for _, x in out_cols)
    col_names = [n for n, _ in out_cols]
    missing = [k for k in key if k not in col_names]
    if missing:
        raise UnsupportedQuery(
            f"output {name!r}: key column(s) {missing} are not output columns {col_names}",
            output=name,
        )
    # Output column name -> (alias, column) for plain column references.
    plain: dict[str, tuple[str, str]] = {}
    for n, expr in out_cols:
        if isinstance(expr, exp.Column):
            plain[n] = (_column_alias(expr, a), expr.name)

    mode: Literal["root", "group"]
    anchor = ""
    anchor_cols: tuple[str, ...] = ()
    partition_cols: tuple[str, ...] = ()
    candidates: list[str] = []
    if not aggregated:
        key_refs = {plain[k] for k in key if k in plain}
        candidates = [
            al for al, info in a.aliases.items() if all((al, c) in key_refs for c in info.primary_key)
        ]
    else:
        group_refs = {(_column_alias(g, a), g.name) for g in group_exprs if isinstance(g, exp.Column)}
        candidates = [
            al for al, info in a.aliases.items() if all((al, c) in group_refs for c in info.primary_key)
        ]
    candidates = [c for c in candidates if c not in a.left_joined]
    if candidates:
        mode = "root"
        anchor = candidates[0]
        anchor_cols = a.aliases[anchor].primary_key
        by_ref = {v: k for k, v in plain.items()}
        if not all((anchor, c) in by_ref for c in anchor_cols):
            raise UnsupportedQuery(
                f"output {name!r}: the primary key {list(anchor_cols)} of {a.aliases[anchor].name} "
                f"(alias {anchor!r}), which identifies each output row, must be output columns: "
                "add it to the SELECT list",
                output=name,
            )
        partition_cols = tuple(by_ref[(anchor, c)] for c in anchor_cols)
        if not aggregated and not set(partition_cols) <= set(key):
            raise UnsupportedQuery(
                f"output {name!r}: the key must include {list(partition_cols)}", output=name
            )
    elif aggregated:
        mode = "group"
        if not all(isinstance(g, exp.Column) for g in group_exprs):
            raise _refuse(name, "GROUP BY an expression", "group by plain columns of one table")
        owners = {_column_alias(g, a) for g in group_exprs if isinstance(g, exp.Column)}
        if len(owners) > 1:
            raise _refuse(
                name,
                "GROUP BY columns of several tables that do not include a primary key",
                "group by the primary key of one table, or by columns of a single table",
            )
        if owners:
            anchor = owners.pop()
            if anchor in a.left_joined:
                raise _refuse(
                    name,
                    "GROUP BY columns of an outer-joined table",
                    "group by columns of the preserved side",
                )
            anchor_cols = tuple(g.name for g in group_exprs if isinstance(g, exp.Column))
            _check_group_types(a, anchor, anchor_cols)
            by_ref = {v: k for k, v in plain.items()}
            if not all((anchor, c) in by_ref for c in anchor_cols):
                raise UnsupportedQuery(
                    f"output {name!r}: the GROUP BY columns {list(anchor_cols)} must be output columns",
                    output=name,
                )
            partition_cols = tuple(by_ref[(anchor, c)] for c in anchor_cols)
    else:
        raise UnsupportedQuery(
            f"output {name!r}: the key {list(key)} does not contain the primary key of a table "
            "that every output row comes from (the FROM table or an inner-joined one): add that "
            "primary key to the output and the key",
            output=name,
        )
    spark_sql, unordered = _translate(select, a, name, out_cols)
    json_cols = frozenset(n for n, e in out_cols if _is_json(e))
    return OutputPlan(
        name=name,
        sql=sql,
        spark_sql=spark_sql,
        key=key,
        columns=tuple(col_names),
        aliases=dict(a.aliases),
        left_joined=frozenset(a.left_joined),
        edges=tuple(a.edges),
        mode=mode,
        anchor=anchor,
        anchor_cols=tuple(anchor_cols),
        partition_cols=tuple(partition_cols),
        used_columns={k: frozenset(v) for k, v in a.used.items()},
        unordered_columns=frozenset(unordered),
        json_columns=json_cols,
    )


def _is_json(e: exp.Expression) -> bool:
    """Whether an output expression yields JSON (compared as parsed JSON)."""
    if isinstance(e, exp.JSONArrayAgg | exp.JSONObject | exp.JSONObjectAgg):
        return True
    if isinstance(e, exp.Anonymous) and e.name.upper() in (
        "JSON_BUILD_OBJECT", "JSONB_BUILD_OBJECT", "JSON_BUILD_ARRAY", "JSONB_BUILD_ARRAY",
        "TO_JSON", "TO_JSONB",
        "JSONB_AGG", "JSON_AGG", "ROW_TO_JSON",
    ):  # fmt: skip
        return True
    return isinstance(e, exp.Cast) and e.to.this in (exp.DataType.Type.JSON, exp.DataType.Type.JSONB)


def _check_connected(a: _Analysis) -> None:
    aliases = list(a.aliases)
    if len(aliases) <= 1:
        return
    adj: dict[str, set[str]] = {al: set() for al in aliases}
    for e in a.edges:
        adj[e.left].add(e.right)
        adj[e.right].add(e.left)
    seen = {aliases[0]}
    todo = [aliases[0]]
    while todo:
        for n in adj[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    if len(seen) != len(aliases):
        lonely = [al for al in aliases if al not in seen]
        raise UnsupportedQuery(
            f"output {a.output!r}: table(s) {lonely} are not joined to the others by an equality "
            "(a cross join): every output row would depend on every row of them; join them on "
            "a column",
            output=a.output,
        )


# -- column types ---------------------------------------------------------------
#
# The replica store finds join partners (and group members) by the Debezium
# JSON text of a value, so two values PostgreSQL calls equal must be written
# the same way; otherwise rows that match in PostgreSQL are never fetched.

_INT_TYPES = ("int2", "int4", "int8")  # all written as JSON numbers
_TEXT_TYPES = ("text", "varchar")  # same text, same comparison


def _base(t: str) -> str:
    return t.split("(", 1)[0]


def _numeric_ps(t: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of 'numeric(p,s)'; None for anything else."""
    if _base(t) != "numeric" or "(" not in t:
        return None
    p, _, sc = t[len("numeric(") : -1].partition(",")
    return int(p), int(sc or 0)


def _spelling_problem(t: str) -> str | None:
    """Why two equal values of type ``t`` may be written differently (None: they cannot)."""
    if t.startswith("_"):
        return _spelling_problem(t[1:])
    base = _base(t)
    if base == "numeric" and _numeric_ps(t) is None:
        return "numeric without a declared scale keeps each value's own scale (1.5 and 1.50 are equal)"
    if base == "bpchar" and "(" not in t:
        return "bpchar without a length keeps trailing blanks that comparisons ignore"
    if base in ("json", "jsonb"):
        return "equal JSON documents can be written differently"
    if base == "interval":
        return "equal intervals can be written differently ('1 day' and '24:00:00')"
    if base == "citext":
        return "citext compares case-insensitively but values keep their case"
    return None


def _same_spelling(t1: str, t2: str) -> bool:
    """Whether equal values of types ``t1`` and ``t2`` are written the same way."""
    if t1 == t2:
        return _spelling_problem(t1) is None
    if t1 in _INT_TYPES and t2 in _INT_TYPES:
        return True
    if t1 in _TEXT_TYPES and t2 in _TEXT_TYPES:
        return True
    ps1, ps2 = _numeric_ps(t1), _numeric_ps(t2)
    return ps1 is not None and ps2 is not None and ps1[1] == ps2[1]


def _describe(a: _Analysis, alias: str, col: str, t: str) -> str:
    return f"{alias}.{col} ({a.aliases[alias].name}.{col}: {t})"


_SAME_TYPE_FIX = (
    "give both columns the same type at the source (smallint, integer and bigint mix freely, as do "
    "text and varchar; numeric(p,s) needs the same scale s); a cast in the SQL cannot be a join key"
)


def _check_edge_types(a: _Analysis) -> None:
    for e in a.edges:
        lt = a.aliases[e.left].types.get(e.left_col)
        rt = a.aliases[e.right].types.get(e.right_col)
        if lt is None or rt is None:
            continue
        left, right = _describe(a, e.left, e.left_col, lt), _describe(a, e.right, e.right_col, rt)
        if e.kind == "any":
            if not lt.startswith("_"):
                continue  # not an array: PostgreSQL rejects the SQL itself
            lt = lt[1:]
        elif any(t.startswith("_") or _base(t) in ("json", "jsonb") for t in (lt, rt)):
            raise _refuse(
                a.output,
                f"an equality join on an array or JSON column: {left} = {right}",
                "txjoin indexes join columns by their stored value and only supports scalar join keys; "
                "join on scalar columns, or on `scalar_col = ANY(array_col)`",
            )
        if _same_spelling(lt, rt):
            continue
        if lt == rt:
            raise _refuse(
                a.output,
                f"a join on {left} = {right}",
                f"{_spelling_problem(lt)}, and txjoin finds matching rows by the stored value, so it "
                "would miss matches; declare the columns with a type whose equal values are written alike "
                "(numeric(p,s), char(n), text...)",
            )
        raise _refuse(
            a.output,
            f"a join between columns of different types: {left} = {right}",
            "equal values of these types are written differently and txjoin finds matching rows by the "
            f"stored value, so it would miss matches; {_SAME_TYPE_FIX}",
        )


def _check_group_types(a: _Analysis, alias: str, cols: Iterable[str]) -> None:
    for c in cols:
        t = a.aliases[alias].types.get(c)
        problem = _spelling_problem(t) if t is not None else None
        if problem is not None and t is not None:
            raise _refuse(
                a.output,
                f"GROUP BY {_describe(a, alias, c, t)}",
                f"{problem}, and txjoin fetches a group's rows by the stored value, so groups would be "
                "split; declare the column with a type whose equal values are written alike",
            )


# -- translation ----------------------------------------------------------------


def _lambda_v() -> exp.Lambda:
    return exp.Lambda(
        this=exp.Dot(this=exp.to_identifier("e"), expression=exp.to_identifier("v")),
        expressions=[exp.to_identifier("e")],
    )


def _agg_rewrite(node: exp.Expression, unordered: list[bool], output: str) -> exp.Expression:
    """json_agg / array_agg / string_agg -> deterministic Spark expressions.

    Elements are collected as (sort key, value) pairs and sorted: by the
    aggregate's ORDER BY, with PostgreSQL's NULL placement (ASC NULLS LAST,
    DESC NULLS FIRST unless written otherwise), or by the value itself when
    there is no ORDER BY (the output then compares as a multiset). Over no
    rows the result is NULL, as in PostgreSQL.
    """
    if not isinstance(node, exp.JSONArrayAgg | exp.ArrayAgg | exp.GroupConcat):
        return node
    fname = {exp.JSONArrayAgg: "json_agg", exp.ArrayAgg: "array_agg", exp.GroupConcat: "string_agg"}[
        type(node)
    ]
    inner = node.this
    order: exp.Order | None = None
    if isinstance(inner, exp.Order):
        order = inner
        inner = inner.this
    if node.args.get("distinct") or isinstance(inner, exp.Distinct):
        raise _refuse(output, f"{fname}(DISTINCT ...)", "aggregate distinct values with GROUP BY first", node)
    value = inner
    if order is not None:
        keys = list(order.expressions)
        descs = {bool(k.args.get("desc")) for k in keys}
        if len(descs) > 1:
            raise _refuse(
                output, f"a {fname} ORDER BY mixing ASC and DESC", "order by keys in one direction", node
            )
        asc = not descs.pop()
        fields: list[exp.Expression] = []
        for i, k in enumerate(keys):
            nulls_first = bool(k.args.get("nulls_first"))
            # sort_array puts false before true ascending, true first descending.
            flag_is_null = (asc and not nulls_first) or (not asc and nulls_first)
            flag: exp.Expression = exp.Is(this=k.this.copy(), expression=exp.Null())
            if not flag_is_null:
                flag = exp.Not(this=flag)
            fields += [exp.Literal.string(f"n{i}"), flag, exp.Literal.string(f"k{i}"), k.this.copy()]
        k_struct: exp.Expression = exp.Anonymous(this="named_struct", expressions=fields)
    else:
        if isinstance(node, exp.GroupConcat):
            raise _refuse(
                output,
                "string_agg without ORDER BY",
                "its order is undefined in PostgreSQL, so no copy can match it: add ORDER BY inside the call",
                node,
            )
        unordered.append(True)
        k_struct = value.copy()
        asc = True
    pair = exp.Anonymous(
        this="named_struct",
        expressions=[exp.Literal.string("k"), k_struct, exp.Literal.string("v"), value.copy()],
    )
    collected = exp.Anonymous(this="collect_list", expressions=[pair])
    sorted_ = exp.Anonymous(this="sort_array", expressions=[collected, exp.Boolean(this=asc)])
    arr: exp.Expression = exp.Anonymous(this="transform", expressions=[sorted_, _lambda_v()])
    count: exp.Expression = exp.Anonymous(this="size", expressions=[collected.copy()])
    if isinstance(node, exp.JSONArrayAgg):
        result: exp.Expression = exp.Anonymous(this="to_json", expressions=[arr])
    elif isinstance(node, exp.GroupConcat):
        sep = node.args.get("separator") or exp.Literal.string(",")
        result = exp.Anonymous(this="array_join", expressions=[arr, sep.copy()])
        # string_agg skips NULL values: all-NULL input gives NULL too.
        not_null = exp.Lambda(
            this=exp.Not(
                this=exp.Is(
                    this=exp.Dot(this=exp.to_identifier("e"), expression=exp.to_identifier("v")),
                    expression=exp.Null(),
                )
            ),
            expressions=[exp.to_identifier("e")],
        )
        count = exp.Anonymous(
            this="size", expressions=[exp.Anonymous(this="filter", expressions=[collected.copy(), not_null])]
        )
    else:
        result = arr
    return exp.If(this=exp.EQ(this=count, expression=exp.Literal.number(0)), true=exp.Null(), false=result)


#: PostgreSQL types of sqlglot's cast targets (numeric: see _cast_type).
_CAST_TYPES: dict[object, str] = {
    exp.DataType.Type.SMALLINT: "int2",
    exp.DataType.Type.INT: "int4",
    exp.DataType.Type.BIGINT: "int8",
    exp.DataType.Type.FLOAT: "float4",
    exp.DataType.Type.DOUBLE: "float8",
    exp.DataType.Type.TEXT: "text",
    exp.DataType.Type.VARCHAR: "varchar",
    exp.DataType.Type.BOOLEAN: "bool",
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp",
    exp.DataType.Type.TIMESTAMPTZ: "timestamptz",
}
_SPARK_INT = {"int2": "SMALLINT", "int4": "INT", "int8": "BIGINT"}
_FLOAT_TYPES = ("float4", "float8")
#: Scale Spark gets for PostgreSQL's unconstrained numeric: Spark's own default
#: for arbitrary-precision decimals (the join stage reads such columns the same
#: way: txjoin.join.engine.NUMERIC_SCALE).
NUMERIC_SCALE = 18
#: avg() over integers and numeric(p, s <= 12) runs on DECIMAL(38, 12), so
#: Spark's result has s + 4 = 16 fractional digits, as PostgreSQL's usually has.
_AVG_SCALE = 12


def _cast_type(to: exp.DataType) -> str | None:
    if to.this == exp.DataType.Type.DECIMAL:
        try:
            params = [int(p.this.name) for p in to.expressions]
        except (TypeError, ValueError, AttributeError):
            return None
        if not params:
            return "numeric"
        return f"numeric({params[0]},{params[1] if len(params) > 1 else 0})"
    return _CAST_TYPES.get(to.this)


def _promote(types: Iterable[str | None]) -> str | None:
    """The type PostgreSQL gives arithmetic (or CASE/COALESCE) over ``types``."""
    bases = [None if t is None else _base(t) for t in types]
    if not bases or any(b is None for b in bases):
        return None
    if all(b in _INT_TYPES for b in bases):
        return max(bases, key=lambda b: _INT_TYPES.index(b or ""))
    numeric_family = (*_INT_TYPES, *_FLOAT_TYPES, "numeric")
    if not all(b in numeric_family for b in bases):
        return bases[0] if len(set(bases)) == 1 else None
    if any(b in _FLOAT_TYPES for b in bases):
        return "float4" if all(b == "float4" for b in bases) else "float8"
    return "numeric"


def _pg_type(node: exp.Expression, a: _Analysis) -> str | None:
    """The PostgreSQL type of ``node`` where it is plain to see; None when unknown."""
    if isinstance(node, exp.Paren):
        return _pg_type(node.this, a)
    if isinstance(node, exp.Column):
        info = a.aliases.get(node.table)
        return info.types.get(node.name) if info is not None else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return None  # 'unknown' until PostgreSQL resolves it from its context
        if node.this.isdigit():
            v = int(node.this)
            return "int4" if v < 2**31 else "int8" if v < 2**63 else "numeric"
        return "numeric"  # 2.5 and 1e3 are numeric constants in PostgreSQL
    if isinstance(node, exp.Cast):
        return _cast_type(node.to)
    if isinstance(node, exp.Neg | exp.Abs | exp.Max | exp.Min):
        return _pg_type(node.this, a)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
        return _promote([_pg_type(node.this, a), _pg_type(node.expression, a)])
    if isinstance(node, exp.Count):
        return "int8"
    if isinstance(node, exp.Length):
        return "int4"
    if isinstance(node, exp.Sum | exp.Avg):
        arg = _pg_type(node.this, a)
        base = None if arg is None else _base(arg)
        if base in _FLOAT_TYPES:
            return base if isinstance(node, exp.Sum) else "float8"
        if isinstance(node, exp.Sum) and base in ("int2", "int4"):
            return "int8"
        return "numeric" if base in (*_INT_TYPES, "numeric") else None
    if isinstance(node, exp.Coalesce):
        return _promote([_pg_type(x, a) for x in [node.this, *node.expressions]])
    if isinstance(node, exp.Case):
        branches = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
        return _promote([_pg_type(b, a) for b in branches if b is not None and not isinstance(b, exp.Null)])
    return None


def _typed_rewrites(tree: exp.Expression, a: _Analysis) -> None:
    """Rewrite, in place, what Spark computes differently from PostgreSQL for
    the operand types at hand (docs/types.md). Unknown types: no rewrite."""
    actions: list[tuple[exp.Expression, str]] = []
    # Decide on the untouched tree, then rewrite children before parents.
    for node in tree.find_all(exp.Div, exp.Cast, exp.Round, exp.Avg, bfs=False):
        if isinstance(node, exp.Div):
            t = _pg_type(node, a)
            if t in _INT_TYPES:
                actions.append((node, _SPARK_INT[t]))  # PostgreSQL truncates; Spark's / is fractional
        elif isinstance(node, exp.Cast):
            target = _cast_type(node.to)
            src = _pg_type(node.this, a)
            if target in _INT_TYPES and src is not None and _base(src) == "numeric":
                actions.append((node, "ROUND"))  # numeric -> int rounds half away from zero
            elif target in _INT_TYPES and src in _FLOAT_TYPES:
                actions.append((node, "BROUND"))  # float -> int uses rint(): half to even
            elif target == "numeric":
                actions.append((node, "DECIMAL"))  # Spark's bare DECIMAL is DECIMAL(10,0)
        elif isinstance(node, exp.Round):
            if node.args.get("decimals") is None and _pg_type(node.this, a) in _FLOAT_TYPES:
                actions.append((node, "BROUND"))  # round(float8) is rint(): half to even
        else:
            inner = node.this
            if isinstance(inner, exp.Distinct):
                if len(inner.expressions) != 1:
                    continue
                inner = inner.expressions[0]
            arg = _pg_type(inner, a)
            ps = _numeric_ps(arg) if arg is not None else None
            fits = ps is not None and ps[1] <= _AVG_SCALE and ps[0] - ps[1] <= 38 - _AVG_SCALE
            if arg in _INT_TYPES or fits:
                actions.append((node, "AVG"))
    for node, action in reversed(actions):
        if isinstance(node, exp.Div):
            div = exp.IntDiv(this=node.this, expression=node.expression)
            node.replace(exp.Cast(this=div, to=exp.DataType.build(action)))
        elif isinstance(node, exp.Cast) and action == "DECIMAL":
            node.set("to", exp.DataType.build(f"DECIMAL(38, {NUMERIC_SCALE})"))
        elif isinstance(node, exp.Cast) and action == "ROUND":
            node.set("this", exp.Round(this=node.this))
        elif isinstance(node, exp.Cast):
            node.set("this", exp.Anonymous(this="BROUND", expressions=[node.this]))
        elif isinstance(node, exp.Round):
            node.replace(exp.Anonymous(this="BROUND", expressions=[node.this]))
        else:
            arg = node.this
            if isinstance(arg, exp.Distinct):
                arg = arg.expressions[0]
            arg.replace(exp.Cast(this=arg.copy(), to=exp.DataType.build(f"DECIMAL(38, {_AVG_SCALE})")))


def _translate(
    select: exp.Select, a: _Analysis, name: str, out_cols: list[tuple[str, exp.Expression]]
) -> tuple[str, list[str]]:
    tree = select.copy()
    tree.set("order", None)
    _typed_rewrites(tree, a)
    # Tables -> views, keeping the name the SQL uses as alias.
    order = list(a.aliases)
    for t in tree.find_all(exp.Table):
        alias = t.alias_or_name
        t.set("db", None)
        t.set("catalog", None)
        t.set("this", exp.to_identifier(f"txj__{name}__{order.index(alias)}"))
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    # Output columns get the names PostgreSQL would give them.
    new_exprs = []
    unordered_cols: list[str] = []
    for (col_name, _), e in zip(out_cols, tree.expressions, strict=True):
        body = e.this if isinstance(e, exp.Alias) else e
        flags: list[bool] = []
        body = body.transform(functools.partial(_agg_rewrite, unordered=flags, output=name))
        if flags:
            unordered_cols.append(col_name)
        new_exprs.append(exp.Alias(this=body, alias=exp.to_identifier(col_name, quoted=True)))
    tree.set("expressions", new_exprs)

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.upper() in (
            "JSON_BUILD_OBJECT",
            "JSONB_BUILD_OBJECT",
        ):
            args = node.expressions
            if len(args) % 2:
                raise UnsupportedQuery(f"output {name!r}: json_build_object needs key/value pairs")
            struct = exp.Anonymous(this="named_struct", expressions=list(args))
            inside_agg = node.find_ancestor(exp.AggFunc, exp.Anonymous)
            if inside_agg is not None and (
                isinstance(inside_agg, exp.AggFunc)
                or (
                    isinstance(inside_agg, exp.Anonymous)
                    and inside_agg.name.lower() in ("named_struct", "collect_list")
                )
            ):
                return struct
            return exp.Anonymous(this="to_json", expressions=[struct])
        if isinstance(node, exp.EQ):
            for scalar, other in ((node.this, node.expression), (node.expression, node.this)):
                arr = _any_array(other)
                if arr is not None:
                    return exp.Anonymous(this="array_contains", expressions=[arr.copy(), scalar.copy()])
        return node

    # transform() does not descend into what it replaced: repeat for nested calls.
    out: exp.Expression = tree
    for _ in range(32):
        before = out.sql(dialect="spark")
        out = out.transform(rewrite)
        if out.sql(dialect="spark") == before:
            break
    return out.sql(dialect="spark"), unordered_cols
