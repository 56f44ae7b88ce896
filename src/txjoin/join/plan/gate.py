"""The default-deny check of an output's SQL against the allowlist
(:mod:`txjoin.join.plan.allowlist`): every node must be an entry applied to
operand types it takes; text ordering needs the C collation; enum constants
must be labels; a numeric quotient must be rounded to a fixed scale over
operands of fixed display scale (:func:`quotient_scale`, :func:`dscale`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from sqlglot import exp

from txjoin.faults import mutated
from txjoin.join.plan.allowlist import (
    ANONYMOUS,
    NODES,
    NULL,
    ORDERED,
    STRUCTURE,
    UNKNOWN,
    Entry,
    args_of,
    cast_result,
    cast_target,
    constant,
    entry_for,
    json_key,
    pg_type,
    text_bounds,
    type_class,
)
from txjoin.join.plan.model import PG, Analysis, refuse
from txjoin.join.plan.typerules import base_type, cast_type, numeric_ps
from txjoin.pg.catalog import NONDETERMINISTIC

__all__ = ["check", "dscale", "enum_labels", "implicit_casts", "quotient_scale"]


def check(tree: exp.Expression, a: Analysis) -> None:
    """Refuse, naming it, the first construct of ``tree`` that is not on the list
    or is applied to operand types its entry does not take."""
    for node in tree.walk():
        if not isinstance(node, exp.Expression):
            continue
        if isinstance(node, exp.Column):
            _check_column(node, a)
            continue
        if isinstance(node, exp.Literal) and not node.is_string and "e" in node.this.lower():
            raise refuse(
                a.output,
                f"the number {node.this}",
                "PostgreSQL reads a constant with an exponent as numeric, Spark as double; write it "
                "without one (1000, 0.001)",
                node,
            )
        if isinstance(node, exp.GroupConcat) and not (
            isinstance(node.args.get("separator"), exp.Literal) and node.args["separator"].is_string
        ):
            raise refuse(
                a.output,
                "string_agg() whose delimiter is not a string constant",
                "PostgreSQL joins with no delimiter where it is NULL, and Spark needs a constant; "
                "write a constant ('' for none)",
                node,
            )
        if isinstance(node, exp.Is | exp.Filter) or (
            isinstance(node, exp.If) and isinstance(node.parent, exp.Case)
        ):
            continue
        if isinstance(node, exp.Cast):
            src, target = pg_type(node.this, a), cast_target(node.to)
            if src is not None and (target is None or cast_result(src, target, constant(node.this)) is None):
                raise refuse(
                    a.output,
                    f"a cast from {_label(src)} to {node.to.sql(dialect=PG)}",
                    "txjoin accepts only the casts it computes exactly as PostgreSQL does (see "
                    "README, 'What an output's SQL may use')",
                    node,
                )
            continue
        if isinstance(node, exp.Ordered) and node.find_ancestor(exp.AggFunc) is not None:
            t = pg_type(node.this, a)
            if t is not None and type_class(t) not in ORDERED:
                raise refuse(
                    a.output, f"ORDER BY over {_label(t)}", "order by numbers, text, dates or times", node
                )
            _check_order([node.this], a, node)
            continue
        if isinstance(node, exp.Tuple) and not isinstance(node.parent, exp.Group):
            raise refuse(
                a.output,
                "a row constructor",
                "PostgreSQL compares rows field by field (NULL fields, text collations) where "
                "txjoin checks no rule; compare or test the columns one by one",
                node,
            )
        if isinstance(node, STRUCTURE):
            continue
        if isinstance(node, exp.Collate) and _collate_name(node) != "C":
            raise refuse(
                a.output,
                f"COLLATE {node.expression.sql(dialect=PG)}",
                'Spark orders text by its bytes, as PostgreSQL\'s "C" collation does; only COLLATE "C" '
                "is accepted",
                node,
            )
        if isinstance(node, exp.Lambda):
            raise refuse(
                a.output,
                "-> directly inside a function's arguments (sqlglot, which reads the SQL, takes it "
                "for a lambda)",
                f"write it in parentheses: ({node.sql(dialect=PG)})",
                node,
            )
        entry = entry_for(node)
        if entry is None:
            raise refuse(
                a.output,
                f"{_construct(node)}",
                "txjoin accepts only functions and operators it computes exactly as PostgreSQL "
                "does, and this one is not among them (see README, 'What an output's SQL may use'); "
                "compute it from the output table instead",
                node,
            )
        if isinstance(node, exp.Substring | exp.Left | exp.Right) and not text_bounds(node):
            raise refuse(
                a.output,
                f"{_construct(node)} with a start, length or count that is not a constant of the range "
                "Spark and PostgreSQL agree on",
                "write the start as an integer constant >= 1 and the length or count as one >= 0 "
                "(Spark counts a start below 1 from the end; PostgreSQL raises on a negative length)",
                node,
            )
        if isinstance(node, exp.JSONExtract | exp.JSONExtractScalar) and json_key(node) is None:
            raise refuse(
                a.output,
                f"{_construct(node)} with a key that is not a constant",
                "write the key as a text constant ('name') or the index as an integer constant (0, -1)",
                node,
            )
        if isinstance(node, exp.Anonymous):
            for key in node.expressions[0::2]:
                if not (isinstance(key, exp.Literal) and key.is_string):
                    raise refuse(
                        a.output,
                        f"{node.name.lower()} with a key that is not a text constant",
                        "write each key as a constant ('name')",
                        node,
                    )
        if isinstance(node, exp.EQ) and any(isinstance(x, exp.Any) for x in (node.this, node.expression)):
            _check_condition(node, a)
            continue
        types = [pg_type(x, a) for x in args_of(node)]
        if any(t is None for t in types):
            continue  # the operand itself is refused when the walk reaches it
        _check_json_equality(node, a)
        if isinstance(node, exp.Between):  # x >= low AND x <= high: two comparisons in PostgreSQL
            _check_order([node.this, node.args["low"]], a, node)
            _check_order([node.this, node.args["high"]], a, node)
        elif isinstance(node, _ORDERING):
            _check_order(args_of(node), a, node)
        if isinstance(node, exp.Extract | exp.TimestampTrunc):
            _check_date_field(node, a)
        if isinstance(node, exp.Lower | exp.Upper):
            case_mapping(node, a)
        if isinstance(node, exp.Avg) or (isinstance(node, exp.Div) and pg_type(node, a) == "numeric"):
            quotient_scale(node, a)
        _check_enum_constants(node, [t for t in types if t is not None], a)
        if entry.typer([t for t in types if t is not None]) is None:
            raise refuse(
                a.output,
                f"{entry.kind} {_spelling(node, entry)} over {', '.join(_label(t) for t in types if t)}",
                f"txjoin computes it exactly only over {entry.args}",
                node,
            )


def _check_json_equality(node: exp.Expression, a: Analysis) -> None:
    """Refuse the constructs that test json or jsonb values for equality: PostgreSQL compares
    jsonb by value (1 = 1.0, key order aside) and has no json equality; Spark compares the text."""
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct):
        operands, what = list(node.this.expressions), "count(DISTINCT ...)"
    elif isinstance(node, exp.Nullif):
        operands, what = [node.this, node.expression], "nullif()"
    elif isinstance(node, exp.Case) and node.this is not None:
        operands, what = [node.this], "CASE value WHEN ..."
    else:
        return
    for x in operands:
        t = pg_type(x, a)
        if t is not None and base_type(t) in ("json", "jsonb"):
            raise refuse(
                a.output,
                f"{what} over {t}",
                "PostgreSQL compares jsonb by value (1 equals 1.0) and json not at all, where Spark "
                "would compare their text; compare a member's text (->> 'key') or a cast of it instead",
                node,
            )


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ)
#: Types a string constant compared with them is read as (their ISO forms read alike in both).
_READ_AS = {"date": "DATE", "timestamp": "TIMESTAMP"}


def implicit_casts(tree: exp.Expression, a: Analysis) -> None:
    """Make two of PostgreSQL's implicit casts explicit, so the cast rules decide and
    Spark computes the same. A string constant compared with a date or a timestamp
    takes that type (``d >= '2024-01-31'`` compares dates; ISO forms of real days
    only), and the non-text side of ``||`` is cast to text."""
    nodes: list[exp.Expression] = list(tree.find_all(*_COMPARISONS, exp.Between, exp.In))
    for node in nodes:
        operands = args_of(node)
        known = {pg_type(x, a) for x in operands if constant(x) is None}
        types = [k for k in known if k is not None and k != NULL]
        if len(types) != 1 or len(known) != len(types):
            continue  # mixed, or an operand the gate refuses
        t = types[0]
        target = _READ_AS.get(type_class(t) or "")
        if target is None:
            continue
        for x in operands:
            text = constant(x)
            if text is None:
                continue
            if cast_result(UNKNOWN, t, text) is None:
                forms = "'2024-01-31'"
                if t == "timestamp":
                    forms += ", '2024-01-31 13:45' or '2024-01-31 13:45:07.5'"
                raise refuse(
                    a.output,
                    f"the constant '{text}' compared with a {_label(t)}",
                    f"PostgreSQL reads it as a {_label(t)} in many forms (some by its DateStyle, 24:00 as "
                    f"the next day, and raises on a day that does not exist); txjoin reads only ISO forms "
                    f"of real days and times, alike in both: {forms}",
                    node,
                )
            x.replace(exp.Cast(this=x.copy(), to=exp.DataType.build(target)))
    _type_concatenations(tree, a)


#: Types ``anynonarray || text`` prints as their text cast does (its SQL is ``$1::text || $2``)
#: where that cast is exact; not date (DateStyle), nor char(n) (|| drops its padding).
_PRINTED_AS_CAST = ("int", "numeric", "bool", "enum", "uuid", "time")


def _type_concatenations(tree: exp.Expression, a: Analysis) -> None:
    """``3 || 'x'`` and ``price || ' EUR'``: PostgreSQL casts the non-text side to text.
    Where that cast is on the allowlist (exact in both), make it explicit."""
    for node in reversed(list(tree.find_all(exp.DPipe))):  # inner ones first
        sides = (node.this, node.expression)
        types = [pg_type(x, a) for x in sides]
        if not any(t is not None and type_class(t) in ("text", UNKNOWN) for t in types):
            continue  # PostgreSQL needs a text side (int || int does not exist)
        for x, t in zip(sides, types, strict=True):
            if t is None or type_class(t) not in _PRINTED_AS_CAST or cast_result(t, "text") is None:
                continue
            x.replace(exp.Cast(this=x.copy(), to=exp.DataType.build("TEXT")))


def dscale(node: exp.Expression, a: Analysis) -> int | None:
    """The display scale PostgreSQL's numeric gives every value of ``node``;
    None where it varies per value (unconstrained numeric, a quotient)."""
    if isinstance(node, exp.Paren | exp.Filter):
        return dscale(node.this, a)
    t = pg_type(node, a)
    if t is None:
        return None
    if type_class(t) == "int":
        return 0
    if isinstance(node, exp.Column):
        ps = numeric_ps(t)
        return ps[1] if ps is not None and ps[1] >= 0 else None
    if isinstance(node, exp.Literal) and not node.is_string:
        exponent = Decimal(node.this).as_tuple().exponent
        return max(0, -exponent) if isinstance(exponent, int) else None
    if isinstance(node, exp.Cast):
        ps = numeric_ps(t)
        return ps[1] if ps is not None and ps[1] >= 0 else dscale(node.this, a)
    if isinstance(node, exp.Round):
        k = node.args.get("decimals")
        return int(k.this) if isinstance(k, exp.Literal) and k.this.isdigit() else None
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        d1, d2 = dscale(node.this, a), dscale(node.expression, a)
        if d1 is None or d2 is None:
            return None
        return d1 + d2 if isinstance(node, exp.Mul) else max(d1, d2)
    if isinstance(node, exp.Nullif):
        return dscale(node.this, a)
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least | exp.Case):
        branches = args_of(node)
        scales = {dscale(b, a) for b in branches if not isinstance(b, exp.Null)}
        return scales.pop() if len(scales) == 1 else None  # the chosen value's own scale otherwise
    if isinstance(node, exp.Neg | exp.Abs | exp.Sum | exp.Min | exp.Max):
        inner = node.this.expressions[0] if isinstance(node.this, exp.Distinct) else node.this
        return dscale(inner, a)
    return None


def quotient_scale(node: exp.Expression, a: Analysis) -> tuple[int, int, int, int | None]:
    """For a numeric quotient (``/`` or avg): the operands' display scales and
    the fixed scale (and precision, for a cast) its context rounds it to.
    Refuses a quotient whose scale would vary per row."""
    what = "avg()" if isinstance(node, exp.Avg) else "a numeric division"
    fix = (
        "PostgreSQL picks each quotient's scale from the operands' values (1/3.0 has 20 "
        "fractional digits, 10/4.0 has 16) and an output column has one scale: round it, as "
        f"`round({node.sql(dialect=PG)}, 6)` or `({node.sql(dialect=PG)})::numeric(20,6)`"
    )
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    k: int | None = None
    precision: int | None = None
    if isinstance(parent, exp.Round):
        decimals = parent.args.get("decimals")
        if isinstance(decimals, exp.Literal) and decimals.this.isdigit() and int(decimals.this) <= 30:
            k = int(decimals.this)
    elif isinstance(parent, exp.Cast):
        ps = numeric_ps(cast_type(parent.to) or "")
        if ps is not None and 0 <= ps[1] <= ps[0] <= 38:
            precision, k = ps
    if k is None:
        raise refuse(a.output, what + " whose result is not rounded to a fixed scale", fix, node)
    if isinstance(node, exp.Avg):
        inner = node.this.expressions[0] if isinstance(node.this, exp.Distinct) else node.this
        scales: tuple[int | None, int | None] = (dscale(inner, a), 0)
    else:
        scales = (dscale(node.this, a), dscale(node.expression, a))
    if scales[0] is None or scales[1] is None:
        raise refuse(
            a.output,
            what + " over a numeric without a declared scale",
            "PostgreSQL's quotient depends on each value's own scale, which txjoin does not keep for "
            "unconstrained numeric: declare the column numeric(p,s), or cast the operand to numeric(p,s)",
            node,
        )
    return scales[0], scales[1], k, precision


def enum_labels(a: Analysis, t: str) -> tuple[str, ...]:
    """The labels of enum type ``t`` ('enum:<typname>') in declared order."""
    for info in a.aliases.values():
        for col, labels in info.enums.items():
            if info.types.get(col) == t:
                return labels
    return ()


def _check_enum_constants(node: exp.Expression, types: list[str], a: Analysis) -> None:
    """A string constant compared with an enum must be one of its labels (PostgreSQL raises otherwise)."""
    enums = [t for t in types if type_class(t) == "enum"]
    if not enums:
        return
    labels = enum_labels(a, enums[0])
    for x in args_of(node):
        if isinstance(x, exp.Literal) and x.is_string and x.this not in labels:
            raise refuse(
                a.output,
                f"'{x.this}', which is not a label of the enum {enums[0][5:]} ({', '.join(labels)})",
                "PostgreSQL rejects the SQL: use one of the labels",
                node,
            )


def case_mapping(node: Any, a: Analysis) -> str:
    """How lower/upper map case here: 'ascii' (C: only A-Z change), 'unicode'
    (English or root ICU locales: Java's mapping is the same), else refused."""
    coll = _collation([node.this], a)
    if coll == "C":
        return "ascii"
    if coll.split("-")[0].split("_")[0].lower() in ("en", "und", "root", "") and "_" not in coll:
        return "unicode"
    raise refuse(
        a.output,
        f"{'lower' if isinstance(node, exp.Lower) else 'upper'}() under the collation {coll!r}",
        "its case mapping follows the locale, which txjoin reproduces only for C and English ICU "
        'locales; write lower(x COLLATE "C") for ASCII-only mapping',
        node,
    )


DATE_FIELDS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "ISODOW", "DOY")
TIME_FIELDS = ("HOUR", "MINUTE", "SECOND")
TRUNC_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND")


