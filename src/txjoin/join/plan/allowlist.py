"""What an output's SQL may use, and nothing else (default deny).

Every function, operator, cast, aggregate and column type the planner
accepts is an :class:`Entry` here, with PostgreSQL's semantics and how txjoin
computes them on Spark; :func:`txjoin.join.plan.gate.check` refuses anything
else when the spec loads, naming the construct and the output. :func:`pg_type` infers each
expression's PostgreSQL type from the same entries, so an entry's argument
types are checked too. README's "What an output's SQL may use" is generated
from :data:`ENTRIES` (``python -m txjoin.join.plan.allowlist``), and the
conformance suite (tests/property/test_conformance.py) runs a differential
case for every entry on PostgreSQL and through txjoin's Spark translation.
"""

# ruff: noqa: E501  (ENTRIES reads as a table, one construct per line)

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from txjoin.join.plan.jsontext import json_value_type
from txjoin.join.plan.model import Analysis
from txjoin.join.plan.typerules import FLOAT_TYPES, INT_TYPES, base_type, cast_type, numeric_ps

__all__ = [
    "ANONYMOUS",
    "ENTRIES",
    "INT4_MAX",
    "NODES",
    "NULL",
    "ORDERED",
    "STRUCTURE",
    "UNKNOWN",
    "Entry",
    "args_of",
    "cast_result",
    "cast_target",
    "constant",
    "entry_for",
    "in_readme",
    "markdown",
    "pg_type",
    "type_class",
]

Kind = Literal["type", "operator", "function", "aggregate", "cast"]
Typer = Callable[[Sequence[str]], "str | None"]


@dataclass(frozen=True)
class Entry:
    kind: Kind
    #: As PostgreSQL spells it: '/', 'lower', 'sum', 'integer -> numeric', 'timestamptz'.
    name: str
    #: The operand types it takes, for readers: 'integer, integer'.
    args: str
    #: PostgreSQL's behaviour, and how txjoin computes the same on Spark.
    semantics: str
    #: Result type from operand types (type labels, see :func:`type_class`); None: not these operands.
    typer: Typer

    @property
    def id(self) -> str:
        """What the conformance suite keys its cases by."""
        return f"{self.kind} {self.name}"


# -- type classes -----------------------------------------------------------------

_CLASSES = {
    **{t: "int" for t in INT_TYPES},
    **{t: "float" for t in FLOAT_TYPES},
    "numeric": "numeric",
    "text": "text",
    "varchar": "text",
    "bpchar": "bpchar",
    "bool": "bool",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "time": "time",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "jsonb",
    "bytea": "bytea",
}
#: Array element types an output may read.
_ARRAY_ELEMENTS = ("int", "text", "bool", "uuid")
UNKNOWN = "unknown"  # a string constant: PostgreSQL types it from its context
NULL = "null"


def type_class(t: str) -> str | None:
    """'int', 'numeric', 'float', 'text', 'bpchar', 'enum', 'array', ...; None: not supported."""
    if t in (UNKNOWN, NULL):
        return t
    if t.startswith("enum:"):
        return "enum"
    if t.startswith("_"):
        element = type_class(t[1:])
        return "array" if element in _ARRAY_ELEMENTS else None
    return _CLASSES.get(base_type(t))


_NUMBERS = ("int", "numeric", "float")
ORDERED = (*_NUMBERS, "text", "bool", "date", "timestamp", "timestamptz", "time", "uuid", "enum")


def promote(types: Sequence[str]) -> str | None:
    """The type PostgreSQL resolves for arithmetic, CASE, COALESCE... over ``types`` (None: refuse)."""
    known = [t for t in types if t not in (NULL, UNKNOWN)]
    if not known:
        return "text" if UNKNOWN in types else NULL
    classes = {type_class(t) for t in known}
    if UNKNOWN in types and not classes <= {"text", "enum"}:
        return None  # PostgreSQL reads the constant as the other side's type; Spark casts differently
    if classes <= {"int"}:
        return max(known, key=lambda t: INT_TYPES.index(t))
    if classes <= set(_NUMBERS):
        if "float" in classes:
            return "float4" if all(t == "float4" for t in known) else "float8"
        return known[0] if len(set(known)) == 1 else "numeric"
    if classes <= {"text"}:
        return "text" if len(set(known)) > 1 else known[0]
    if len(set(known)) == 1:
        return known[0]
    return None


# -- typers -----------------------------------------------------------------------


