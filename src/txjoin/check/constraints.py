"""Constraints the generator reads so its transactions fit the schema.

A CHECK over one column (``qty > 0``, ``price >= 0::numeric``,
``status IN ('a', 'b')``, a domain's ``VALUE BETWEEN 0 AND 100``) becomes a
filter on that column's values; CHECKs over several columns or with
functions are left to PostgreSQL (a failing statement is counted, not hidden).
Single-column UNIQUE constraints are guarded in updates.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import sqlglot
from sqlglot import exp

from txjoin.pg.catalog import Table

__all__ = ["unique_columns", "value_filter"]

_UNKNOWN = object()


def _constant(node: exp.Expression) -> Any:
    while isinstance(node, exp.Paren | exp.Cast):
        node = node.this
    if isinstance(node, exp.Neg):
        v = _constant(node.this)
        return -v if isinstance(v, Decimal) else _UNKNOWN
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        try:
            return Decimal(node.this)
        except InvalidOperation:
            return _UNKNOWN
    if isinstance(node, exp.Null):
        return None
    return _UNKNOWN


def _comparable(v: Any, c: Any) -> tuple[Any, Any] | None:
    if isinstance(c, Decimal) and isinstance(v, int | float | Decimal) and not isinstance(v, bool):
        return Decimal(str(v)), c
    if isinstance(c, str) and isinstance(v, str):
        return v, c
    if isinstance(c, str) and isinstance(v, dt.date | dt.time):
        return v.isoformat(), c  # ISO text orders as the values do
    return None


_OPS: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
}


def _is_col(node: exp.Expression, column: str) -> bool:
    while isinstance(node, exp.Paren | exp.Cast):
        node = node.this
    return isinstance(node, exp.Column) and node.name.lower() == column.lower()


def _eval(node: exp.Expression, column: str, v: Any) -> Any:
    """True, False, None (SQL NULL: CHECK passes) or _UNKNOWN (cannot tell)."""
    if isinstance(node, exp.Paren):
        return _eval(node.this, column, v)
    if isinstance(node, exp.And | exp.Or):
        a, b = _eval(node.this, column, v), _eval(node.expression, column, v)
        if _UNKNOWN in (a, b):
            return _UNKNOWN
        if isinstance(node, exp.And):
            return False if False in (a, b) else (None if None in (a, b) else True)
        return True if True in (a, b) else (None if None in (a, b) else False)
    if isinstance(node, exp.Not):
        a = _eval(node.this, column, v)
        return a if a in (None, _UNKNOWN) else not a
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null) and _is_col(node.this, column):
        return v is None
    for cls, op in _OPS.items():
        if isinstance(node, cls):
            left, right, flip = node.this, node.expression, False
            if not _is_col(left, column):
                left, right, flip = right, left, True
            if not _is_col(left, column):
                return _UNKNOWN
            c = _constant(right)
            if c is _UNKNOWN:
                return _UNKNOWN
            if v is None or c is None:
                return None
            pair = _comparable(v, c)
            if pair is None:
                return _UNKNOWN
            a, b = pair
            return op(b, a) if flip else op(a, b)
    if isinstance(node, exp.Between) and _is_col(node.this, column):
        lo, hi = _constant(node.args["low"]), _constant(node.args["high"])
        if v is None:
            return None
        pairs = [_comparable(v, lo), _comparable(v, hi)]
        if any(p is None for p in pairs):
            return _UNKNOWN
        return pairs[0][0] >= pairs[0][1] and pairs[1][0] <= pairs[1][1]  # type: ignore[index]
    if isinstance(node, exp.In) and _is_col(node.this, column):
        options = [_constant(e) for e in node.expressions]
        if v is None:
            return None
        pairs = [_comparable(v, o) for o in options]
        if any(p is None for p in pairs):
            return _UNKNOWN
        return any(a == b for a, b in pairs)  # type: ignore[misc]
    if isinstance(node, exp.EQ | exp.Any):
        return _UNKNOWN
    return _UNKNOWN


def _body(definition: str) -> exp.Expression | None:
    m = re.fullmatch(r"\s*CHECK\s*(\(.*\))\s*(NOT VALID)?\s*", definition, re.S | re.I)
    if m is None:
        return None
    try:
        body = sqlglot.parse_one(m.group(1), read="postgres")
    except sqlglot.errors.ParseError:
        return None
    return body if isinstance(body, exp.Expression) else None


def value_filter(checks: Sequence[str], column: str) -> Callable[[Any], bool] | None:
    """A predicate accepting the values of ``column`` that ``checks`` allow
    (those mentioning only this column); None when none applies."""
    bodies: list[exp.Expression] = []
    for d in checks:
        body = _body(d)
        if body is None:
            continue
        cols = {c.name.lower() for c in body.find_all(exp.Column)}
        if cols == {column.lower()}:
            bodies.append(body)
    if not bodies:
        return None

    def ok(v: Any) -> bool:
        return all(_eval(b, column, v) is not False for b in bodies)

    return ok


def unique_columns(t: Table) -> set[str]:
    """Columns with a single-column UNIQUE constraint (the primary key aside)."""
    out: set[str] = set()
    for d in t.constraints:
        m = re.fullmatch(r"\s*UNIQUE\s*\(([^,()]+)\)\s*", d, re.I)
        if m:
            out.add(m.group(1).strip().strip('"'))
    return out
