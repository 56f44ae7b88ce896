"""Value conversion checked against what PostgreSQL itself computes."""

from __future__ import annotations

import base64
import json

import psycopg2
import psycopg2.extensions as ext
import pytest

from tests.support.capture import execute
from txjoin.debezium.values import from_debezium, to_debezium
from txjoin.pg.types import ColumnType

pytestmark = pytest.mark.postgres

ROWS = [
    "(1, -5, 9000000000, 12.34, 1.5, 't', 'héllo', 'ab', '2023-09-23', '2023-09-23 20:05:00.123456', "
    "'2023-09-23 21:00:00.5+02', '13:14:15', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, null]}', "
    "'\\x00ff', '{1,NULL,3}', '{\"a b\",\"q\\\"\",NULL}')",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '1900-01-01', '1960-06-06 06:06:06', '1960-06-06 06:06:06-03:30', "
    "'00:00:00.000001', NULL, NULL, '\\x', '{}', '{}')",
]


def test_values_match_postgresql_computations(pg_db: str) -> None:
    execute(
        pg_db,
        "CREATE TABLE v (id int primary key, i2 smallint, i8 bigint, n numeric(8,2), f float8, b boolean, "
        "t text, c char(4), d date, ts timestamp, tz timestamptz, tm time, u uuid, j jsonb, by bytea, "
        "ai int[], at text[]); INSERT INTO v VALUES " + ", ".join(ROWS),
    )
    conn = psycopg2.connect(pg_db, options="-c TimeZone=Asia/Kolkata")
    try:
        raw = psycopg2.connect(pg_db, options="-c TimeZone=Asia/Kolkata")
        ext.register_type(ext.new_type(tuple(ext.string_types.keys()), "RAW", lambda v, c: v), raw)
        with raw.cursor() as rc, conn.cursor() as cur:
            rc.execute(
                "SELECT a.attname, t.typname, a.atttypid, a.atttypmod FROM pg_attribute a "
                "JOIN pg_type t ON t.oid = a.atttypid WHERE attrelid = 'v'::regclass AND attnum > 0 ORDER BY attnum"
            )
            types = {r[0]: ColumnType(int(r[2]), r[1], int(r[3])) for r in rc.fetchall()}
            rc.execute("SELECT * FROM v ORDER BY id")
            texts = rc.fetchall()
            cur.execute(
                "SELECT (d - '1970-01-01'::date), "
                "(extract(epoch from ts) * 1000000)::bigint, "
                "(extract(epoch from tz) * 1000000)::bigint, "
                "(extract(epoch from tm) * 1000000)::bigint, "
                "encode(by, 'base64'), array_to_json(ai)::text, array_to_json(at)::text, "
                "i2, i8, n, f, b, t, c, d, ts, tz, u, j::text, by, ai, at FROM v ORDER BY id"
            )
            computed = cur.fetchall()
        raw.close()
    finally:
        conn.close()
    names = list(types)
    for text_row, pg in zip(texts, computed, strict=True):
        row = {n: to_debezium(v, types[n]) for n, v in zip(names, text_row, strict=True)}
        days, ts_us, tz_us, tm_us, b64, ai_json, at_json = pg[:7]
        assert row["d"] == days
        assert row["ts"] == ts_us
        assert row["tm"] == tm_us
        assert from_debezium(row["tz"], types["tz"]).timestamp() * 1_000_000 == pytest.approx(tz_us, abs=1), (
            "timestamptz printed in a non-UTC session must convert to the same instant"
        )
        assert str(row["tz"]).endswith("Z")
        assert row["by"] == b64.replace("\n", "")
        assert row["ai"] == json.loads(ai_json)
        assert row["at"] == json.loads(at_json)
        # Back to Python: the values psycopg2 itself returns.
        i2, i8, n, f, b, t, c, d, ts, tz, u, j, by, ai, at = pg[7:]
        assert from_debezium(row["i2"], types["i2"]) == i2
        assert from_debezium(row["i8"], types["i8"]) == i8
        assert from_debezium(row["n"], types["n"]) == n
        assert from_debezium(row["f"], types["f"]) == f
        assert from_debezium(row["b"], types["b"]) == b
        assert from_debezium(row["t"], types["t"]) == t
        assert from_debezium(row["c"], types["c"]) == c
        assert from_debezium(row["d"], types["d"]) == d
        assert from_debezium(row["ts"], types["ts"]) == ts
        assert from_debezium(row["tz"], types["tz"]) == tz
        assert from_debezium(row["u"], types["u"]) == u
        assert from_debezium(row["j"], types["j"]) == j
        assert from_debezium(row["by"], types["by"]) == (bytes(by) if by is not None else None)
        assert from_debezium(row["ai"], types["ai"]) == ai
        assert from_debezium(row["at"], types["at"]) == at
    assert base64.b64decode(str(to_debezium("\\x00ff", types["by"]))) == b"\x00\xff"