def _of(*classes: str, result: str | Callable[[Sequence[str]], str | None] | None = None) -> Typer:
    """Operands all of ``classes`` (string constants allowed where text is); result
    ``result`` (a type, a function of the operands) or, by default, their promotion."""

    def typer(args: Sequence[str]) -> str | None:
        for t in args:
            c = type_class(t)
            if c == NULL:
                continue
            if c == UNKNOWN:
                if "text" not in classes:
                    return None
            elif c not in classes:
                return None
        if result is None:
            return promote(args)
        return result if isinstance(result, str) else result(args)

    return typer


def _comparison(ordering: bool) -> Typer:
    def typer(args: Sequence[str]) -> str | None:
        p = promote(args)
        if p is None:
            return None
        c = type_class(p)
        allowed = ORDERED if ordering else (*ORDERED, "bpchar", "bytea")
        return "bool" if c in (*allowed, NULL) else None

    return typer


_EQUALITY = _comparison(ordering=False)


def _div(args: Sequence[str]) -> str | None:
    p = promote(args)
    return p if p is not None and type_class(p) in _NUMBERS else None


def _sum(args: Sequence[str]) -> str | None:
    t = args[0]
    c = type_class(t)
    if c == "int":
        return "int8" if t in ("int2", "int4") else "numeric"
    return "numeric" if c == "numeric" else None


def _first(args: Sequence[str]) -> str | None:
    return args[0] if args else None


def _round(args: Sequence[str]) -> str | None:
    c = type_class(args[0])
    if len(args) == 2:
        return "numeric" if c in ("int", "numeric") and type_class(args[1]) == "int" else None
    # round(integer) is round(double precision) in PostgreSQL: the preferred numeric type.
    return "float8" if c in ("int", "float") else ("numeric" if c == "numeric" else None)


def _union(args: Sequence[str]) -> str | None:
    """The type CASE, COALESCE, GREATEST and LEAST resolve: as :func:`promote`, except that
    PostgreSQL resolves real beside an integer or numeric to real, where txjoin's Spark SQL
    computes in double (greatest(real 16777216, int 16777217) is 16777216 in PostgreSQL)."""
    classes = {type_class(t) for t in args}
    if "float4" in args and "float8" not in args and classes & {"int", "numeric"}:
        return None
    return promote(args)


def _in_list(args: Sequence[str]) -> str | None:
    return _EQUALITY(args) if _union(args) is not None else None


def _nullif(args: Sequence[str]) -> str | None:
    t = promote(args)
    return args[0] if t is not None and type_class(t) == type_class(args[0]) else None


def _any(result: str) -> Typer:
    return lambda args: result


def _json_object(jsonb: bool) -> Typer:
    def typer(args: Sequence[str]) -> str | None:
        ok = all(json_value_type(t, jsonb=jsonb) for t in args)
        return ("jsonb" if jsonb else "json") if ok else None

    return typer


def _json_agg(args: Sequence[str]) -> str | None:
    return "json" if len(args) == 1 and json_value_type(args[0], jsonb=False) else None


def _array_of(args: Sequence[str]) -> str | None:
    return f"_{args[0]}" if type_class(args[0]) in _ARRAY_ELEMENTS else None


# -- the entries ------------------------------------------------------------------

