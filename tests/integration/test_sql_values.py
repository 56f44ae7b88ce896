"""PostgreSQL's answer end to end for values Spark would write differently:
time keys, JSON built from json/jsonb/timestamps, extract(dow), arr[i] past the
end, PostgreSQL's output column names and identifier folding. Each output is
compared with the same SQL on PostgreSQL after the snapshot and after streamed
inserts, updates and deletes: JSON and time as text, byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE stores (code text PRIMARY KEY, name text, opens time);
CREATE TABLE shifts (
    id int PRIMARY KEY, store text, starts time, meta jsonb, note json,
    tags int[], day date, created timestamp
);
INSERT INTO stores VALUES ('a', 'Alpha', '09:00'), ('b', 'Beta', '10:30:00.5'), ('c', 'Gamma', '24:00');
INSERT INTO shifts VALUES
  (1, 'a', '09:00', '{"role": "cook", "hours": 8}', '{"x" :  1}', '{1,2,3,4,5}', '2026-01-04', '2026-01-01 10:00:00'),
  (2, 'a', '09:00', '{"b": [1, 2.50], "a": null}', NULL, '{1}', '2026-01-05', '2026-01-01 10:00:00.25'),
  (3, 'b', '10:30:00.5', NULL, '[true, "é\\n"]', NULL, '2026-01-10', NULL),
  (4, 'c', '24:00', '"tab\\there"', '{}', '{}', '2026-01-11', '0099-12-31 23:59:59.999999');
"""

# Unaliased: PostgreSQL names these starts, count, json_agg, jsonb_build_object.
BY_START = """
SELECT s.starts, count(*),
       json_agg(json_build_object('id', s.id, 'meta', s.meta, 'note', s.note, 'at', s.created) ORDER BY s.id),
       json_agg(s.meta ORDER BY s.id) FILTER (WHERE s.id > 1) AS metas,
       jsonb_build_object('first', min(s.id), 'day', max(s.day), 'start', s.starts)
FROM Shifts s GROUP BY s.starts
"""
# A join on time columns; unaliased names extract, tags, upper.
BY_SHIFT = """
SELECT S.ID, st.name AS store_name, extract(dow FROM s.day), s.tags[5], upper(st.name), st.opens::text
FROM SHIFTS s JOIN Stores st ON st.opens = s.starts
"""


def test_time_json_and_names_end_to_end(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    spec = build_spec(
        {
            "name": "values",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": pg_db, "tables": ["public.stores", "public.shifts"]}},
            "outputs": {
                "by_start": {"key": ["starts"], "sql": BY_START},
                "by_shift": {"key": ["id", "store_name"], "sql": BY_SHIFT},
            },
        },
        tmp_path,
        "values spec",
    )
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def check(label: str) -> dict[str, list[dict[str, Any]]]:
        got_all = {}
        for name, sql in (("by_start", BY_START), ("by_shift", BY_SHIFT)):
            got = DeltaRsStore().read(spec.outputs[name].path).to_pylist()
            expected = query(pg_db, sql)
            names = list(expected[0]) if expected else []
            assert sorted(got[0]) == sorted(names), f"{label} {name}: column names differ from PostgreSQL's"
            # Exact: JSON and time as PostgreSQL's text, numbers as they are.
            exact = sorted(map(repr, (dict(sorted(r.items())) for r in expected)))
            mine = sorted(map(repr, (dict(sorted(r.items())) for r in _typed(got, expected))))
            assert mine == exact, f"{label} {name}:\n{mine}\n{exact}"
            assert not (diff := compare_rows(got, expected, names)), diff.describe()
            got_all[name] = got
        return got_all

    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            first = check("snapshot")
            assert {r["starts"] for r in first["by_start"]} == {"09:00:00", "10:30:00.5", "24:00:00"}
            assert {r["id"]: r["tags"] for r in first["by_shift"]} == {1: 5, 2: None, 3: None, 4: None}
            xids = {
                commit(
                    pg_db,
                    "INSERT INTO shifts VALUES (5, 'b', '10:30:00.50', '{\"z\": {\"é\": \"\\\\u0001\"}}', "
                    "'[1,2]', '{9,8,7,6,5,4}', '2026-02-01', '2026-02-01 08:00:00.5')",
                ),
                commit(pg_db, "UPDATE shifts SET starts = '24:00:00', meta = '[]' WHERE id = 1"),
                commit(
                    pg_db,
                    "DELETE FROM shifts WHERE id = 4",
                    "UPDATE stores SET opens = '09:00' WHERE code = 'b'",
                ),
                commit(pg_db, 'UPDATE shifts SET note = \'{"k" : "v"}\', created = NULL WHERE id = 2'),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            last = check("after changes")
            # The deleted row and the moved time key left no ghost rows.
            assert sorted(r["starts"] for r in last["by_start"]) == ["09:00:00", "10:30:00.5", "24:00:00"]
            assert 4 not in {r["id"] for r in last["by_shift"]}
        finally:
            pipeline.close()


def _typed(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output rows with numbers in PostgreSQL's Python types (Delta's int64 for count's bigint
    is an int either way; extract's numeric comes back as Decimal from both)."""
    if not expected:
        return got
    kinds = {k: type(v) for r in expected for k, v in r.items() if v is not None}
    return [{k: (kinds[k](v) if v is not None and k in kinds else v) for k, v in r.items()} for r in got]
