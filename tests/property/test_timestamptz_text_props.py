"""timestamptz text -> Debezium's UTC string, against PostgreSQL's own printing.

Capture converts every timestamptz value from its text output. In capture's
sessions (TimeZone=UTC) that text is rearranged as it stands (the fast path of
``values._timestamptz``); text with any other offset goes through ``datetime``.
Generated instants, printed by PostgreSQL in UTC and in zones with odd offsets
(half and quarter hours, and Amsterdam's +00:19:32 before 1937), must
convert to the string computed here from the instant alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.debezium.values import to_debezium
from txjoin.pg.types import ColumnType

pytestmark = pytest.mark.postgres

TIMESTAMPTZ = ColumnType(1184, "timestamptz")
#: UTC as capture sets it; the others print offsets such as +05:30, -03:30, +12:45 and +00:19:32.
ZONES = ("UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham", "Europe/Amsterdam")

instants = st.datetimes(
    min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)
) | st.datetimes(  # whole seconds and round fractions, whose trailing zeros PostgreSQL drops
    min_value=dt.datetime(1800, 1, 1), max_value=dt.datetime(2100, 1, 1)
).map(lambda t: t.replace(microsecond=t.microsecond // 100_000 * 100_000))


def _expected(t: dt.datetime) -> str:
    """Debezium's string for the UTC instant ``t`` (naive), from its fields alone."""
    fraction = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}{fraction}Z"


@pytest.fixture(scope="module")
def zones(pg_server: Any) -> Iterator[dict[str, Any]]:
    """One connection per zone, printing in that zone."""
    conns = {z: psycopg2.connect(pg_server.dsn(), options=f"-c TimeZone={z}") for z in ZONES}
    try:
        yield conns
    finally:
        for c in conns.values():
            c.close()


@settings(max_examples=examples(ci=60, thorough=600))
@given(ts=st.lists(instants, min_size=1, max_size=20))
@example(ts=[dt.datetime(361, 11, 23, 12, 34, 50, 500000), dt.datetime(2023, 9, 23, 19, 0, 0, 1)])
@example(ts=[dt.datetime(1970, 1, 1), dt.datetime(1999, 12, 31, 23, 59, 59, 999999)])
def test_timestamptz_text_converts_to_the_instant_in_every_zone(
    zones: dict[str, Any], ts: list[dt.datetime]
) -> None:
    given_text = [t.isoformat(sep=" ") + "+00" for t in ts]
    for zone, conn in zones.items():
        with conn.cursor() as cur:
            cur.execute("SELECT x::timestamptz::text FROM unnest(%s::text[]) WITH ORDINALITY u(x, i) ORDER BY i",
                        (given_text,))  # fmt: skip
            printed = [r[0] for r in cur.fetchall()]
        conn.rollback()
        for t, text in zip(ts, printed, strict=True):
            assert to_debezium(text, TIMESTAMPTZ) == _expected(t), (zone, text)