_E = Entry
_NUM = "integer, numeric(p,s) or double precision (mixed types promote as in PostgreSQL)"
ENTRIES: tuple[Entry, ...] = (
    # Column types (an output may read a column only of these types).
    _E("type", "smallint, integer, bigint", "", "Spark SMALLINT / INT / BIGINT; overflow raises an error in both.", _any("int4")),
    _E("type", "numeric(p,s)", "", "Spark DECIMAL(p,s) (p <= 38); a value that does not fit stops the pipeline, never rounds.", _any("numeric")),
    _E("type", "numeric", "", "Spark DECIMAL(38,18); a value with more digits stops the pipeline, never rounds.", _any("numeric")),
    _E("type", "real, double precision", "", "Spark FLOAT / DOUBLE.", _any("float8")),
    _E("type", "boolean", "", "Spark BOOLEAN.", _any("bool")),
    _E("type", "text, varchar(n)", "", "Spark STRING, compared byte for byte (the source's collation decides ordering: see COLLATE \"C\").", _any("text")),
    _E("type", "char(n)", "", "Spark STRING with PostgreSQL's padding; only = and <> between char(n) of one length (other uses ignore trailing blanks in PostgreSQL).", _any("bpchar")),
    _E("type", "date", "", "Spark DATE. A string constant compared with a date (=, <, BETWEEN, IN, ...) is read as a date, as in PostgreSQL; only ISO '2024-01-31' of a real day is accepted (other forms depend on DateStyle).", _any("date")),
    _E("type", "timestamp", "", "Spark TIMESTAMP_NTZ, microseconds. A string constant compared with one is read as a timestamp, as in PostgreSQL; only ISO forms of real days and times are accepted: '2024-01-31', '2024-01-31 13:45', '2024-01-31T13:45:07.5'.", _any("timestamp")),
    _E("type", "timestamptz", "", "Spark TIMESTAMP (an instant), microseconds.", _any("timestamptz")),
    _E("type", "time", "", "Spark STRING holding PostgreSQL's text, 'HH:MM:SS' with the fraction's trailing zeros dropped and 24:00:00 kept: one text per value, ordered as the times are, so comparisons, min/max, GROUP BY and join keys agree. Written to Delta as that text (Delta has no time-of-day type). Constants ('10:00'::time) are refused: PostgreSQL reads several spellings of one time.", _any("time")),
    _E("type", "uuid", "", "Spark STRING in PostgreSQL's lower-case form.", _any("uuid")),
    _E("type", "bytea", "", "Spark BINARY.", _any("bytea")),
    _E("type", "json, jsonb", "", "Spark STRING holding the text PostgreSQL prints (json as written, jsonb in its normal form); output and embedded in JSON as is, compared byte for byte.", _any("jsonb")),
    _E("type", "domains", "", "As their base type (CHECK constraints only restrict the values): capture, the replicas and Spark read a domain over bigint as bigint.", _any("int8")),
    _E("type", "enum", "", "Spark STRING holding the label; =, <> compare labels, ordering (<, min, max, ORDER BY) follows the declared order (pg_enum.enumsortorder), as the label's position in the list; a constant must be one of the labels.", _any("enum")),
    _E("type", "arrays of integer, text, boolean, uuid", "", "Spark ARRAY (one dimension; NULL elements kept).", _any("_int4")),
    # Operators.
    _E("operator", "+", _NUM, "Spark +; integer overflow raises an error in both.", _of(*_NUMBERS)),
    _E("operator", "-", _NUM, "Spark -; also unary minus.", _of(*_NUMBERS)),
    _E("operator", "*", _NUM, "Spark *; decimal products keep every digit (no precision loss).", _of(*_NUMBERS)),
    _E("operator", "/", "integers, double precision; numeric where the result is rounded to a fixed scale", "Integers truncate toward zero (`CAST(a DIV b AS INT)`); floats divide (overflow raises); division by zero raises in both. A numeric quotient has a scale PostgreSQL picks per value (select_div_scale), which one Delta decimal column cannot hold: it is accepted as `round(a / b, k)` or `(a / b)::numeric(p,s)`, over operands whose scales the column types fix, and computed exactly as PostgreSQL does (div_var, then the rounding) by txjoin's UDF.", _div),
    _E("operator", "%", "integer, integer", "Spark %: the result has the dividend's sign, as in PostgreSQL.", _of("int")),
    _E("operator", "=, <>", "two values of one type", "Spark = / <>; text compares byte for byte (equal under the deterministic collations txjoin accepts).", _EQUALITY),
    _E("operator", "<, <=, >, >=", "numbers, C-collated text, boolean, date, timestamp, timestamptz, uuid", "Spark's comparison; text only under the C collation (see COLLATE \"C\").", _comparison(ordering=True)),
    _E("operator", "AND, OR, NOT", "boolean", "Three-valued logic, the same in both.", _of("bool", result="bool")),
    _E("operator", "IS [NOT] DISTINCT FROM", "two values of one type", "= / <> with NULL as a value, in both.", _EQUALITY),
    _E("operator", "IS [NOT] NULL", "any", "The same in both.", _any("bool")),
    _E("operator", "IN (list)", "values of one type", "As = over each element; NULL when no match and a NULL element, in both. real among integers or numerics is refused (PostgreSQL compares them as real).", _in_list),
    _E("operator", "BETWEEN", "as <=", "x >= a AND x <= b.", _comparison(ordering=True)),
    _E("operator", "LIKE", "text, text constant", "Spark LIKE with the same `%`, `_` and backslash escape.", _of("text", result="bool")),
    _E("operator", "||", "text, text; text and an integer, numeric(p,s), boolean, enum, uuid or time", "Concatenation; NULL if either side is NULL, in both. A non-text side is cast to text, as PostgreSQL does (see the casts to text); date (which prints by DateStyle) and char(n) (which loses its padding) are refused.", _of("text", result="text")),
    _E("operator", "->", "jsonb, a text or integer constant (an integer of PostgreSQL's int4 range)", "The member under that key (or the array element at that index, from 0; negative from the end) as jsonb, printed as PostgreSQL prints jsonb; NULL for a missing key, an index past either end, or the wrong kind of document, in both. Computed by txjoin's UDF on the jsonb text (join/pgjson.py): numbers keep their printed digits.", _of("jsonb", result="jsonb")),
    _E("operator", "->>", "jsonb, a text or integer constant", "As ->, as text: a string member unescaped, a JSON null as SQL NULL, others as -> prints them. Its text has the database's default collation, so ordering it needs COLLATE \"C\" unless that is C. (On json, which keeps its text as written, -> and ->> are refused.)", _of("jsonb", result="text")),
    _E("operator", "= ANY(array)", "a value, an array of its type", "array_contains; only as a condition of WHERE or ON joined by AND, where PostgreSQL's NULL (no match, a NULL element) and Spark's false both drop the row.", _any("bool")),
    _E("operator", "array[i]", "an array, an integer", "The i-th element counting from 1; NULL for an index past either end (Spark: try_element_at, guarded for i < 1, which Spark counts from the end).", lambda args: args[0][1:] if args[0].startswith("_") and type_class(args[1]) == "int" else None),
    _E("operator", 'COLLATE "C"', "text", 'Orders text by its bytes (code points), as Spark does: write `x COLLATE "C"` to order text of a database whose collation is not C. Text no text column feeds (string constants, casts to text, ->>) has the database\'s default collation, as in PostgreSQL; beside a C-collated column, the column\'s decides.', _of("text", result="text")),
    _E("operator", "CASE", "boolean conditions, results of one type", "Spark CASE; result types promote as in PostgreSQL (real beside an integer or numeric is refused: real in PostgreSQL, double in Spark). `CASE x WHEN ...` over json or jsonb is refused (equality by value in PostgreSQL).", _union),
    # Functions.
    _E("function", "coalesce", "values of one type", "Spark COALESCE (real beside an integer or numeric is refused, as for CASE).", _union),
    _E("function", "nullif", "two values of one type", "Spark NULLIF; over json or jsonb refused (equality by value in PostgreSQL). Its result has the first value's type in Spark, the promoted one in PostgreSQL (nullif(1, 2.2) is numeric): a second value of another kind (an integer against a numeric) is refused.", _nullif),
    _E("function", "greatest, least", "numbers, date, timestamp, timestamptz", "NULL arguments are ignored, in both (real beside an integer or numeric is refused, as for CASE).", _of(*_NUMBERS, "date", "timestamp", "timestamptz", result=_union)),
    _E("function", "abs", "a number", "Spark ABS.", _of(*_NUMBERS, result=_first)),
    _E("function", "round", "numeric or integer [, integer]; double precision", "Half away from zero for numeric (Spark ROUND on decimals); double precision, and integers (which PostgreSQL rounds as double precision), half to even (Spark BROUND on DOUBLE).", _round),
    _E("function", "length, char_length", "text", "Characters (code points), as Spark LENGTH.", _of("text", result="int4")),
    _E("function", "substring, substr", "text, a constant start >= 1 [, a constant length >= 0] (FROM/FOR or commas), each at most 2147483647", "Characters (code points) from start, as Spark's SUBSTRING; other starts and lengths (where Spark counts from the end, or PostgreSQL raises) are refused.", _of("text", result="text")),
    _E("function", "left, right", "text, a constant count >= 0 and at most 2147483647", "The first or last n characters, as Spark's LEFT / RIGHT; a negative count (all but |n| in PostgreSQL) is refused.", _of("text", result="text")),
    _E("function", "lower, upper", "text", "Case mapping follows the text's collation in PostgreSQL: under C only ASCII letters change (Spark TRANSLATE over A-Z); under an English or root ICU locale Unicode's full mapping, as Spark's LOWER/UPPER (Java) does; other locales are refused.", _of("text", result="text")),
    _E("function", "extract", "year, quarter, month, week, day, dow, isodow, doy of a date or timestamp; hour, minute, second of a timestamp", "numeric in PostgreSQL, the same values from Spark's EXTRACT; dow is 0-6 from Sunday (Spark's DAYOFWEEK - 1), isodow 1-7 from Monday, week the ISO week, second with its microseconds. (date_part, which returns double precision, is refused: sqlglot reads it as extract.)", _of("date", "timestamp", result="numeric")),
    _E("function", "date_trunc", "a constant unit (year, quarter, month, week, day, hour, minute, second), a timestamp", "Spark's DATE_TRUNC, as timestamp without time zone; week starts on Monday in both. date_trunc of a date or timestamptz depends on the server's TimeZone and is refused.", _of("timestamp", result="timestamp")),
    # Casts (source -> target).
    _E("cast", "integer -> integer", "", "Overflow raises an error in both.", _any("int4")),
    _E("cast", "numeric -> integer", "", "Rounds half away from zero: `CAST(ROUND(x) AS INT)`.", _any("int4")),
    _E("cast", "double precision -> integer", "", "rint(): half to even, `CAST(BROUND(x) AS INT)`.", _any("int4")),
    _E("cast", "integer or numeric -> numeric", "", "numeric(p,s) rounds half away from zero; bare numeric keeps every digit (DECIMAL(38,18)).", _any("numeric")),
    _E("cast", "integer or numeric -> double precision", "", "Nearest double, in both.", _any("float8")),
    _E("cast", "integer -> text", "", "Decimal digits, in both.", _any("text")),
    _E("cast", "text, varchar, enum, uuid, time -> text", "", "The same characters.", _any("text")),
    _E("cast", "numeric(p,s) -> text", "", "The value with exactly s fractional digits, in both (unconstrained numeric, whose scale varies per value, is refused).", _any("text")),
    _E("cast", "boolean -> text", "", "'true' / 'false', in both.", _any("text")),
    _E("cast", "timestamp -> date", "", "The date part, in both.", _any("date")),
    _E("cast", "date -> timestamp", "", "Midnight of that date, in both.", _any("timestamp")),
    # Aggregates.
    _E("aggregate", "count", "*, a value, DISTINCT a value", "Spark COUNT; bigint in both. DISTINCT over json or jsonb is refused: PostgreSQL compares jsonb by value (1 equals 1.0), Spark by text.", _any("int8")),
    _E("aggregate", "sum", "integer or numeric", "Exact (bigint sum of smallint/integer; numeric of bigint: SUM over DECIMAL(38,0), no bigint overflow); NULL over no rows. Sums of double precision are refused: their last digits depend on the order rows are added.", _sum),
    _E("aggregate", "avg", "integer or numeric(p,s), rounded to a fixed scale", "PostgreSQL's avg is the numeric division of the sum by the count (scale per value): accepted as `round(avg(x), k)` or `avg(x)::numeric(p,s)` and computed exactly, like `/`.", _of("int", "numeric", result="numeric")),
    _E("aggregate", "min, max", "numbers, C-collated text, date, timestamp, timestamptz, uuid, enum", "Spark MIN / MAX; text only under the C collation.", lambda args: args[0] if type_class(args[0]) in ORDERED and type_class(args[0]) != "bool" else None),
    _E("aggregate", "FILTER (WHERE ...)", "any aggregate above, a boolean condition", "Only rows passing the condition reach the aggregate (Spark's FILTER; for json_agg, array_agg and string_agg the collected pairs are filtered).", _any("bool")),
    _E("aggregate", "bool_and, bool_or", "boolean", "Spark BOOL_AND / BOOL_OR.", _of("bool", result="bool")),
    _E("aggregate", "json_agg", "integer, numeric(p,s), text, boolean, date, timestamp, time, json, jsonb, json_build_object(...) [ORDER BY ...]", "A JSON array in the ORDER BY's order (without ORDER BY compared as a multiset), written as PostgreSQL writes it: elements separated by `, `, each value's JSON text (json and jsonb embedded as their text); NULL over no rows. txjoin builds the text itself (join/plan/jsontext.py); numeric needs a declared scale, other types are refused.", _json_agg),
    _E("aggregate", "array_agg", "integer, text, boolean, uuid [ORDER BY ...]", "An array in the ORDER BY's order (without ORDER BY compared as a multiset); NULL over no rows.", _array_of),
    _E("aggregate", "string_agg", "text, text constant ORDER BY ...", "Joined in the ORDER BY's order; NULLs skipped; NULL over no non-NULL values.", _of("text", result="text")),
    _E("function", "json_build_object", "constant text keys; integer, numeric(p,s), text, boolean, date, timestamp, time, json, jsonb values", "A JSON object as PostgreSQL writes it (`{\"k\" : v, ...}`, json and jsonb values embedded as their text, timestamps as ISO 8601 with `T`); other value types are refused.", _json_object(jsonb=False)),
    _E("function", "jsonb_build_object", "constant text keys; integer, numeric(p,s), text, boolean, date, timestamp, time, jsonb values", "A jsonb object as PostgreSQL prints it: keys sorted shorter first then bytewise, a repeated key keeps its last value, `{\"k\": v, ...}`; json values (which jsonb would reformat) and other types are refused.", _json_object(jsonb=True)),
)  # fmt: skip

