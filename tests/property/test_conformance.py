"""The conformance suite: every allowlist entry, run on PostgreSQL and through
txjoin's Spark translation over the same generated rows, compared exactly.

Rows of the conformance table (tests/property/conformance_cases.py) are drawn
with edge values: NULL, empty text, negative zero, type extremes, many
decimal digits, non-ASCII and mixed-case text, timestamps in several time
zones. PostgreSQL evaluates each case; txjoin plans one output holding every
scalar case (and one holding every aggregate case, per ``GROUP BY g``) and
runs it on Spark over the rows as capture reads them. Numbers compare as
decimals, text byte for byte, JSON parsed with exact numbers, timestamps as
instants. A case PostgreSQL rejects must make txjoin raise too.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import psycopg2
import psycopg2.extensions as ext
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.property.conformance_cases import CASES, CONFORMANCE_DDL
from tests.support.pg import en_us_database
from tests.support.profiles import examples
from txjoin.debezium.arrow import from_values
from txjoin.debezium.values import to_debezium
from txjoin.errors import TxJoinError
from txjoin.join.engine import SparkEngine
from txjoin.join.plan import plan_output
from txjoin.join.plan.allowlist import ENTRIES
from txjoin.join.planned import table_info
from txjoin.pg.catalog import Table, describe
from txjoin.pg.connect import exact_text
from txjoin.pg.names import QualifiedName

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

C = QualifiedName("public", "c")


def test_every_allowlist_entry_has_a_case() -> None:
    missing = [e.id for e in ENTRIES if not CASES.get(e.id)]
    assert not missing, f"allowlist entries without a conformance case: {missing}"
    unknown = sorted(set(CASES) - {e.id for e in ENTRIES})
    assert not unknown, f"cases for constructs not on the allowlist: {unknown}"


# -- values ------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6) | st.sampled_from(
    ["", "a", "A", "B", "b", "é", "É", "ß", "İ", "a_b", " a", "a ", "Zebra", "ant", "a\x01\tb", '\x0b"\\\x1f']
)
_SMALL = st.integers(-3, 3)


def _dec(places: int, int_digits: int) -> st.SearchStrategy[Decimal]:
    bound = 10**int_digits - 1
    return st.integers(-bound * 10**places, bound * 10**places).map(
        lambda v: Decimal(v).scaleb(-places)
    ) | st.sampled_from(
        [Decimal(0), Decimal("0.5").quantize(Decimal(1).scaleb(-places)) if places else Decimal(1)]
    )


_ZONES = [dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(dt.timedelta(hours=-8))]
#: Days and times the cases' constants name, so equality and the bounds are hit.
_DAYS = [dt.date(2024, 1, 31), dt.date(2024, 1, 1), dt.date(1999, 12, 31), dt.date(2000, 2, 29)]
_TS = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30)) | st.sampled_from(
    [
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
        dt.datetime(1970, 1, 1),
        dt.datetime(2024, 1, 31),
        dt.datetime(2024, 1, 31, 13, 45),
        dt.datetime(2024, 1, 31, 13, 45, 7, 500000),
    ]
)

_TIME = st.times() | st.sampled_from(
    [dt.time(0), dt.time(23, 59, 59, 999999), "24:00:00", dt.time(10, 0, 0, 500000), dt.time(10, 0, 0, 10)]
)

_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "g": st.none() | st.integers(0, 2),
    "i2": st.none() | st.sampled_from([-32768, 32767, 0, -1]) | _SMALL,
    "i4": st.none() | st.sampled_from([-(2**31), 2**31 - 1, 0]) | _SMALL | st.integers(-1000, 1000),
    "i4b": st.none() | _SMALL | st.integers(-(2**31), 2**31 - 1),
    "i8": st.none() | st.sampled_from([-(2**63), 2**63 - 1]) | st.integers(-(10**12), 10**12),
    "n": st.none() | _dec(18, 19) | _dec(3, 4),
    "n2": st.none() | _dec(2, 8),
    "n4": st.none() | _dec(4, 8),
    "f4": st.none() | st.floats(width=32, allow_nan=False) | st.sampled_from([-0.0, 0.5, 1.5]),
    "f8": st.none() | st.floats() | st.sampled_from([-0.0, 0.5, 2.5, -1.5, 1e300]),
    "b": st.none() | st.booleans(),
    "b2": st.none() | st.booleans(),
    "t": st.none() | _TEXT,
    "t2": st.none() | _TEXT,
    "vc": st.none() | _TEXT,
    "ch": st.none() | st.text("ab é", max_size=5),
    "ch2": st.none() | st.text("ab é", max_size=5),
    "d": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)) | st.sampled_from(_DAYS),
    "ts": st.none() | _TS,
    "tz": st.none() | st.builds(lambda d, z: d.replace(tzinfo=z), st.datetimes(dt.datetime(2, 1, 1), dt.datetime(9998, 1, 1)), st.sampled_from(_ZONES)),
    "tm": st.none() | _TIME,
    "tm2": st.none() | _TIME,
    "u": st.none() | st.uuids(),
    "by": st.none() | st.binary(max_size=4),
    "j": st.none() | st.sampled_from(['{"a": 1}', "[1, 2.50]", '"x"', "null", '{"b" : [true]}']),
    "jb": st.none() | st.sampled_from(['{"a": 1}', "[1, 2.50]", '"x"', "{}", '{"b":1, "a" : {"é": null}}', "-0.0",
                                       '{"k": "v\\n\\"q\\u0001", "n": 1.50, "o": {"x y": [1, "é", null, true]}, "z": null}',
                                       '[{"k": 1}, "s", 10e2, -1.0e-3]', '{"k": "v", "n": 1e-3, "a": [[], {}]}']),
    "ai": st.none() | st.lists(st.none() | _SMALL, max_size=3),
    "at": st.none() | st.lists(st.none() | st.sampled_from(["a", "b", "é"]), max_size=3),
    "e": st.none() | st.sampled_from(["tiny", "small", "medium", "large"]),
    "dm": st.none() | st.sampled_from([5, 1001, 0]) | st.integers(-(10**11), 2**63 - 1),
}  # fmt: skip
ROW = st.fixed_dictionaries(_FIELDS)


# -- the two sides -------------------------------------------------------------------


@pytest.fixture(scope="module")
def conformance_db(pg_server: Any) -> Iterator[str]:
    from txjoin.pg import admin

    name = "conformance_en_us"
    # An en-US ICU database: text equality and COLLATE "C" must hold under it.
    dsn = en_us_database(pg_server, name)
    with psycopg2.connect(dsn) as c, c.cursor() as cur:
        cur.execute(CONFORMANCE_DDL)
    yield dsn
    admin.drop_database(pg_server.dsn(), name)


def _insert(conn: Any, rows: list[dict[str, Any]]) -> None:
    with conn.cursor() as cur:
        cur.execute("TRUNCATE c")
        for i, r in enumerate(rows):
            cols = ["id", *r]
            vals = [i + 1, *(_adapt(v) for v in r.values())]
            cur.execute(
                f"INSERT INTO c ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                vals,
            )
    conn.commit()


def _adapt(v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _capture_rows(dsn: str, table: Table) -> pa.Table:
    """The table's rows as capture reads them: text output -> Debezium values -> Arrow."""
    conn = psycopg2.connect(
        dsn, options="-c TimeZone=UTC -c DateStyle=ISO -c extra_float_digits=3 -c bytea_output=hex"
    )
    ext.register_type(ext.new_type(tuple(ext.string_types.keys()), "RAW", lambda v, c: v), conn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(table.column_names)} FROM c ORDER BY id")
            rows = cur.fetchall()
    finally:
        conn.close()
    arrays = [
        from_values([to_debezium(r[i], col.type) for r in rows], col.type)
        for i, col in enumerate(table.columns)
    ]
    return pa.Table.from_arrays(arrays, names=list(table.column_names))