def _check_date_field(node: exp.Expression, a: Analysis) -> None:
    """extract's field and date_trunc's unit must be among those computed alike."""
    if isinstance(node, exp.Extract):
        field = node.this.name.upper() if isinstance(node.this, exp.Var | exp.Literal) else ""
        allowed = DATE_FIELDS + (TIME_FIELDS if pg_type(node.expression, a) == "timestamp" else ())
        what = f"extract({field.lower() or node.this.sql(dialect=PG)} from ...)"
    else:
        unit = node.args.get("unit")
        field = unit.name.upper() if isinstance(unit, exp.Var | exp.Literal) else ""
        allowed = TRUNC_UNITS
        what = f"date_trunc('{field.lower()}', ...)"
    if field not in allowed:
        raise refuse(
            a.output,
            what,
            f"txjoin computes only these exactly as PostgreSQL does: {', '.join(f.lower() for f in allowed)}",
            node,
        )


def _check_condition(node: exp.Expression, a: Analysis) -> None:
    """Refuse ``x = ANY(arr)`` anywhere but as an AND-ed condition of WHERE or ON."""
    parent = node.parent
    while isinstance(parent, exp.And | exp.Paren):
        parent = parent.parent
    if not isinstance(parent, exp.Where | exp.Join):
        raise refuse(
            a.output,
            "`= ANY(array)` outside a WHERE or ON condition",
            "PostgreSQL gives NULL where Spark's array_contains gives false (no match and a NULL "
            "element); use it only as a condition of WHERE or ON, joined by AND",
            node,
        )