_BY_KEY: dict[tuple[str, str], Entry] = {}
for _e in ENTRIES:
    for _n in _e.name.replace(" -> ", "->").split(", ") if _e.kind != "cast" else [_e.name]:
        _BY_KEY.setdefault((_e.kind, _n.strip()), _e)

#: sqlglot node -> (kind, name) of its entry.
NODES: dict[type[exp.Expression], tuple[Kind, str]] = {
    exp.Add: ("operator", "+"),
    exp.Sub: ("operator", "-"),
    exp.Neg: ("operator", "-"),
    exp.Mul: ("operator", "*"),
    exp.Div: ("operator", "/"),
    exp.Mod: ("operator", "%"),
    exp.EQ: ("operator", "="),
    exp.NEQ: ("operator", "<>"),
    exp.LT: ("operator", "<"),
    exp.LTE: ("operator", "<="),
    exp.GT: ("operator", ">"),
    exp.GTE: ("operator", ">="),
    exp.NullSafeEQ: ("operator", "IS [NOT] DISTINCT FROM"),
    exp.NullSafeNEQ: ("operator", "IS [NOT] DISTINCT FROM"),
    exp.And: ("operator", "AND"),
    exp.Or: ("operator", "OR"),
    exp.Not: ("operator", "NOT"),
    exp.In: ("operator", "IN (list)"),
    exp.Between: ("operator", "BETWEEN"),
    exp.Like: ("operator", "LIKE"),
    exp.DPipe: ("operator", "||"),
    exp.Case: ("operator", "CASE"),
    exp.Collate: ("operator", 'COLLATE "C"'),
    exp.Bracket: ("operator", "array[i]"),
    exp.JSONExtract: ("operator", "->"),
    exp.JSONExtractScalar: ("operator", "->>"),
    exp.Coalesce: ("function", "coalesce"),
    exp.Nullif: ("function", "nullif"),
    exp.Greatest: ("function", "greatest"),
    exp.Least: ("function", "least"),
    exp.Abs: ("function", "abs"),
    exp.Round: ("function", "round"),
    exp.Length: ("function", "length"),
    exp.Lower: ("function", "lower"),
    exp.Substring: ("function", "substring"),
    exp.Left: ("function", "left"),
    exp.Right: ("function", "right"),
    exp.Extract: ("function", "extract"),
    exp.TimestampTrunc: ("function", "date_trunc"),
    exp.Upper: ("function", "upper"),
    exp.Count: ("aggregate", "count"),
    exp.Sum: ("aggregate", "sum"),
    exp.Avg: ("aggregate", "avg"),
    exp.Avg: ("aggregate", "avg"),
    exp.Min: ("aggregate", "min"),
    exp.Max: ("aggregate", "max"),
    exp.LogicalAnd: ("aggregate", "bool_and"),
    exp.LogicalOr: ("aggregate", "bool_or"),
    exp.JSONArrayAgg: ("aggregate", "json_agg"),
    exp.ArrayAgg: ("aggregate", "array_agg"),
    exp.GroupConcat: ("aggregate", "string_agg"),
}
ANONYMOUS: dict[str, tuple[Kind, str]] = {
    "JSON_BUILD_OBJECT": ("function", "json_build_object"),
    "JSONB_BUILD_OBJECT": ("function", "jsonb_build_object"),
}
#: Nodes that are structure, not constructs with semantics of their own.
STRUCTURE: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Alias, exp.Column,
    exp.Identifier, exp.Table, exp.TableAlias, exp.Paren, exp.Literal, exp.Null, exp.Boolean,
    exp.Ordered, exp.Order, exp.Distinct, exp.DataType, exp.DataTypeParam, exp.Star, exp.Tuple, exp.Any,
    exp.Var,  # extract's field, date_trunc's unit: checked with their call
    exp.JSONPath, exp.JSONPathRoot, exp.JSONPathKey, exp.JSONPathSubscript,  # -> and ->>'s key: checked with it
)  # fmt: skip