def _select(case: str, i: int) -> str:
    return f"({case.removeprefix('@agg ').removeprefix('@where ')}) AS v{i}"


def _sql(cases: list[str], agg: bool) -> tuple[str, list[str]]:
    cols = ", ".join(_select(c, i) for i, c in enumerate(cases))
    if agg:
        return f"SELECT g, {cols} FROM c GROUP BY g", ["g"]
    return f"SELECT id, {cols} FROM c", ["id"]


def _where_sql(case: str) -> tuple[str, list[str]]:
    return f"SELECT id FROM c WHERE {case.removeprefix('@where ')}", ["id"]


def _pg_session(dsn: str) -> Any:
    """One connection for an example's queries: in autocommit, an error ends only its statement."""
    conn = exact_text(psycopg2.connect(dsn, options="-c TimeZone=UTC"))
    conn.autocommit = True
    return conn


def _pg(conn: Any, sql: str) -> list[dict[str, Any]] | Exception:
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    except psycopg2.Error as e:
        return e


def _txjoin(
    spark: Any, table: Table, rows: pa.Table, sql: str, key: list[str]
) -> list[dict[str, Any]] | Exception:
    plan = plan_output("conf", sql, key, {C: table_info(table)})  # a refusal fails the test
    try:
        out = SparkEngine(spark, {C: table}).run(plan, {"c": rows})
    except TxJoinError as e:
        return e
    # real: PostgreSQL prints the shortest text that reads back as the same float4.
    floats = [f.name for f in out.schema if pa.types.is_float32(f.type)]
    result: list[dict[str, Any]] = out.to_pylist()
    for r in result:
        for name in floats:
            if r[name] is not None:
                r[name] = float(str(np.float32(r[name])))
    return result