_ORDERING = (exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between, exp.Min, exp.Max)


def _collate_name(node: exp.Collate, raw: bool = False) -> str:
    name = node.expression.name if isinstance(node.expression, exp.Column | exp.Identifier) else ""
    name = name or node.expression.sql(dialect=PG).strip('"')
    return "C" if name in _BYTE_ORDER and not raw else name


_BYTE_ORDER = ("C", "POSIX", "ucs_basic")


#: The collation of text computed from no text column (constants, casts to text, ->>).
_DEFAULT = "default"
_TEXT = ("text", "bpchar", UNKNOWN)


def _derive(node: exp.Expression, a: Analysis) -> tuple[str, bool] | None:
    """PostgreSQL's collation derivation, simplified: (collation, explicit) of ``node``;
    None when no text is involved (numbers, booleans, comparisons' results)."""
    if isinstance(node, exp.Paren | exp.Filter | exp.Order):
        return _derive(node.this, a)  # an aggregate's ORDER BY and FILTER do not collate it
    if isinstance(node, exp.Collate):
        return _collate_name(node, raw=True), True  # two explicit names differ even if alike
    info = a.aliases.get(node.table) if isinstance(node, exp.Column) else None
    if info is not None and node.name in info.default_collated:
        return _DEFAULT, False  # a declared collation beside it decides, as in PostgreSQL
    if info is not None and node.name in info.collations:
        return info.collations[node.name], False  # text, char(n), varchar and their arrays
    t = pg_type(node, a)
    if t is not None and type_class(t) not in _TEXT:
        return None
    if isinstance(node, exp.Column):
        return "C", False  # text columns left out of TableInfo.collations order as under C
    if isinstance(node, exp.Literal | exp.JSONExtractScalar):
        return _DEFAULT, False  # ->> yields text of the default collation, whatever jsonb's
    if isinstance(node, exp.Cast):
        return _derive(node.this, a) or (_DEFAULT, False)  # enum::text, n::text: the default
    if isinstance(node, exp.Case):
        # Only the results: CASE x WHEN's x and the conditions are compared apart.
        children = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
    else:
        children = [x for x in node.iter_expressions() if not isinstance(x, exp.DataType)]
    found = [_derive(x, a) for x in children if x is not None]
    return _combine([f for f in found if f is not None])