def entry_for(node: exp.Expression) -> Entry | None:
    """The entry a node is an instance of (None: not on the list)."""
    key = ANONYMOUS.get(node.name.upper()) if isinstance(node, exp.Anonymous) else NODES.get(type(node))
    return _BY_KEY.get(key) if key is not None else None


# -- types of expressions ---------------------------------------------------------


def cast_target(to: exp.DataType) -> str | None:
    if to.this in (exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR) and to.expressions:
        return None  # varchar(n) and char(n) truncate or pad
    return cast_type(to)


def constant(node: exp.Expression) -> str | None:
    return node.this if isinstance(node, exp.Literal) and node.is_string else None


_CASTS = {
    ("int", "int"), ("numeric", "int"), ("float", "int"), ("int", "numeric"), ("numeric", "numeric"),
    ("int", "float"), ("numeric", "float"), ("float", "float"), ("int", "text"), ("text", "text"),
    ("bpchar", "text"), ("enum", "text"), ("uuid", "text"), ("bool", "text"), ("time", "text"), ("timestamp", "date"),
    ("date", "timestamp"), ("date", "date"), ("timestamp", "timestamp"), ("bool", "bool"),
}  # fmt: skip
#: String constants a cast accepts: the forms PostgreSQL and Spark read alike.
_CONSTANTS = {
    "int": r"\s*[+-]?\d+\s*",
    "numeric": r"\s*[+-]?(\d+\.?\d*|\.\d+)\s*",
    "text": r"(?s).*",
    "date": r"\d{4}-\d{2}-\d{2}",
    "timestamp": r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?",
    "bool": r"true|false",
}


