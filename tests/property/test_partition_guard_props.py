"""The recompute's partition guard: Arrow's set membership against DuckDB's semi join.

A recomputed output keeps only the rows of the partitions it recomputed
(``JoinStage._only_partitions``). For one partition column of an exact type,
Arrow's ``is_in`` does it (:func:`~txjoin.join.batch.in_partitions`); the
semi join with IS NOT DISTINCT FROM (:func:`~txjoin.join.batch.semi_join`)
is the reference, and remains the path for everything else. Both must keep
the same rows, NULL partitions and duplicate rows included.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.join.batch import in_partitions, semi_join

TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int32": (pa.int32(), st.integers(-3, 3)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3)),
    "string": (pa.string(), st.sampled_from(["", "a", "A", "a ", "é", "e\u0301", "ß", "ss"])),
    "large_string": (pa.large_string(), st.sampled_from(["", "x", "X", "x\x00"])),
    "date": (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)) | st.just(dt.date(2000, 1, 1))),
    "float": (pa.float64(), st.sampled_from([0.0, -0.0, float("nan"), 1.5, -1.5])),
}


def _sorted_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(repr(v) for v in r.values()) for r in t.to_pylist()), key=repr)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, pa.Table, pa.Table]:
    name = draw(st.sampled_from(sorted(TYPES)))
    t, values = TYPES[name]
    maybe = st.none() | values
    keys = draw(st.lists(maybe, max_size=30))
    result = pa.table({"p": pa.array(keys, t), "v": pa.array(range(len(keys)), pa.int64())})
    wanted = draw(st.lists(maybe, max_size=10)) + draw(
        st.lists(st.sampled_from(keys), max_size=5) if keys else st.just([])
    )
    return name, result, pa.table({"p": pa.array(wanted, t)})


@settings(max_examples=examples(300, 3000), deadline=None)
@given(cases())
@example(
    (
        "int64",
        pa.table({"p": pa.array([None, 1, 1], pa.int64()), "v": [0, 1, 2]}),
        pa.table({"p": pa.array([None], pa.int64())}),
    )
)
@example(("float", pa.table({"p": [-0.0, float("nan")], "v": [0, 1]}), pa.table({"p": [0.0, float("nan")]})))
def test_arrow_membership_keeps_the_rows_the_semi_join_keeps(case: tuple[str, pa.Table, pa.Table]) -> None:
    name, result, typed = case
    fast = in_partitions(result, typed, ["p"])
    if name == "float":
        assert fast is None  # -0.0 and NaN: left to DuckDB
        return
    assert fast is not None
    with duckdb.connect() as con:
        reference = semi_join(con, result, typed, ["p"])
    assert fast.schema == result.schema
    assert _sorted_rows(fast) == _sorted_rows(reference)


def test_several_columns_or_other_types_take_the_semi_join() -> None:
    two = pa.table({"a": [1], "b": [2]})
    assert in_partitions(two, two, ["a", "b"]) is None
    ts = pa.table({"p": pa.array([dt.datetime(2020, 1, 1)], pa.timestamp("us"))})
    assert in_partitions(ts, ts, ["p"]) is None
    assert (
        in_partitions(
            pa.table({"p": pa.array([1], pa.int64())}), pa.table({"p": pa.array([1], pa.int32())}), ["p"]
        )
        is None
    )