def _combine(found: list[tuple[str, bool]]) -> tuple[str, bool]:
    """An explicit COLLATE wins, then a collation a text column declares, then the database's
    default. Two declared ones conflict: PostgreSQL raises where one must decide."""
    for explicit in (True, False):
        names = sorted({c for c, e in found if e == explicit and c != _DEFAULT})
        if len(names) > 1:  # explicit ones: PostgreSQL raises (COLLATE "C" against "POSIX")
            return f"conflicting ({', '.join(names)})", False
        if names:
            return "C" if names[0] in _BYTE_ORDER else names[0], explicit
    return _DEFAULT, False


def _collation(nodes: list[exp.Expression], a: Analysis) -> str:
    """The collation ordering text computed by ``nodes`` together (a comparison's operands):
    'C' unless a column of another collation, or the database's default, decides it."""
    coll, _ = _combine([d for d in (_derive(x, a) for x in nodes) if d is not None])
    if coll != _DEFAULT:
        return coll
    defaults = {info.default_collation for info in a.aliases.values()}
    if defaults == {"C"}:
        return "C"
    return next(iter(sorted(d for d in defaults if d and d != "C")), "the database's default")


def _check_order(nodes: list[exp.Expression], a: Analysis, where: exp.Expression) -> None:
    """Refuse ordering text (``nodes``: what one comparison, min/max or ORDER BY orders) under a
    collation Spark does not implement."""
    known = [t for t in (pg_type(x, a) for x in nodes) if t not in (None, NULL)]
    if not known or any(type_class(t) not in ("text", UNKNOWN) for t in known):
        return  # not text (n < '5' compares numbers), or refused by the walk already
    coll = _collation(nodes, a)
    if coll != "C" and not mutated("binary-collation"):
        node = next((x for x in nodes if pg_type(x, a) != UNKNOWN), nodes[0])
        text = node.sql(dialect=PG)
        collated = f'{text if isinstance(node, exp.Column) else "(" + text + ")"} COLLATE "C"'
        raise refuse(
            a.output,
            f"ordering text under the collation {coll!r} (min, max, <, >, BETWEEN or ORDER BY over `{text}`)",
            f"Spark orders text by its bytes, not as {coll!r} does, so results would differ; for "
            f"exact results write `{collated}` in the output's SQL (byte "
            "order), or give the column a C collation at the source",
            where,
        )