def _real_time(t: str, constant: str) -> bool:
    """A date or timestamp constant names a real one: PostgreSQL raises on 2024-02-30,
    24:00 (as the next day) or year 0 where Spark's cast differs (NULL, or no error)."""
    if t not in ("date", "timestamp"):
        return True
    day, _, clock = constant.replace("T", " ").partition(" ")
    try:
        dt.date.fromisoformat(day)
        if clock:
            hms, _, fraction = clock.partition(".")
            dt.time.fromisoformat(hms + ("." + fraction.ljust(6, "0") if fraction else ""))
    except ValueError:
        return False
    return True


def cast_result(src: str, target: str, constant: str | None = None) -> str | None:
    """The cast's result type, or None when the (source, target) pair is not on the list."""
    s, t = type_class(src), type_class(target)
    if s == NULL:
        return target
    if s == UNKNOWN:
        pattern = _CONSTANTS.get(t or "")
        if pattern is None or (
            constant is not None and not (re.fullmatch(pattern, constant) and _real_time(t or "", constant))
        ):
            return None
        return target
    if (s, t) == ("numeric", "text"):
        # With a declared scale PostgreSQL prints exactly that many digits, as Spark does for DECIMAL(p,s).
        ps = numeric_ps(src)
        return target if ps is not None and ps[1] >= 0 else None
    return target if (s, t) in _CASTS else None


