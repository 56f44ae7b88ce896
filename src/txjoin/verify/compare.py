"""Compare an output's rows with the same SQL's rows on PostgreSQL.

The two sides represent equal values differently: numeric results come as
``Decimal`` or ``int`` or ``float``, timestamps with or without a zone. Both
sides are normalized, then compared as multisets of rows. JSON compares as
text, byte for byte (txjoin writes PostgreSQL's text; read PostgreSQL's with
txjoin.pg.connect.exact_text), except JSON aggregates without ORDER BY: they
have no defined element order in PostgreSQL, so they compare as multisets of
elements.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Difference", "compare_rows", "normalize"]


def _num(v: Decimal | int | float) -> Any:
    """Integers compare exactly; other numbers to 12 significant digits.

    Spark and PostgreSQL differ in the last bits of doubles and in the scale
    of computed decimals (avg, division), not in integers.
    """
    if isinstance(v, int):
        return ("n", str(v))
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        if v.is_integer() and abs(v) < 2**53:
            return ("n", str(int(v)))
        return ("n", f"{v:.12g}")
    try:
        d = Decimal(v)
    except InvalidOperation:
        return str(v)
    if not d.is_finite():
        return str(d)
    if d == d.to_integral_value():
        return ("n", str(int(d)))
    return ("n", f"{float(d):.12g}")


def normalize(v: Any, *, json_text: bool = False, unordered: bool = False) -> Any:
    """A hashable, engine-independent form of one value."""
    if v is None:
        return None
    if json_text and isinstance(v, str) and not unordered:
        return ("json", v)  # txjoin writes PostgreSQL's JSON text: compared byte for byte
    if json_text and isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return v
        return normalize(v, unordered=unordered)
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float | Decimal):
        return _num(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        return ("ts", v.isoformat())
    if isinstance(v, dt.time):
        # As PostgreSQL prints it, the text txjoin's outputs hold.
        text = v.isoformat()
        return text.rstrip("0").rstrip(".") if "." in text else text
    if isinstance(v, dt.date):
        return ("t", v.isoformat())
    if isinstance(v, bytes | bytearray | memoryview):
        return ("b", bytes(v).hex())
    if isinstance(v, dict):
        return ("o", tuple(sorted((str(k), normalize(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        items = [normalize(x) for x in v]
        if unordered:
            items.sort(key=repr)
        return ("a", tuple(items))
    return v


@dataclass
class Difference:
    """Rows only on one side, in a normalized, printable form."""

    only_output: list[dict[str, Any]] = field(default_factory=list)
    only_source: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.only_output or self.only_source)

    def describe(self, limit: int = 10) -> str:
        lines = []
        for label, rows in (
            ("only in the output", self.only_output),
            ("only in PostgreSQL", self.only_source),
        ):
            for r in rows[:limit]:
                lines.append(f"  {label}: {r}")
            if len(rows) > limit:
                lines.append(f"  ... and {len(rows) - limit} more {label}")
        return "\n".join(lines)


def compare_rows(
    output: Iterable[Mapping[str, Any]],
    source: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    json_columns: Iterable[str] = (),
    unordered_columns: Iterable[str] = (),
) -> Difference:
    """Multiset difference of two row sets over ``columns``."""
    jc, uc = set(json_columns), set(unordered_columns)

    def key(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(normalize(row.get(c), json_text=c in jc, unordered=c in uc) for c in columns)

    out_rows = list(output)
    src_rows = list(source)
    a = Counter(key(r) for r in out_rows)
    b = Counter(key(r) for r in src_rows)
    diff = Difference()
    if a == b:
        return diff
    only_a, only_b = a - b, b - a
    for rows, only, target in ((out_rows, only_a, diff.only_output), (src_rows, only_b, diff.only_source)):
        left = Counter(only)
        for r in rows:
            k = key(r)
            if left.get(k, 0) > 0:
                left[k] -= 1
                target.append({c: r.get(c) for c in columns})
    return diff
