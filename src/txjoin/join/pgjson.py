"""PostgreSQL's ``jsonb -> key`` and ``jsonb ->> key``, exactly (src/backend/utils/adt/jsonfuncs.c).

The join stage holds a jsonb value as the text PostgreSQL prints for it (keys
sorted, numbers as numeric_out writes them, ``", "`` and ``": "`` between
items). ``->`` gives the member's jsonb, printed the same way; ``->>`` gives
a string member unescaped, any other member as ``->`` prints it, and SQL NULL
for a JSON null. A missing key, an index past either end, or a document of
the wrong kind (a key of an array, an index of an object) is NULL; a scalar
document is a one-element array, as jsonb stores it. Numbers keep their printed text:
they are never read as floats. The Spark UDF is ``txj_jsonb_get``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["UDF_NAME", "jsonb_get", "register"]

UDF_NAME = "txj_jsonb_get"


class _Number(str):
    """A JSON number's text as printed (1.50 stays 1.50)."""


def _escape(s: str) -> str:
    """PostgreSQL's escape_json: only quote, backslash and control characters."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _print(v: Any) -> str:
    """jsonb's output of a parsed value (JsonbToCString)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, _Number):
        return str(v)
    if isinstance(v, str):
        return _escape(v)
    if isinstance(v, list):
        return "[" + ", ".join(_print(x) for x in v) + "]"
    return "{" + ", ".join(f"{_escape(k)}: {_print(x)}" for k, x in v.items()) + "}"


def jsonb_get(doc: str | None, key: str | None, index: int | None, as_text: bool) -> str | None:
    """``doc -> key`` (or ``-> index``), or ``->>`` with ``as_text``; None is SQL NULL."""
    if doc is None:
        return None
    v = json.loads(doc, parse_int=_Number, parse_float=_Number)
    if key is not None:
        if not isinstance(v, dict) or key not in v:
            return None
        member = v[key]
    else:
        if isinstance(v, dict) or index is None:
            return None
        if not isinstance(v, list):
            v = [v]  # jsonb stores a scalar as a one-element array: '"x"' -> 0 is "x"
        i = index + len(v) if index < 0 else index
        if not 0 <= i < len(v):
            return None
        member = v[i]
    if as_text:
        if member is None:
            return None
        if isinstance(member, str) and not isinstance(member, _Number):
            return member
    return _print(member)


def register(spark: object) -> None:
    """Register :data:`UDF_NAME` on a Spark session (idempotent)."""
    from pyspark.sql.functions import udf

    spark.udf.register(UDF_NAME, udf(jsonb_get, "string", useArrow=True))  # type: ignore[attr-defined]
