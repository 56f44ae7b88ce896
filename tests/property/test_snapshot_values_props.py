"""The columnar snapshot's values equal the per-value converter's, on PostgreSQL's own text.

For random rows (edge values included: NaN and infinities, 'infinity'
dates and timestamps, years before 1000, 24:00:00, empty strings beside
NULLs, quotes, commas and line breaks in text and arrays), the snapshot
reader (COPY ... CSV, parsed by Arrow, converted column by column with
:func:`txjoin.debezium.arrow.from_text`) gives exactly the Debezium values
the per-value converter gives for the text psycopg2 reads: the values
pgoutput's stream would carry.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import psycopg2
import psycopg2.extensions as ext
import psycopg2.extras
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.capture.snapshot import copy_rows
from txjoin.debezium.arrow import to_values
from txjoin.debezium.values import to_debezium
from txjoin.pg.catalog import describe
from txjoin.pg.connect import session_options
from txjoin.pg.names import QualifiedName

pytestmark = pytest.mark.postgres

COLUMNS = {
    "i2": "smallint",
    "i8": "bigint",
    "f4": "real",
    "f8": "double precision",
    "n": "numeric(12,3)",
    "nu": "numeric",
    "b": "boolean",
    "d": "date",
    "ts": "timestamp",
    "tz": "timestamptz",
    "tm": "time",
    "tx": "text",
    "by": "bytea",
    "j": "jsonb",
    "u": "uuid",
    "ai": "int[]",
    "at": "text[]",
}

TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12) | st.sampled_from(
    ["", " ", '"', "a,b", "line\nbreak", "tab\there", "NULL", "\\", "ü€"]
)
FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=32) | st.sampled_from([0.1, -0.0, 1e-40])
DAY = st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))
STAMP = st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31))


def _maybe(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | s


ROW = st.fixed_dictionaries(
    {
        "i2": _maybe(st.integers(-(2**15), 2**15 - 1)),
        "i8": _maybe(st.integers(-(2**63), 2**63 - 1)),
        "f4": _maybe(FLOAT),
        "f8": _maybe(st.floats(allow_nan=True, allow_infinity=True)),
        "n": _maybe(st.decimals(-(10**9) + 1, 10**9 - 1, places=3, allow_nan=False)),
        "nu": _maybe(st.decimals(allow_nan=True, allow_infinity=False) | st.just(Decimal("NaN"))),
        "b": _maybe(st.booleans()),
        "d": _maybe(DAY.map(str) | st.sampled_from(["infinity", "-infinity", "0999-12-31"])),
        "ts": _maybe(STAMP.map(str) | st.sampled_from(["infinity", "-infinity"])),
        "tz": _maybe(STAMP.map(lambda t: f"{t}+00") | st.sampled_from(["infinity", "0500-01-01 10:00:00+00"])),
        "tm": _maybe(st.times().map(str) | st.just("24:00:00")),
        "tx": _maybe(TEXT),
        "by": _maybe(st.binary(max_size=8).map(psycopg2.Binary)),
        "j": _maybe(st.dictionaries(st.sampled_from(["k", "ü", "a b"]), st.integers() | TEXT, max_size=2).map(psycopg2.extras.Json)),
        "u": _maybe(st.uuids().map(str)),
        "ai": _maybe(st.lists(_maybe(st.integers(-(2**31), 2**31 - 1)), max_size=3)),
        "at": _maybe(st.lists(_maybe(TEXT), max_size=3)),
    }
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b and type(a) is type(b)) or (isinstance(a, list) and a == b)


@pytest.fixture
def values_db(pg_db: str) -> str:
    cols = ", ".join(f"{n} {t}" for n, t in COLUMNS.items())
    conn = psycopg2.connect(pg_db)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE v (id int PRIMARY KEY, {cols})")
    conn.commit()
    conn.close()
    return pg_db


@settings(
    max_examples=examples(ci=25, thorough=300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=st.lists(ROW, min_size=1, max_size=8))
def test_snapshot_values_equal_the_per_value_conversion(values_db: str, rows: list[dict[str, Any]]) -> None:
    conn = psycopg2.connect(values_db, options=session_options())
    try:
        with conn.cursor() as cur:
            cur.execute("TRUNCATE v")
            names = list(COLUMNS)
            marks = ", ".join(["%s"] * (len(names) + 1))
            for i, r in enumerate(rows):
                cur.execute(f"INSERT INTO v (id, {', '.join(names)}) VALUES ({marks})", [i, *(r[n] for n in names)])
        conn.commit()
        table = describe(conn, [QualifiedName("public", "v")])[QualifiedName("public", "v")]
        conn.rollback()
        with conn.cursor() as cur:
            got = copy_rows(cur, table, "SELECT * FROM v ORDER BY id")
        raw = psycopg2.connect(values_db, options=session_options())
        ext.register_type(ext.new_type(tuple(ext.string_types.keys()), "RAW", lambda v, c: v), raw)
        with raw.cursor() as rc:
            rc.execute("SELECT * FROM v ORDER BY id")
            texts = rc.fetchall()
        raw.close()
    finally:
        conn.close()
    for col_index, column in enumerate(table.columns):
        vectorized = to_values(got.column(column.name), column.type)
        expected = [to_debezium(t[col_index], column.type) for t in texts]
        for row, (a, b) in enumerate(zip(vectorized, expected, strict=True)):
            assert _same(a, b), f"{column.name} row {row}: snapshot {a!r} != per-value {b!r} (text {texts[row][col_index]!r})"