def _check_column(col: exp.Column, a: Analysis) -> None:
    info = a.aliases.get(col.table)
    if info is None:
        return
    t = info.types.get(col.name)
    if t is None or type_class(t) is None:
        raise refuse(
            a.output,
            f"column {col.table}.{col.name} of type {_label(t) if t else 'unknown'} ({info.name})",
            "txjoin reads only the column types it converts exactly (see README, 'What an output's "
            "SQL may use'); leave the column out of the output's SQL, or change its type at the source",
            col,
        )
    coll = info.collations.get(col.name, "")
    if coll.startswith(NONDETERMINISTIC) and not isinstance(_unparen(col.parent), exp.Collate):
        raise refuse(
            a.output,
            f"column {col.table}.{col.name} of {info.name}, whose collation is {coll}",
            "PostgreSQL takes values whose bytes differ as equal under it (=, IN, GROUP BY, "
            f"DISTINCT, joins, LIKE), where Spark compares bytes; write `{col.sql(dialect=PG)} "
            'COLLATE "C"` to compare its bytes, or give the column a deterministic collation',
            col,
        )


def _unparen(node: Any) -> Any:
    """The first ancestor-or-self of ``node`` that is not a parenthesis."""
    while isinstance(node, exp.Paren):
        node = node.parent
    return node


