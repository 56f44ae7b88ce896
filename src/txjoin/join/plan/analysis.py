"""Analyse an output's PostgreSQL SQL and plan how to maintain it
(:func:`plan_output`): resolve tables, aliases and columns, turn join
conditions into edges, refuse what cannot be maintained by recomputing
partitions, and choose the partitions (root or group mode).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from txjoin.errors import UnsupportedQuery
from txjoin.join.plan import gate
from txjoin.join.plan.allowlist import INT4_MAX
from txjoin.join.plan.model import PG, Analysis, Edge, OutputPlan, TableInfo, any_array, refuse
from txjoin.join.plan.translate import translate
from txjoin.join.plan.typerules import base_type, cast_type, check_edge_types, check_group_types
from txjoin.pg.names import QualifiedName

__all__ = ["plan_output"]


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


def _column_alias(col: exp.Column, a: Analysis) -> str:
    """The alias a column reference belongs to (qualifying unqualified ones)."""
    if col.table:
        if col.table not in a.aliases:
            raise UnsupportedQuery(
                f"output {a.output!r}: column {col.sql(dialect=PG)} names "
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


def _aliases_in(node: exp.Expression, a: Analysis) -> set[str]:
    return {_column_alias(c, a) for c in node.find_all(exp.Column)}


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _classify(cond: exp.Expression, a: Analysis, joined: str | None) -> None:
    """Record ``cond`` as a join edge, or accept it as a one-table filter.

    ``joined``: the alias a LEFT JOIN's ON clause belongs to. There, a
    condition between two other tables only decides whether ``joined``
    matches; it does not relate their rows, so it cannot be an edge.
    """
    touched = _aliases_in(cond, a)
    if len(touched) <= 1:
        return
    if joined is not None and joined not in touched:
        raise refuse(
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
            arr = any_array(other)
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
    raise refuse(
        a.output,
        "a join condition that is not an equality of two columns (or `col = ANY(array_col)`)",
        "txjoin finds affected rows through equality lookups; rewrite the condition as "
        "column equalities, or move one-table conditions into WHERE",
        cond,
    )


def _check_supported(select: exp.Select, output: str) -> None:
    if select.args.get("with_") or select.args.get("with"):
        raise refuse(output, "a WITH clause", "inline the common table expression")
    for kind, what in (
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("distinct", None),
    ):
        node = select.args.get(kind)
        if node is not None and what is not None:
            raise refuse(output, what, "an output table holds all rows; drop it", node)
        if kind == "distinct" and node is not None and node.args.get("on") is not None:
            raise refuse(output, "DISTINCT ON", "use GROUP BY with aggregates", node)
    for sub in select.find_all(exp.Subquery, exp.Union, exp.Intersect, exp.Except, exp.Exists):
        raise refuse(output, "a subquery or set operation", "express it with joins", sub)  # type: ignore[arg-type]
    for node in select.find_all(exp.Window):
        raise refuse(output, "a window function", "window functions span rows of other partitions", node)
    for node in select.find_all(exp.WithinGroup, exp.PercentileCont, exp.PercentileDisc, exp.Mode):
        func = node.this if isinstance(node, exp.WithinGroup) else node
        fname = func.name
        if isinstance(func, exp.Func) and not isinstance(func, exp.Anonymous):
            fname = func.sql_name()
        raise refuse(
            output,
            f"the ordered-set aggregate {fname.lower()}() WITHIN GROUP",
            "txjoin has no exact Spark translation for ordered-set aggregates (sqlglot would turn "
            "percentile_cont into the approximate percentile_approx); compute it from the output table",
            node,
        )
    for node in select.find_all(exp.Anonymous):
        if node.name.upper() in _NONDETERMINISTIC:
            raise refuse(
                output,
                f"the function {node.name}()",
                "its result depends on when it runs, not on the data",
                node,
            )
    for node in select.find_all(*_NONDETERMINISTIC_NODES):
        raise refuse(
            output,
            "a time, random or session function",
            "its result depends on when and where it runs, not on the data",
            node,
        )
    for lit in select.find_all(exp.Literal):
        if lit.is_string and lit.this.strip().lower() in _TIME_WORDS:
            raise refuse(
                output,
                f"the time literal '{lit.this}'",
                "its value depends on when the statement runs, not on the data",
                lit,
            )


def _from_clause(
    select: exp.Select, tables: Mapping[QualifiedName, TableInfo], a: Analysis
) -> list[tuple[exp.Join, str]]:
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise UnsupportedQuery(f"output {a.output!r}: the SQL has no FROM clause", output=a.output)
    sources: list[exp.Expression] = [from_.this, *from_.expressions] if from_.expressions else [from_.this]
    joins: list[tuple[exp.Join, str]] = []

    def add(t: exp.Expression) -> str:
        if not isinstance(t, exp.Table):
            raise refuse(a.output, "a FROM item that is not a table", "use captured tables only", t)
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
            raise refuse(
                a.output,
                f"{side or kind} JOIN",
                "only INNER and LEFT joins are maintained; rewrite a RIGHT JOIN as a LEFT JOIN",
                j,
            )
        if j.args.get("using"):
            raise refuse(a.output, "JOIN ... USING", "write the join with ON a.col = b.col", j)
        alias = add(j.this)
        if side == "LEFT":
            a.left_joined.add(alias)
        joins.append((j, alias))
    return joins


def _output_columns(select: exp.Select, output: str) -> list[tuple[str, exp.Expression]]:
    cols = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            raise refuse(output, "SELECT *", "list the output columns", e)
        name = e.alias if isinstance(e, exp.Alias) else (_default_name(e) or "?column?")
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


#: Names PostgreSQL gives unaliased calls that sqlglot parses into its own node types.
_CALL_NAMES: dict[type[exp.Expression], str] = {
    exp.JSONArrayAgg: "json_agg",
    exp.ArrayAgg: "array_agg",
    exp.GroupConcat: "string_agg",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.Case: "case",
    exp.Coalesce: "coalesce",
    exp.Nullif: "nullif",
    exp.Greatest: "greatest",
    exp.Least: "least",
}



def _default_name(e: exp.Expression) -> str | None:
    """The name PostgreSQL gives an unaliased output column (its FigureColname):
    a column's name, a function's, a cast's operand's (else the type's); None
    for '?column?' (operators, constants)."""
    if isinstance(e, exp.Paren | exp.Filter | exp.Bracket):
        return _default_name(e.this)  # agg(...) FILTER (...) is agg's; arr[i] is arr's
    if isinstance(e, exp.Array):
        return "array"
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Cast):
        inner = _default_name(e.this)
        target = cast_type(e.to)  # a cast of an unnamed expression is named after its type: 1::int is int4
        return inner if inner is not None else (base_type(target) if target else None)
    if isinstance(e, exp.Anonymous):
        return e.name.lower()
    for cls, name in _CALL_NAMES.items():
        if isinstance(e, cls):
            return name
    if isinstance(e, exp.Func) and not isinstance(e, exp.Binary | exp.Unary | exp.Predicate):
        return e.sql_name().lower()
    return None


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
    select = _parse(name, sql)
    a = _analyse_joins(select, tables, name)
    s = _read_select(select, a, key)
    gate.implicit_casts(select, a)  # after _read_select has qualified every column
    gate.check(select, a)
    p = _choose_partitions(a, key, s)
    spark_sql, unordered = translate(select, a, name, s.columns)
    json_cols = frozenset(n for n, e in s.columns if _is_json(e))
    return OutputPlan(
        name=name,
        sql=sql,
        spark_sql=spark_sql,
        key=key,
        columns=tuple(n for n, _ in s.columns),
        aliases=dict(a.aliases),
        left_joined=frozenset(a.left_joined),
        edges=tuple(a.edges),
        mode=p.mode,
        anchor=p.anchor,
        anchor_cols=p.anchor_cols,
        partition_cols=p.partition_cols,
        used_columns={k: frozenset(v) for k, v in a.used.items()},
        unordered_columns=frozenset(unordered),
        json_columns=json_cols,
    )


def _parse(name: str, sql: str) -> exp.Select:
    """The one SELECT statement ``sql`` must be."""
    if re.search(r"\bdate_part\s*\(", sql, re.IGNORECASE):
        # sqlglot parses date_part as extract, whose type (numeric) differs from date_part's (float8).
        raise refuse(name, "date_part()", "write extract(field FROM value), which returns numeric")
    try:
        statements = sqlglot.parse(sql, read=PG)
    except ParseError as e:
        raise UnsupportedQuery(
            f"output {name!r}: the SQL does not parse as PostgreSQL: {e}", output=name
        ) from None
    statements = [s for s in statements if s is not None]
    _check_json_keys(name, sql)
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise UnsupportedQuery(f"output {name!r}: the SQL must be exactly one SELECT statement", output=name)
    # PostgreSQL folds unquoted identifiers to lower case: `FROM Orders` reads orders.
    select: exp.Select = normalize_identifiers(statements[0], dialect=PG)
    return select


def _check_json_keys(name: str, sql: str) -> None:
    """Refuse ``->``/``->>`` with a number PostgreSQL reads as no integer (1.5, 1e3, 99999999999):
    it has no jsonb -> numeric or -> bigint, while sqlglot reads them as a key or an index."""
    tokens = Postgres().tokenize(sql)
    for i, tok in enumerate(tokens[:-1]):
        if tok.token_type not in (TokenType.ARROW, TokenType.DARROW):
            continue
        nxt, sign = tokens[i + 1], 1
        if nxt.token_type == TokenType.DASH and i + 2 < len(tokens):
            nxt, sign = tokens[i + 2], -1
        if nxt.token_type != TokenType.NUMBER:
            continue
        text = nxt.text
        if not text.isdigit() or not -INT4_MAX - 1 <= sign * int(text) <= INT4_MAX:
            raise refuse(
                name,
                f"the operator {tok.text} with the key {'-' if sign < 0 else ''}{text}",
                "PostgreSQL takes a text key ('name') or an integer index (0, -1) there, and "
                "refuses other numbers",
            )


def _analyse_joins(select: exp.Select, tables: Mapping[QualifiedName, TableInfo], name: str) -> Analysis:
    """Refuse what cannot be maintained, then resolve the tables and turn the
    ON and WHERE conditions into join edges (checking their column types)."""
    _check_supported(select, name)
    a = Analysis(name)
    joins = _from_clause(select, tables, a)
    for j, alias in joins:
        for cond in _conjuncts(j.args.get("on")):
            _classify(cond, a, joined=alias if alias in a.left_joined else None)
    where = select.args.get("where")
    for cond in _conjuncts(where.this if where is not None else None):
        _classify(cond, a, joined=None)
    _check_connected(a)
    check_edge_types(a)
    return a


@dataclass(frozen=True)
class _SelectList:
    """What partitioning needs of the SELECT list and GROUP BY."""

    columns: list[tuple[str, exp.Expression]]  # output column name -> expression, in order
    group: list[exp.Expression]  # GROUP BY expressions
    aggregated: bool
    plain: dict[str, tuple[str, str]]  # output column name -> (alias, column) for plain column references


def _read_select(select: exp.Select, a: Analysis, key: tuple[str, ...]) -> _SelectList:
    """Name the output columns, resolve every column the SQL reads (recording
    it in ``a.used``) and check that the key is made of output columns."""
    out_cols = _output_columns(select, a.output)
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
            f"output {a.output!r}: key column(s) {missing} are not output columns {col_names}",
            output=a.output,
        )
    # Output column name -> (alias, column) for plain column references.
    plain: dict[str, tuple[str, str]] = {}
    for n, expr in out_cols:
        if isinstance(expr, exp.Column):
            plain[n] = (_column_alias(expr, a), expr.name)
    return _SelectList(out_cols, group_exprs, aggregated, plain)


@dataclass(frozen=True)
class _Partitions:
    """How the output is split into partitions (see :class:`OutputPlan`)."""

    mode: Literal["root", "group"]
    anchor: str = ""  # "" for a global aggregate
    anchor_cols: tuple[str, ...] = ()
    partition_cols: tuple[str, ...] = ()


def _choose_partitions(a: Analysis, key: tuple[str, ...], s: _SelectList) -> _Partitions:
    """Root mode when the key (or GROUP BY) holds the primary key of a table no
    outer join can null out; otherwise group mode for aggregates; else refuse."""
    candidates: list[str] = []
    if not s.aggregated:
        key_refs = {s.plain[k] for k in key if k in s.plain}
        candidates = [
            al for al, info in a.aliases.items() if all((al, c) in key_refs for c in info.primary_key)
        ]
    else:
        group_refs = {(_column_alias(g, a), g.name) for g in s.group if isinstance(g, exp.Column)}
        candidates = [
            al for al, info in a.aliases.items() if all((al, c) in group_refs for c in info.primary_key)
        ]
    candidates = [c for c in candidates if c not in a.left_joined]
    if candidates:
        return _root_partitions(a, key, s, candidates[0])
    if s.aggregated:
        return _group_partitions(a, s)
    raise UnsupportedQuery(
        f"output {a.output!r}: the key {list(key)} does not contain the primary key of a table "
        "that every output row comes from (the FROM table or an inner-joined one): add that "
        "primary key to the output and the key",
        output=a.output,
    )


def _root_partitions(a: Analysis, key: tuple[str, ...], s: _SelectList, anchor: str) -> _Partitions:
    """One partition per row of ``anchor``: its primary key must be output columns."""
    name = a.output
    anchor_cols = a.aliases[anchor].primary_key
    by_ref = {v: k for k, v in s.plain.items()}
    if not all((anchor, c) in by_ref for c in anchor_cols):
        raise UnsupportedQuery(
            f"output {name!r}: the primary key {list(anchor_cols)} of {a.aliases[anchor].name} "
            f"(alias {anchor!r}), which identifies each output row, must be output columns: "
            "add it to the SELECT list",
            output=name,
        )
    partition_cols = tuple(by_ref[(anchor, c)] for c in anchor_cols)
    if not s.aggregated and not set(partition_cols) <= set(key):
        raise UnsupportedQuery(f"output {name!r}: the key must include {list(partition_cols)}", output=name)
    return _Partitions("root", anchor, anchor_cols, partition_cols)


def _group_partitions(a: Analysis, s: _SelectList) -> _Partitions:
    """One partition per value of the GROUP BY columns, all of one preserved
    table; a single one for an aggregate without GROUP BY."""
    name = a.output
    if not all(isinstance(g, exp.Column) for g in s.group):
        raise refuse(name, "GROUP BY an expression", "group by plain columns of one table")
    owners = {_column_alias(g, a) for g in s.group if isinstance(g, exp.Column)}
    if len(owners) > 1:
        raise refuse(
            name,
            "GROUP BY columns of several tables that do not include a primary key",
            "group by the primary key of one table, or by columns of a single table",
        )
    if not owners:
        return _Partitions("group")
    anchor = owners.pop()
    if anchor in a.left_joined:
        raise refuse(
            name,
            "GROUP BY columns of an outer-joined table",
            "group by columns of the preserved side",
        )
    anchor_cols = tuple(g.name for g in s.group if isinstance(g, exp.Column))
    check_group_types(a, anchor, anchor_cols)
    by_ref = {v: k for k, v in s.plain.items()}
    if not all((anchor, c) in by_ref for c in anchor_cols):
        raise UnsupportedQuery(
            f"output {name!r}: the GROUP BY columns {list(anchor_cols)} must be output columns",
            output=name,
        )
    partition_cols = tuple(by_ref[(anchor, c)] for c in anchor_cols)
    return _Partitions("group", anchor, anchor_cols, partition_cols)


def _is_json(e: exp.Expression) -> bool:
    """Whether an output expression yields JSON (compared as parsed JSON)."""
    if isinstance(e, exp.JSONArrayAgg | exp.JSONObject | exp.JSONObjectAgg | exp.JSONExtract):
        return True
    if isinstance(e, exp.Anonymous) and e.name.upper() in (
        "JSON_BUILD_OBJECT", "JSONB_BUILD_OBJECT", "JSON_BUILD_ARRAY", "JSONB_BUILD_ARRAY",
        "TO_JSON", "TO_JSONB",
        "JSONB_AGG", "JSON_AGG", "ROW_TO_JSON",
    ):  # fmt: skip
        return True
    return isinstance(e, exp.Cast) and e.to.this in (exp.DataType.Type.JSON, exp.DataType.Type.JSONB)


def _check_connected(a: Analysis) -> None:
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
