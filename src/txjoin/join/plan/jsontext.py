"""JSON as PostgreSQL prints it, built with Spark string functions.

Spark's ``to_json`` writes ``{"a":1}`` and escapes with upper-case hex;
PostgreSQL's ``json_build_object`` writes ``{"a" : 1}``, ``json_agg``
separates elements with ``", "``, ``jsonb`` sorts keys (shorter first) and
writes ``{"a": 1}``, and json/jsonb values are embedded as their own text.
So txjoin assembles the text itself: every value becomes its JSON text
(:func:`value_text`) and objects and arrays are concatenated around them.
The allowlist admits only value types whose text is proven equal by the
conformance suite (json_value_type).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from txjoin.faults import mutated
from txjoin.join.plan.typerules import base_type, numeric_ps

__all__ = ["agg_array", "build_object", "escape", "json_value_type", "value_text"]

# PostgreSQL's escape_json: these five by name, other characters below 0x20 as \u00xx.
_NAMED = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}


def escape(s: str) -> str:
    """A JSON string literal for ``s``, as PostgreSQL writes it."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o in _NAMED:
            out.append(_NAMED[o])
        elif o < 0x20:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _s(text: str) -> exp.Expression:
    return exp.Literal.string(text)


def _escaped(x: exp.Expression) -> exp.Expression:
    """Spark expression: ``x`` (a string) escaped as escape_json does, quoted."""
    e = _call("REPLACE", x, _s("\\"), _s("\\\\"))
    e = _call("REPLACE", e, _s('"'), _s('\\"'))
    for o in range(1, 0x20):
        e = _call("REPLACE", e, _call("CHR", exp.Literal.number(o)), _s(_NAMED.get(o, f"\\u{o:04x}")))
    return _call("CONCAT", _s('"'), e, _s('"'))


_AS_IS = (
    *("int2", "int4", "int8", "bool", "text", "varchar"),
    *("date", "timestamp", "time", "jsonb", "null", "unknown"),
)


def json_value_type(t: str, *, jsonb: bool) -> bool:
    """Whether a value of PostgreSQL type ``t`` has JSON text txjoin writes exactly.

    Numbers need a declared scale (numeric(p,s)): Spark's decimal then prints
    the same digits. json values are refused inside jsonb, which reformats them.
    """
    b = base_type(t)
    if b in _AS_IS:
        return True
    if b == "numeric":
        ps = numeric_ps(t)
        return ps is not None and ps[1] >= 0
    return b == "json" and not jsonb


def value_text(x: exp.Expression, t: str) -> exp.Expression:
    """Spark expression: the JSON text of ``x`` (PostgreSQL type ``t``); 'null' for NULL."""
    b = base_type(t)
    if b in ("json", "jsonb"):
        text = _escaped(x) if mutated("jsonb-as-text") else x
    elif b == "bool":
        # Not IF(x, ...): a NULL condition would give 'false'.
        text = exp.Case(
            ifs=[exp.If(this=x, true=_s("true")), exp.If(this=exp.Not(this=x.copy()), true=_s("false"))]
        )
    elif b in ("text", "varchar", "unknown"):
        text = _escaped(x)
    elif b in ("date", "time"):
        text = _call("CONCAT", _s('"'), exp.Cast(this=x, to=exp.DataType.build("STRING")), _s('"'))
    elif b == "timestamp":
        # ISO 8601 with a 'T', fractional seconds without trailing zeros (both engines).
        as_text = _call("REPLACE", exp.Cast(this=x, to=exp.DataType.build("STRING")), _s(" "), _s("T"))
        text = _call("CONCAT", _s('"'), as_text, _s('"'))
    elif b == "null":
        return _s("null")
    else:  # integers, numeric(p,s)
        text = exp.Cast(this=x, to=exp.DataType.build("STRING"))
    return exp.Coalesce(this=text, expressions=[_s("null")])


def build_object(
    keys: Sequence[str], values: Sequence[exp.Expression], types: Sequence[str], *, jsonb: bool
) -> exp.Expression:
    """json_build_object / jsonb_build_object over constant keys, as PostgreSQL prints it."""
    pairs = list(zip(keys, values, types, strict=True))
    if jsonb:
        last = {k: (k, v, t) for k, v, t in pairs}  # a repeated key keeps its last value
        pairs = sorted(last.values(), key=lambda p: (len(p[0].encode()), p[0].encode()))
    colon, sep = (": ", ", ") if jsonb else (" : ", ", ")
    parts: list[exp.Expression] = []
    for i, (k, v, t) in enumerate(pairs):
        parts.append(_s(("{" if i == 0 else sep) + escape(k) + colon))
        parts.append(value_text(v, t))
    if not parts:
        return _s("{}")
    parts.append(_s("}"))
    return _call("CONCAT", *parts)


def agg_array(elements: exp.Expression) -> exp.Expression:
    """json_agg's text from an array of element texts (elements already JSON)."""
    return _call("CONCAT", _s("["), _call("ARRAY_JOIN", elements, _s(", ")), _s("]"))