def _norm(v: Any) -> Any:
    """Exact, engine-independent form: numbers as Decimal; text and JSON text as they are."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else ("f", v, math.copysign(1, v))
    if isinstance(v, int | Decimal):
        return Decimal(v).normalize() if Decimal(v).is_finite() else str(v)
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, memoryview | bytearray):
        return bytes(v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    return v


def _rows(rows: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {r[key]: {k: _norm(v) for k, v in r.items()} for r in rows}


def _check(pg: Any, spark: Any, table: Table, data: pa.Table, cases: list[str], agg: bool) -> list[str]:
    """Differences between PostgreSQL (connection ``pg``) and txjoin over ``cases``, one line each."""
    problems: list[str] = []
    expected = {i: _pg(pg, _sql([c], agg)[0]) for i, c in enumerate(cases)}
    good = [i for i, e in expected.items() if not isinstance(e, Exception)]
    key = "g" if agg else "id"
    got = _txjoin(spark, table, data, *_sql([cases[i] for i in good], agg)) if good else []
    if isinstance(got, Exception):  # find the cases Spark failed on
        for i in good:
            one = _txjoin(spark, table, data, *_sql([cases[i]], agg))
            if isinstance(one, Exception):
                problems.append(f"{cases[i]}: PostgreSQL answered, txjoin raised {str(one)[:300]}")
        return problems or [f"txjoin raised on the cases together: {got}"]
    got_rows = _rows(got, key)
    for pos, i in enumerate(good):
        answer = expected[i]
        assert not isinstance(answer, Exception)
        pg_v = {k: r["v0"] for k, r in _rows(answer, key).items()}
        mine_v = {k: r[f"v{pos}"] for k, r in got_rows.items()}
        if mine_v != pg_v:
            diff = {
                k: (mine_v.get(k), pg_v.get(k))
                for k in set(mine_v) | set(pg_v)
                if mine_v.get(k) != pg_v.get(k)
            }
            problems.append(f"{cases[i]}: {key} -> (txjoin, PostgreSQL): {diff}")
    for i, e in expected.items():
        if isinstance(e, Exception):
            one = _txjoin(spark, table, data, *_sql([cases[i]], agg))
            if not isinstance(one, Exception):
                problems.append(
                    f"{cases[i]}: PostgreSQL raised {str(e).splitlines()[0]}, txjoin answered {one}"
                )
    return problems


def _by_kind() -> tuple[list[str], list[str], list[str]]:
    scalar: list[str] = []
    agg: list[str] = []
    where: list[str] = []
    for cases in CASES.values():
        for c in cases:
            (agg if c.startswith("@agg ") else where if c.startswith("@where ") else scalar).append(c)
    return scalar, agg, where


def _only(**values: Any) -> dict[str, Any]:
    """A generated row's shape: every column NULL but ``values``."""
    return {**dict.fromkeys(_FIELDS), **values}


@pytest.mark.slow(110)
@settings(max_examples=examples(ci=8, thorough=200))
@given(rows=st.lists(ROW, max_size=6))
# Spark's runtime errors must be txjoin's errors where PostgreSQL raises one (found in CI): an
# overflow (bigint - 1) and the translation's raise_error (float overflow).
@example(rows=[_only(i8=-(2**63))])
@example(rows=[_only(f8=1.7976931348623157e308, f4=3.4028234663852886e38)])
def test_allowlist_matches_postgresql(conformance_db: str, spark: Any, rows: list[dict[str, Any]]) -> None:
    conn = psycopg2.connect(conformance_db)
    try:
        _insert(conn, rows)
        table = describe(conn, [C])[C]
    finally:
        conn.close()
    data = _capture_rows(conformance_db, table)
    scalar, agg, where = _by_kind()
    session = _pg_session(conformance_db)
    try:
        problems = _check(session, spark, table, data, scalar, agg=False)
        problems += _check(session, spark, table, data, agg, agg=True)
        for case in where:
            sql, key = _where_sql(case)
            pg = _pg(session, sql)
            mine = _txjoin(spark, table, data, sql, key)
            if isinstance(pg, Exception) or isinstance(mine, Exception):
                problems.append(f"{case}: PostgreSQL {pg}, txjoin {mine}")
            elif sorted(r["id"] for r in mine) != sorted(r["id"] for r in pg):
                problems.append(f"{case}: txjoin {mine}, PostgreSQL {pg}")
    finally:
        session.close()
    assert not problems, "\n".join(problems)
