"""Capture's JSON encoder (orjson) against the json encoder it replaced.

``envelope.dumps`` writes every change event of txjoin's changelog. Generated
JSON values of every type capture's converters produce (and deeper nesting)
must encode to the same bytes as json's compact encoder whenever they hold no
float, and to the same value otherwise: floats may be spelled differently
(``1e-05`` against ``0.00001``) but must parse back to the same double.
Whatever json refused (NaN, infinities, non-JSON objects) must still be
refused, never written as something else.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.debezium import envelope
from txjoin.errors import ProtocolError

_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["\x00", "\x1f", "\x7f", "\u2028\u2029", '"\\/', "é\U0001f600", "NaN", "-Infinity"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def _exact(v: Any) -> Any:
    """The value with floats as their bits, so 0.0 and -0.0 differ and 1 and 1.0 differ."""
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, list):
        return [_exact(x) for x in v]
    if isinstance(v, dict):
        return {k: _exact(x) for k, x in v.items()}
    return v


def _has_float(v: Any) -> bool:
    if isinstance(v, float):
        return True
    if isinstance(v, list):
        return any(_has_float(x) for x in v)
    if isinstance(v, dict):
        return any(_has_float(x) for x in v.values())
    return False


@given(values)
@example({"after": {"x": 1e-05, "y": -0.0, "z": 1e300}})
@example({"after": {"s": "line\nbreak\ttab\x08\x0c\r", "k": "\x7f\u2028"}})
@settings(max_examples=examples(ci=300, thorough=3000))
def test_same_value_as_json_and_same_bytes_without_floats(value: Any) -> None:
    ours = envelope.dumps(value)
    theirs = _json(value).encode("utf-8")
    assert b"\n" not in ours
    assert _exact(json.loads(ours)) == _exact(json.loads(theirs)) == _exact(value)
    if not _has_float(value):
        assert ours == theirs


@pytest.mark.parametrize(
    "row",
    [
        {"x": math.nan},
        {"x": math.inf},
        {"x": [1.0, -math.inf]},
    ],
)
def test_non_finite_floats_in_a_row_are_refused_not_written_as_null(row: dict[str, Any]) -> None:
    for event in ({"before": None, "after": row}, {"before": row, "after": None}):
        with pytest.raises(ProtocolError, match="NaN or an infinity"):
            envelope.dumps(event)


@pytest.mark.parametrize(
    "value",
    [
        {"t": dt.datetime(2026, 1, 1)},
        {"d": Decimal("1.5")},
        {"s": {1, 2}},
        {1: "key not a string"},
        {"big": 2**64},
    ],
)
def test_values_json_has_no_type_for_are_refused(value: Any) -> None:
    with pytest.raises(ProtocolError, match="cannot encode event as JSON"):
        envelope.dumps(value)