_LABELS = {
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "bool": "boolean",
    "bpchar": "char",
    UNKNOWN: "a string constant",
    NULL: "NULL",
}


def _label(t: str) -> str:
    if t.startswith("enum:"):
        return "enum " + t[5:]
    if t.startswith("_"):
        return t[1:] + "[]"
    return _LABELS.get(t, t)


def _spelling(node: exp.Expression, entry: Entry) -> str:
    key = ANONYMOUS.get(node.name.upper()) if isinstance(node, exp.Anonymous) else NODES.get(type(node))
    return key[1] if key else entry.name


def _construct(node: exp.Expression) -> str:
    """The refused construct as the user wrote it: sqlglot's own names (to_char is
    TimeToStr, ->> is JSONExtractScalar) mean nothing to them."""
    if isinstance(node, exp.Anonymous):
        return f"the function {node.name.lower()}()"
    text = node.sql(dialect=PG)
    if isinstance(node, exp.Binary):  # before the call below: lower(x) ~ 'a' is the operator ~
        left, right = node.left.sql(dialect=PG), node.right.sql(dialect=PG)
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            return f"the operator {text[len(left) : len(text) - len(right)].strip()}"
    call = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\(", text)
    if call:
        return f"the function {call.group(1).lower()}()"
    if isinstance(node, exp.Func):
        return f"the function {node.sql_name().lower()}()"
    return f"the construct {text.split(' ', 1)[0].upper() or type(node).__name__}"
