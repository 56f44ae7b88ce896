"""PostgreSQL's answer end to end for outputs keyed by timestamps, dates and long numerics.

BI's outputs group by days and hours (``date_trunc``) and by numeric values.
Each batch replaces such keys in the output's Delta table, so the replacing
predicate compares timestamp and decimal columns: delta-rs keeps timestamp
statistics in milliseconds and decimal ones through a double, and refused a
nanosecond timestamp literal. Compared with the same SQL on PostgreSQL after
the snapshot and after streamed changes.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE events (id int PRIMARY KEY, at timestamp, at_tz timestamptz, amount numeric(24, 6), day date);
INSERT INTO events VALUES
  (1, '2024-01-01 10:00:00.123456', '2024-01-01 10:00:00.999999+00', 123456789012.123456, '2024-01-01'),
  (2, '2024-01-01 11:30:00', '2024-01-02 00:00:00.000001+00', 123456789012.123457, '2024-01-02'),
  (3, '2024-01-02 00:00:00.000001', '1969-12-31 23:59:59.9995+00', 12345678901234567.000001, '1999-12-31');
"""

OUTPUTS = {
    "by_at": "SELECT at, count(*) AS n FROM events GROUP BY at",
    "by_at_tz": "SELECT at_tz, count(*) AS n FROM events GROUP BY at_tz",
    "by_amount": "SELECT amount, count(*) AS n, max(id) AS last FROM events GROUP BY amount",
    "by_date": "SELECT day, count(*) AS n FROM events GROUP BY day",
}
KEYS = {"by_at": ["at"], "by_at_tz": ["at_tz"], "by_amount": ["amount"], "by_date": ["day"]}


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def value(v: Any) -> Any:
        if isinstance(v, Decimal):
            return v.normalize()
        if hasattr(v, "tzinfo") and getattr(v, "tzinfo", None) is not None:
            return v.timestamp()
        return v

    return sorted((tuple(value(v) for v in r.values()) for r in rows), key=repr)


def test_time_and_numeric_keys_end_to_end(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    spec = build_spec(
        {
            "name": "time_keys",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": pg_db, "tables": ["public.events"]}},
            "outputs": {name: {"key": KEYS[name], "sql": sql} for name, sql in OUTPUTS.items()},
        },
        tmp_path,
        "time keys spec",
    )
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def check(label: str) -> None:
        for name, sql in OUTPUTS.items():
            got = _canonical(DeltaRsStore().read(spec.outputs[name].path).to_pylist())
            expected = _canonical(query(pg_db, sql))
            assert got == expected, f"{name} {label}:\n{got}\n{expected}"

    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            check("snapshot")
            xids = {
                commit(pg_db, "INSERT INTO events VALUES (4, '2024-01-01 10:00:00.123456', "
                       "'2024-01-01 10:00:00.999999+00', 123456789012.123456, '2024-01-01')"),
                commit(pg_db, "UPDATE events SET at = '2024-01-02 00:00:00.000002', amount = 123456789012.123457 "
                       "WHERE id = 1"),
                commit(pg_db, "DELETE FROM events WHERE id = 3"),
                commit(pg_db, "UPDATE events SET at_tz = '2024-01-02 00:00:00.000001+00' WHERE id = 4"),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            check("after changes")
        finally:
            pipeline.close()
