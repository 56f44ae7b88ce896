"""PostgreSQL column-type rules: which join and group columns txjoin can follow
by their stored value, and the types of expressions that decide where Spark
must be told to compute as PostgreSQL does (docs/types.md).

Types are spelt as :attr:`TableInfo.types` gives them ('int4', '_int4',
'numeric(10,2)'); an unknown type (None) means no check and no rewrite.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from txjoin.join.plan.model import Analysis, refuse

__all__ = [
    "AVG_SCALE",
    "FLOAT_TYPES",
    "INT_TYPES",
    "NUMERIC_SCALE",
    "SPARK_INT",
    "base_type",
    "cast_type",
    "check_edge_types",
    "check_group_types",
    "numeric_ps",
]

INT_TYPES = ("int2", "int4", "int8")  # all written as JSON numbers
_TEXT_TYPES = ("text", "varchar")  # same text, same comparison
FLOAT_TYPES = ("float4", "float8")


def base_type(t: str) -> str:
    """``t`` without its modifiers: 'numeric(10,2)' -> 'numeric'."""
    return t.split("(", 1)[0]


def numeric_ps(t: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of 'numeric(p,s)'; None for anything else."""
    if base_type(t) != "numeric" or "(" not in t:
        return None
    p, _, sc = t[len("numeric(") : -1].partition(",")
    return int(p), int(sc or 0)


# -- join and group keys --------------------------------------------------------
#
# The replica store finds join partners (and group members) by the Debezium
# JSON text of a value, so two values PostgreSQL calls equal must be written
# the same way; otherwise rows that match in PostgreSQL are never fetched.


def _spelling_problem(t: str) -> str | None:
    """Why two equal values of type ``t`` may be written differently (None: they cannot)."""
    if t.startswith("_"):
        return _spelling_problem(t[1:])
    base = base_type(t)
    if base == "numeric" and numeric_ps(t) is None:
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
    if t1 in INT_TYPES and t2 in INT_TYPES:
        return True
    if t1 in _TEXT_TYPES and t2 in _TEXT_TYPES:
        return True
    ps1, ps2 = numeric_ps(t1), numeric_ps(t2)
    return ps1 is not None and ps2 is not None and ps1[1] == ps2[1]


def _describe(a: Analysis, alias: str, col: str, t: str) -> str:
    return f"{alias}.{col} ({a.aliases[alias].name}.{col}: {t})"


_SAME_TYPE_FIX = (
    "give both columns the same type at the source (smallint, integer and bigint mix freely, as do "
    "text and varchar; numeric(p,s) needs the same scale s); a cast in the SQL cannot be a join key"
)


def check_edge_types(a: Analysis) -> None:
    """Refuse joins whose two columns can write equal values differently."""
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
        elif any(t.startswith("_") or base_type(t) in ("json", "jsonb") for t in (lt, rt)):
            raise refuse(
                a.output,
                f"an equality join on an array or JSON column: {left} = {right}",
                "txjoin indexes join columns by their stored value and only supports scalar join keys; "
                "join on scalar columns, or on `scalar_col = ANY(array_col)`",
            )
        if _same_spelling(lt, rt):
            continue
        if lt == rt:
            raise refuse(
                a.output,
                f"a join on {left} = {right}",
                f"{_spelling_problem(lt)}, and txjoin finds matching rows by the stored value, so it "
                "would miss matches; declare the columns with a type whose equal values are written alike "
                "(numeric(p,s), char(n), text...)",
            )
        raise refuse(
            a.output,
            f"a join between columns of different types: {left} = {right}",
            "equal values of these types are written differently and txjoin finds matching rows by the "
            f"stored value, so it would miss matches; {_SAME_TYPE_FIX}",
        )


def check_group_types(a: Analysis, alias: str, cols: Iterable[str]) -> None:
    """Refuse GROUP BY columns whose equal values can be written differently."""
    for c in cols:
        t = a.aliases[alias].types.get(c)
        problem = _spelling_problem(t) if t is not None else None
        if problem is not None and t is not None:
            raise refuse(
                a.output,
                f"GROUP BY {_describe(a, alias, c, t)}",
                f"{problem}, and txjoin fetches a group's rows by the stored value, so groups would be "
                "split; declare the column with a type whose equal values are written alike",
            )


# -- expression types -----------------------------------------------------------


#: PostgreSQL types of sqlglot's cast targets (numeric: see cast_type).
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
SPARK_INT = {"int2": "SMALLINT", "int4": "INT", "int8": "BIGINT"}
#: Scale Spark gets for PostgreSQL's unconstrained numeric: Spark's own default
#: for arbitrary-precision decimals (the join stage reads such columns the same
#: way: txjoin.join.engine.NUMERIC_SCALE).
NUMERIC_SCALE = 18
#: avg() over integers and numeric(p, s <= 12) runs on DECIMAL(38, 12), so
#: Spark's result has s + 4 = 16 fractional digits, as PostgreSQL's usually has.
AVG_SCALE = 12


def cast_type(to: exp.DataType) -> str | None:
    if to.this == exp.DataType.Type.DECIMAL:
        try:
            params = [int(p.this.name) for p in to.expressions]
        except (TypeError, ValueError, AttributeError):
            return None
        if not params:
            return "numeric"
        return f"numeric({params[0]},{params[1] if len(params) > 1 else 0})"
    if to.expressions:
        return None  # varchar(n) cuts, timestamp(p) rounds, float(p) picks real or double: not taken
    return _CAST_TYPES.get(to.this)