def args_of(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.JSONExtract | exp.JSONExtractScalar | exp.Substring | exp.Left | exp.Right):
        return [node.this]  # the key, start, length or count is a constant, checked by text_bounds / json_key
    if isinstance(node, exp.Collate | exp.TimestampTrunc):
        return [node.this]
    if isinstance(node, exp.Extract):
        return [node.expression]
    if isinstance(node, exp.Case):
        ifs = node.args.get("ifs") or []
        out = [i.args["true"] for i in ifs]
        if node.args.get("default") is not None:
            out.append(node.args["default"])
        return out
    if isinstance(node, exp.In):
        return [node.this, *node.expressions]
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    if isinstance(node, exp.Count | exp.Sum | exp.Avg | exp.Min | exp.Max | exp.JSONArrayAgg | exp.ArrayAgg):
        inner = node.this
        if isinstance(inner, exp.Order):
            inner = inner.this
        if isinstance(inner, exp.Distinct):
            return list(inner.expressions)
        return [] if inner is None or isinstance(inner, exp.Star) else [inner]
    if isinstance(node, exp.GroupConcat):
        inner = node.this.this if isinstance(node.this, exp.Order) else node.this
        return [inner, *([node.args["separator"]] if node.args.get("separator") is not None else [])]
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)[1::2]  # json_build_object's values; keys checked apart
    if isinstance(node, exp.Round):
        return [node.this, *([node.args["decimals"]] if node.args.get("decimals") is not None else [])]
    return [
        v for k, v in node.args.items() if isinstance(v, exp.Expression) and k in ("this", "expression")
    ] + [e for e in node.args.get("expressions") or [] if isinstance(e, exp.Expression)]


