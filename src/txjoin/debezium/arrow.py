"""Debezium values as Arrow columns: the columnar snapshot's form and the replicas'.

A column holds, typed, the JSON values Debezium's PostgreSQL connector emits
(:mod:`txjoin.debezium.values`): :func:`value_type` gives its Arrow type. One
exception: JSON has no NaN or Infinity, so Debezium writes float ones as the
strings "NaN", "Infinity", "-Infinity"; a float64 column holds them as floats,
and :func:`to_values` gives the strings back.

:func:`from_text` converts a column of PostgreSQL text output (COPY, the
snapshot) vectorized where Arrow parses exactly as the per-value converter
does, and falls back to that converter for the rest (infinities, BC dates,
years before 1000, 24:00:00, bytea, arrays), so both paths give the same
values; tests/property/test_arrow_values_props.py checks it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txjoin.debezium.values import converter
from txjoin.pg.types import ColumnType

__all__ = ["from_text", "from_values", "to_values", "value_type"]

_INTS = {"int2", "int4", "int8", "oid", "xid", "cid"}
_FLOATS = {"float4", "float8"}
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def value_type(col: ColumnType) -> pa.DataType:
    """The Arrow type of ``col``'s Debezium JSON values."""
    if col.is_array:
        return pa.list_(value_type(col.element))
    name = col.name
    if name in _INTS:
        return pa.int64()
    if name in _FLOATS:
        return pa.float64()
    if name == "bool":
        return pa.bool_()
    if name == "date":
        return pa.int32()  # days since 1970-01-01
    if name in ("timestamp", "time"):
        return pa.int64()  # microseconds
    return pa.string()  # numeric (decimal text), timestamptz (ISO, UTC), bytea (base64), text...


def _float(v: Any) -> Any:
    return _SPECIAL_FLOATS.get(v, v) if isinstance(v, str) else v


def from_values(values: Sequence[Any], col: ColumnType) -> pa.Array:
    """Debezium JSON values (Python) of ``col`` as an Arrow array of :func:`value_type`."""
    base = col.element if col.is_array else col
    if base.name in _FLOATS:
        if col.is_array:
            values = [None if v is None else [_float(x) for x in v] for v in values]
        else:
            values = [_float(v) for v in values]
    return pa.array(values, type=value_type(col))


def _floats_back(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def to_values(arr: pa.Array | pa.ChunkedArray, col: ColumnType) -> list[Any]:
    """An Arrow column of ``col`` as Debezium JSON values (Python)."""
    values: list[Any] = arr.to_pylist()
    base = col.element if col.is_array else col
    if base.name not in _FLOATS:
        return values
    if col.is_array:
        return [None if v is None else [_floats_back(x) for x in v] for v in values]
    return [_floats_back(v) for v in values]


def _fallback(texts: pa.Array, col: ColumnType) -> pa.Array:
    conv = converter(col)
    return from_values([None if t is None else conv(t) for t in texts.to_pylist()], col)


def _iso_utc(ts: pa.Array) -> pa.Array:
    """timestamp[us, UTC] as Debezium writes it: 2026-01-01T10:00:00.5Z (no trailing zeros)."""
    text = pc.strftime(ts, format="%Y-%m-%dT%H:%M:%S")
    text = pc.replace_substring_regex(text, pattern=r"0+$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"\.$", replacement="")
    return pc.binary_join_element_wise(text, pa.scalar("Z"), "")


def _fast(texts: pa.Array, col: ColumnType) -> pa.Array | None:
    """The vectorized conversion, or None where it would not match the per-value one."""
    name = col.name
    if name in _INTS:
        return texts.cast(pa.int64())
    if name in _FLOATS:
        return texts.cast(pa.float64())
    if name == "bool":
        return pc.equal(texts, "t")
    if name not in ("date", "timestamp", "timestamptz", "time"):
        return None
    if pc.any(pc.match_substring_regex(texts, r"infinity|BC$")).as_py():
        return None
    if name == "date":
        return texts.cast(pa.date32()).cast(pa.int32())
    if name == "timestamp":
        return texts.cast(pa.timestamp("us")).cast(pa.int64())
    if name == "time":
        if pc.any(pc.starts_with(texts, "24:")).as_py():
            return None
        stamps = pc.binary_join_element_wise(pa.scalar("1970-01-01 "), texts, "").cast(pa.timestamp("us"))
        return stamps.cast(pa.int64())
    ts = texts.cast(pa.timestamp("us", tz="UTC"))
    if pc.any(pc.less(pc.year(ts), 1000)).as_py():
        return None  # the per-value path prints such years without zero padding
    return _iso_utc(ts)


def from_text(texts: pa.Array | pa.ChunkedArray, col: ColumnType) -> pa.Array:
    """PostgreSQL text output of ``col`` (nulls for NULL) as Debezium-valued Arrow."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if col.is_array or col.name == "bytea":
        return _fallback(texts, col)
    if value_type(col) == pa.string() and col.name not in ("timestamptz",):
        return texts  # numeric, text, json, uuid...: Debezium's value is the text itself
    try:
        fast = _fast(texts, col)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        fast = None
    return _fallback(texts, col) if fast is None else fast
