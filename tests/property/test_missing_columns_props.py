"""A change whose after image lacks a column an output reads is refused, whatever else the batch holds.

``parse_released`` reads the records' JSON once (``_fast``) and sends to the
second, key-by-key reading (``_check_columns``) only the records where a used
column came out null, since a missing key parses as null. The reference here
is the record itself: a create or update whose ``after`` object lacks a used
key must raise :class:`SchemaChangeError` naming its transaction and the
missing columns; a used column present as JSON null, a delete, a truncate
and a column no output reads must not.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.errors import SchemaChangeError
from txjoin.join.changes import parse_released
from txjoin.join.replica import TableSpec
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

T = QualifiedName("public", "items")
COLUMNS = (("id", ColumnType(23, "int4")), ("name", ColumnType(25, "text")), ("qty", ColumnType(20, "int8")))
SPEC = TableSpec(T, ("id",), COLUMNS)
OTHER = {"name": st.text(max_size=3), "qty": st.integers(-5, 5)}

#: One record: (op, what each non-key column of ``after`` is: a value, JSON null or absent).
Record = tuple[str, dict[str, str]]


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    shape = st.sampled_from(["value", "null", "absent"])
    out = []
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["c", "u", "d", "t"]))
        out.append((op, {c: draw(shape) for c in OTHER}))
    return out


def _frame(recs: list[Record], wrapped: bool) -> pd.DataFrame:
    values = []
    for i, (op, shape) in enumerate(recs):
        after: dict[str, Any] = {"id": i}
        for c, how in shape.items():
            if how != "absent":
                after[c] = None if how == "null" else (f"n{i}" if c == "name" else i)
        rec: dict[str, Any] = {"op": op, "before": {"id": i} if op in "ud" else None}
        rec["after"] = None if op in "dt" else after
        values.append(json.dumps({"schema": {}, "payload": rec} if wrapped else rec))
    n = len(recs)
    return pd.DataFrame({
        "source": "s", "tx_seq": 2, "xid": [100 + i for i in range(n)], "commit_lsn": 1_000,
        "commit_ts_ms": 0, "total_order": list(range(1, n + 1)), "lsn": [500 + i for i in range(n)],
        "op": [op for op, _ in recs], "table": str(T), "value": values, "tx_events": n,
    })  # fmt: skip


@settings(max_examples=examples(200, 2000), deadline=None)
@given(records(), st.sets(st.sampled_from(sorted(OTHER))), st.booleans())
@example([("u", {"name": "value", "qty": "value"})] * 5 + [("u", {"name": "absent", "qty": "value"})], {"name"}, False)
@example([("c", {"name": "null", "qty": "value"})], {"name"}, False)
@example([("u", {"name": "value", "qty": "absent"}), ("c", {"name": "absent", "qty": "value"})], {"name", "qty"}, False)
@example([("d", {"name": "absent", "qty": "absent"}), ("t", {"name": "absent", "qty": "absent"})], {"qty"}, False)
def test_a_used_column_missing_from_an_after_image_is_refused(
    recs: list[Record], used: set[str], wrapped: bool
) -> None:
    frame = _frame(recs, wrapped)
    bad = {
        100 + i: sorted(c for c in used if shape[c] == "absent")
        for i, (op, shape) in enumerate(recs)
        if op in "cu" and any(shape[c] == "absent" for c in used)
    }
    if not bad:
        out = parse_released(frame, {T: SPEC}, {T: used | {"id"}})
        assert out[T].num_rows == len(recs)
        return
    with pytest.raises(SchemaChangeError) as refused:
        parse_released(frame, {T: SPEC}, {T: used | {"id"}})
    xid = refused.value.details["xid"]
    assert xid in bad
    assert refused.value.details["columns"] == bad[xid]
    assert f"transaction {xid} changes {T}" in str(refused.value)