#: The largest integer constant PostgreSQL reads as an integer (larger ones are bigint).
INT4_MAX = 2**31 - 1


def text_bounds(node: exp.Substring | exp.Left | exp.Right) -> bool:
    """Whether substring's start (>= 1) and length (>= 0), or left/right's count (>= 0),
    are constants where Spark's function and PostgreSQL's agree."""

    def const(e: exp.Expression | None, least: int) -> bool:
        # integer constants: PostgreSQL has no substring(text, bigint), Spark casts to int
        return (
            isinstance(e, exp.Literal)
            and not e.is_string
            and e.this.isdigit()
            and least <= int(e.this) <= INT4_MAX
        )

    if isinstance(node, exp.Substring):
        length = node.args.get("length")
        return const(node.args.get("start"), 1) and (length is None or const(length, 0))
    return const(node.expression, 0)


def json_key(node: exp.JSONExtract | exp.JSONExtractScalar) -> str | int | None:
    """The constant key (str) or index (int) of ``->`` / ``->>``; None for any other path."""
    path = node.expression
    if isinstance(path, exp.Neg) and isinstance(path.this, exp.Literal) and path.this.this.isdigit():
        return -int(path.this.this)  # jsonb ->> -1: sqlglot leaves a negative index unparsed
    parts = path.expressions if isinstance(path, exp.JSONPath) else []
    if len(parts) != 2 or not isinstance(parts[0], exp.JSONPathRoot):
        return None
    part = parts[1]
    if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
        return part.this
    if isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
        return part.this
    return None


def pg_type(node: exp.Expression, a: Analysis) -> str | None:
    """The PostgreSQL type of ``node``; None where the allowlist does not say."""
    if isinstance(node, exp.Paren | exp.Filter):
        return pg_type(node.this, a)
    if isinstance(node, exp.Column):
        info = a.aliases.get(node.table)
        return info.types.get(node.name) if info is not None else None
    if isinstance(node, exp.Null):
        return NULL
    if isinstance(node, exp.Boolean):
        return "bool"
    if isinstance(node, exp.Literal):
        if node.is_string:
            return UNKNOWN
        if node.this.isdigit():
            v = int(node.this)
            return "int4" if v < 2**31 else "int8" if v < 2**63 else "numeric"
        return "numeric"  # 2.5 and 1e3 are numeric constants in PostgreSQL
    if isinstance(node, exp.Cast):
        target = cast_target(node.to)
        src = pg_type(node.this, a)
        return None if target is None or src is None else cast_result(src, target, constant(node.this))
    if isinstance(node, exp.Is | exp.Any):
        return "bool"
    entry = entry_for(node)
    if entry is None:
        return None
    if isinstance(node, exp.EQ) and any(isinstance(x, exp.Any) for x in (node.this, node.expression)):
        return "bool"
    types = [pg_type(x, a) for x in args_of(node)]
    if any(t is None for t in types):
        return None
    return entry.typer([t for t in types if t is not None])


# -- docs ---------------------------------------------------------------------------


def markdown() -> str:
    """README's section body: one table per kind."""
    titles = {"type": "Column types", "operator": "Operators", "function": "Functions",
              "aggregate": "Aggregates", "cast": "Casts"}  # fmt: skip
    out: list[str] = []
    for kind, title in titles.items():
        out += [
            f"**{title}**",
            "",
            "| construct | operands | PostgreSQL's semantics, and txjoin's |",
            "|---|---|---|",
        ]
        for e in ENTRIES:
            if e.kind == kind:
                cells = [f"`{e.name}`", e.args or "—", e.semantics]
                out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


START, END = "<!-- allowlist:start -->", "<!-- allowlist:end -->"


def in_readme(text: str) -> str:
    """``text`` (README.md) with the tables between the allowlist markers regenerated."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{markdown()}{END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:2] == ["--readme"]:
        path = Path(sys.argv[2])
        path.write_text(in_readme(path.read_text()))
    else:
        print(markdown(), end="")
