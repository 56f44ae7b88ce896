"""Column values: PostgreSQL text output -> Debezium JSON -> Python/Arrow/Spark.

pgoutput (text mode) and the snapshot both deliver each value as its type's
text output. :func:`converter` builds, once per column type, the function
turning that text into the JSON value Debezium's PostgreSQL connector emits
with its default settings, except where docs/types.md says otherwise
(numeric is a decimal string, as with ``decimal.handling.mode=string``).
:func:`from_debezium` and :func:`arrow_type` go the other way for the join
stage, which needs typed columns.

The text forms assume the session settings capture sets on every connection
(:data:`txjoin.pg.connect.SESSION_SETTINGS`: ISO dates, hex bytea, UTC), but
timestamptz parsing accepts any offset PostgreSQL prints.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import pyarrow as pa

from txjoin.errors import ProtocolError
from txjoin.pg.types import ColumnType

__all__ = [
    "UNAVAILABLE",
    "JSONValue",
    "arrow_type",
    "converter",
    "from_debezium",
    "spark_type_ddl",
    "to_debezium",
]

#: Debezium's placeholder for an unchanged TOASTed value that was not sent.
UNAVAILABLE = "__debezium_unavailable_value"

JSONValue = None | bool | int | float | str | list[Any] | dict[str, Any]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_US = dt.timedelta(microseconds=1)

_INTS = {"int2", "int4", "int8", "oid", "xid", "cid"}
_FLOATS = {"float4", "float8"}
_STRINGS = {
    "text", "varchar", "bpchar", "name", "char", "uuid", "json", "jsonb", "xml",
    "citext", "inet", "cidr", "macaddr", "macaddr8", "bit", "varbit", "money",
    "interval", "timetz", "tsvector", "tsquery", "ltree",
}  # fmt: skip


def _bad(col: ColumnType, text: str, why: str) -> ProtocolError:
    return ProtocolError(
        f"cannot convert {col.name} value {text[:80]!r}: {why}", type=col.name, value=text[:200]
    )


def _int(text: str) -> int:
    return int(text)


def _float(text: str) -> float | str:
    if text in ("NaN", "Infinity", "-Infinity"):
        return text  # JSON has no such numbers; Debezium writes them as strings too
    return float(text)


def _bool(text: str) -> bool:
    return text == "t"


def _str(text: str) -> str:
    return text


def _date(text: str) -> int | None:
    if text in ("infinity", "-infinity"):
        return None
    bc = text.endswith(" BC")
    body = text[:-3] if bc else text
    y, m, d = body.split("-")
    year = int(y)
    if bc:
        year = 1 - year
    if not 1 <= year <= 9999:
        raise ValueError("dates outside years 1..9999 are not supported")
    return dt.date(year, int(m), int(d)).toordinal() - _EPOCH_ORDINAL


def _timestamp(text: str) -> int | None:
    if text in ("infinity", "-infinity"):
        return None
    if text.endswith(" BC"):
        raise ValueError("BC timestamps are not supported")
    return (dt.datetime.fromisoformat(text) - _EPOCH) // _US


def _iso_utc(t: dt.datetime) -> str:
    t = t.astimezone(dt.UTC)
    # Not strftime: glibc's %Y does not pad years before 1000 to four digits.
    base = t.replace(tzinfo=None, microsecond=0).isoformat()
    if t.microsecond:
        base += ("." + f"{t.microsecond:06d}").rstrip("0")
    return base + "Z"


#: timestamptz as PostgreSQL prints it in UTC (capture's sessions; no trailing zeros in the fraction).
_UTC_TEXT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{0,5}[1-9])?\+00", re.ASCII)


def _timestamptz(text: str) -> str | None:
    if _UTC_TEXT.fullmatch(text):  # the text itself, rearranged: 1.1 us against 7.6 through datetime
        return f"{text[:10]}T{text[11:-3]}Z"
    if text in ("infinity", "-infinity"):
        return None
    if text.endswith(" BC"):
        raise ValueError("BC timestamps are not supported")
    return _iso_utc(dt.datetime.fromisoformat(text))


def _time(text: str) -> int:
    if text.startswith("24:00:00"):
        return 86_400_000_000
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _bytea(text: str) -> str:
    if not text.startswith("\\x"):
        raise ValueError("expected hex format (bytea_output = hex)")
    return base64.b64encode(bytes.fromhex(text[2:])).decode("ascii")


_SCALAR: dict[str, Callable[[str], Any]] = {
    **{n: _int for n in _INTS},
    **{n: _float for n in _FLOATS},
    **{n: _str for n in _STRINGS},
    "numeric": _str,
    "bool": _bool,
    "date": _date,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
    "time": _time,
    "bytea": _bytea,
}


def parse_array_literal(text: str) -> list[str | None]:
    """Elements of a one-dimensional PostgreSQL array literal, as text or None."""
    if text.startswith("["):  # explicit bounds: '[0:2]={1,2,3}'
        eq = text.find("=")
        if eq < 0:
            raise ValueError("malformed array bounds")
        text = text[eq + 1 :]
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise ValueError("an array literal starts with '{' and ends with '}'")
    body = text[1:-1]
    out: list[str | None] = []
    if body == "":
        return out
    i, n = 0, len(body)
    while i <= n:
        if i < n and body[i] == "{":
            raise ValueError("multi-dimensional arrays are not supported")
        if i < n and body[i] == '"':
            i += 1
            buf = []
            while i < n and body[i] != '"':
                if body[i] == "\\":
                    i += 1
                buf.append(body[i])
                i += 1
            if i >= n:
                raise ValueError("unterminated quoted element")
            i += 1
            out.append("".join(buf))
        else:
            j = body.find(",", i)
            j = n if j < 0 else j
            raw = body[i:j]
            out.append(None if raw == "NULL" else raw)
            i = j
        if i < n and body[i] != ",":
            raise ValueError(f"unexpected {body[i]!r} after an element")
        i += 1
    return out


@lru_cache(maxsize=1024)
def converter(col: ColumnType) -> Callable[[str], JSONValue]:
    """The text -> Debezium JSON function for ``col`` (built once per type)."""
    if col.is_array:
        elem = converter(col.element)

        def array(text: str) -> JSONValue:
            try:
                items = parse_array_literal(text)
            except ValueError as e:
                raise _bad(col, text, str(e)) from None
            return [None if v is None else elem(v) for v in items]

        return array
    fn = _SCALAR.get(col.name, _str)  # unknown types: their text, as a string

    def convert(text: str) -> JSONValue:
        try:
            result: JSONValue = fn(text)
        except (ValueError, OverflowError) as e:
            raise _bad(col, text, str(e)) from None
        return result

    # Ints and strings are by far the most common: skip the wrapper for them.
    if fn is _str:
        return _str
    return convert


def to_debezium(text: str | None, col: ColumnType) -> JSONValue:
    """Convert one value's text output (None for NULL)."""
    return None if text is None else converter(col)(text)


