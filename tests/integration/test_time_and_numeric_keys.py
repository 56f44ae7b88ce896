"""PostgreSQL's answer end to end for outputs keyed by timestamps, dates and long numerics.

BI's outputs group by days and hours (``date_trunc``) and by numeric values.
Each batch replaces such keys in the output's Delta table, so the replacing
predicate compares timestamp and decimal columns: delta-rs keeps timestamp
statistics in milliseconds and decimal ones through a double, and refused a
nanosecond timestamp literal. Compared with the same SQL on PostgreSQL after
the snapshot and after streamed changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE events (id int PRIMARY KEY, at timestamp, at_tz timestamptz, amount numeric(24, 6), day date,
  raw numeric(38, 18));
INSERT INTO events VALUES
  (1, '2024-01-01 10:00:00.123456', '2024-01-01 10:00:00.999999+00', 123456789012.123456, '2024-01-01',
   12345678901.000000000000000001),
  (2, '2024-01-01 11:30:00', '2024-01-02 00:00:00.000001+00', 123456789012.123457, '2024-01-02', 1.5),
  (3, '2024-01-02 00:00:00.000001', '1969-12-31 23:59:59.9995+00', 12345678901234567.000001, '1999-12-31',
   12345678901.000000000000000002);
"""

OUTPUTS = {
    "by_at": "SELECT at, count(*) AS n FROM events GROUP BY at",
    "by_at_tz": "SELECT at_tz, count(*) AS n FROM events GROUP BY at_tz",
    "by_amount": "SELECT amount, count(*) AS n, max(id) AS last FROM events GROUP BY amount",
    "by_date": "SELECT day, count(*) AS n FROM events GROUP BY day",
    "by_raw": "SELECT raw, count(*) AS n FROM events GROUP BY raw",
}
KEYS = {"by_at": ["at"], "by_at_tz": ["at_tz"], "by_amount": ["amount"], "by_date": ["day"], "by_raw": ["raw"]}


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def value(v: Any) -> Any:
        if isinstance(v, Decimal):
            with localcontext(prec=100):  # normalize() rounds to 28 digits in the default context
                return v.normalize()
        if hasattr(v, "tzinfo") and getattr(v, "tzinfo", None) is not None:
            return v.timestamp()
        return v

    return sorted((tuple(value(v) for v in r.values()) for r in rows), key=repr)


def _run(
    spark: Any,
    pg_db: str,
    tmp_path: Path,
    tables: list[str],
    outputs: dict[str, tuple[list[str], str]],
    changes: Sequence[tuple[str, ...]],
) -> None:
    """A pipeline over ``tables`` whose ``outputs`` (name -> key and SQL) equal the SQL on PostgreSQL
    after the snapshot and after ``changes`` (one transaction's statements each)."""
    spec = build_spec(
        {
            "name": "odd_keys",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": pg_db, "tables": tables}},
            "outputs": {name: {"key": key, "sql": sql} for name, (key, sql) in outputs.items()},
        },
        tmp_path,
        "odd keys spec",
    )
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def check(label: str) -> None:
        for name, (_, sql) in outputs.items():
            got = _canonical(DeltaRsStore().read(spec.outputs[name].path).to_pylist())
            expected = _canonical(query(pg_db, sql))
            assert got == expected, f"{name} {label}:\n{got}\n{expected}"

    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            check("snapshot")
            xids = {commit(pg_db, *statements) for statements in changes}
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            check("after changes")
        finally:
            pipeline.close()


def test_outputs_keyed_by_time_and_numerics(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    changes = [
        (
            "INSERT INTO events VALUES (4, '2024-01-01 10:00:00.123456', '2024-01-01 10:00:00.999999+00', "
            "123456789012.123456, '2024-01-01', 12345678901.000000000000000001)",
        ),
        ("UPDATE events SET at = '2024-01-02 00:00:00.000002', amount = 123456789012.123457 WHERE id = 1",),
        ("DELETE FROM events WHERE id = 3",),
        ("UPDATE events SET raw = 12345678901.000000000000000003 WHERE id = 2",),
        ("UPDATE events SET at_tz = '2024-01-02 00:00:00.000001+00' WHERE id = 4",),
    ]
    outputs = {name: (KEYS[name], sql) for name, sql in OUTPUTS.items()}
    _run(spark, pg_db, tmp_path, ["public.events"], outputs, changes)


KEYED = """
CREATE TABLE prices (sku numeric(30, 6) PRIMARY KEY, label text);
CREATE TABLE slots (at timestamptz PRIMARY KEY, sku numeric(30, 6), note text);
CREATE TABLE tags (id uuid PRIMARY KEY, at timestamptz, name text COLLATE "C");
CREATE TABLE days (day date, name text, n int, PRIMARY KEY (day, name));
INSERT INTO prices VALUES (123456789012345678.000001, 'long'), (123456789012345678.000002, 'next'), (1.5, 'short');
INSERT INTO slots VALUES ('2024-01-01 00:00:00.000001+00', 123456789012345678.000001, 'a'),
  ('2024-01-01 00:00:00.000002+00', 123456789012345678.000002, 'b'), ('2024-01-01 00:00:00.000003+00', 1.5, 'c');
INSERT INTO tags VALUES ('00000000-0000-0000-0000-000000000001', '2024-01-01 00:00:00.000001+00', 'x'),
  ('00000000-0000-0000-0000-000000000002', '2024-01-01 00:00:00.000002+00', 'Y');
INSERT INTO days VALUES ('2024-01-01', 'a', 1), ('2024-01-01', 'B', 2), ('2024-01-02', 'a', 3);
"""

JOINED = {
    "slot_prices": (
        ["at"],
        "SELECT s.at, s.note, p.sku, p.label FROM slots s JOIN prices p ON p.sku = s.sku",
    ),
    "tag_slots": (
        ["id"],
        "SELECT t.id, t.name, s.note FROM tags t LEFT JOIN slots s ON s.at = t.at",
    ),
    "by_day": (["day", "name"], "SELECT day, name, n FROM days"),
}


def test_tables_keyed_by_numerics_timestamps_uuids_and_pairs(spark: Any, pg_db: str, tmp_path: Path) -> None:
    """Replicas keyed by such columns: their changes are applied and looked up by key (an upsert
    through the key's index, lookups of few keys through it), and joins reach rows by them."""
    execute(pg_db, KEYED)
    changes = [
        ("UPDATE prices SET label = 'longer' WHERE sku = 123456789012345678.000001",),
        (
            "UPDATE prices SET sku = 123456789012345678.000003 WHERE sku = 123456789012345678.000002",
            "UPDATE slots SET sku = 123456789012345678.000003 WHERE at = '2024-01-01 00:00:00.000002+00'",
        ),
        (
            "DELETE FROM slots WHERE at = '2024-01-01 00:00:00.000001+00'",
            "INSERT INTO slots VALUES ('2024-01-01 00:00:00.000001+00', 1.5, 'again')",
        ),
        ("UPDATE tags SET at = '2024-01-01 00:00:00.000003+00' WHERE id = '00000000-0000-0000-0000-000000000002'",),
        (
            "UPDATE days SET n = 9 WHERE day = '2024-01-01' AND name = 'B'",
            "DELETE FROM days WHERE day = '2024-01-02'",
        ),
    ]
    tables = ["public.prices", "public.slots", "public.tags", "public.days"]
    _run(spark, pg_db, tmp_path, tables, JOINED, changes)