# -- the other way: for replicas and the join stage ---------------------------------


def from_debezium(value: Any, col: ColumnType) -> Any:
    """A Debezium JSON value as the Python value Arrow expects for :func:`arrow_type`."""
    if value is None:
        return None
    if col.is_array:
        elem = col.element
        return [from_debezium(v, elem) for v in value]
    name = col.name
    if name in _INTS or name == "bool":
        return value
    if name in _FLOATS:
        return float(value)
    if name == "numeric":
        ps = col.numeric_precision_scale
        if ps is None:
            return str(value)
        try:
            d = Decimal(str(value))
        except InvalidOperation:
            raise _bad(col, str(value), "not a decimal") from None
        return None if d.is_nan() else d
    if name == "date":
        return dt.date.fromordinal(int(value) + _EPOCH_ORDINAL)
    if name == "timestamp":
        return _EPOCH + dt.timedelta(microseconds=int(value))
    if name == "timestamptz":
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if name == "time":
        us = int(value)
        if us >= 86_400_000_000:
            return "24:00:00"  # PostgreSQL's end of day, which datetime.time cannot hold
        return (dt.datetime.min + dt.timedelta(microseconds=us)).time()
    if name == "bytea":
        return base64.b64decode(value)
    return value


def arrow_type(col: ColumnType) -> pa.DataType:
    if col.is_array:
        return pa.list_(arrow_type(col.element))
    name = col.name
    simple: dict[str, pa.DataType] = {
        "int2": pa.int16(),
        "int4": pa.int32(),
        "int8": pa.int64(),
        "oid": pa.int64(),
        "float4": pa.float32(),
        "float8": pa.float64(),
        "bool": pa.bool_(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
        "time": pa.time64("us"),
        "bytea": pa.binary(),
    }
    if name in simple:
        return simple[name]
    if name == "numeric":
        ps = col.numeric_precision_scale
        # Unconstrained numeric has unbounded precision: keep it as text.
        if ps is None or ps[1] < 0 or ps[0] > 38:
            return pa.string()
        return pa.decimal128(ps[0], ps[1])
    return pa.string()


def spark_type_ddl(col: ColumnType) -> str:
    t = arrow_type(col)
    return _spark_ddl(t)


def _spark_ddl(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_ddl(t.value_type)}>"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP_LTZ" if t.tz else "TIMESTAMP_NTZ"
    mapping = {
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.date32(): "DATE",
        pa.time64("us"): "STRING",
        pa.binary(): "BINARY",
    }
    return mapping.get(t, "STRING")
