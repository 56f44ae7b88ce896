"""PostgreSQL's answer end to end for outputs keyed by double precision.

PostgreSQL's ``=`` takes two NaNs for one key, and -0.0 for 0.0; 'Infinity'
and '-Infinity' are keys like any other. The output is keyed by such a
column, and its rows are replaced as the source's change, so each batch's
overwrite names NaN, infinities and zeros (bench/NOTES.md, "Fixed: NaN and
infinite float keys"). Compared with the same SQL on PostgreSQL after the
snapshot and after streamed changes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE marks (x float8 PRIMARY KEY, label text);
CREATE TABLE hits (id int PRIMARY KEY, x float8, n int);
INSERT INTO marks VALUES ('NaN', 'nan'), ('Infinity', 'inf'), ('-Infinity', '-inf'), ('-0', 'zero'),
  (1.5, 'one and a half'), (-2, 'minus two');
INSERT INTO hits VALUES (1, 'NaN', 1), (2, 'NaN', 2), (3, 0, 3), (4, '-Infinity', 4), (5, -2, 5), (6, 7, 6);
"""

BY_MARK = """
SELECT m.x, m.label, count(h.id) AS hits, sum(h.n) AS total
FROM marks m LEFT JOIN hits h ON h.x = m.x
GROUP BY m.x, m.label
"""


def _canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples: NaN as a string (NaN != NaN), -0.0 as 0.0 (one key to PostgreSQL)."""

    def value(v: Any) -> Any:
        if isinstance(v, float):
            return "NaN" if math.isnan(v) else v + 0.0
        return int(v) if v is not None and not isinstance(v, str) else v

    return sorted((tuple(value(r[c]) for c in ("x", "label", "hits", "total")) for r in rows), key=repr)


def test_nan_infinities_and_zeros_as_keys_end_to_end(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    spec = build_spec(
        {
            "name": "floats",
            "state_dir": str(tmp_path / "state"),
            "sources": {"s": {"dsn": pg_db, "tables": ["public.marks", "public.hits"]}},
            "outputs": {"by_mark": {"key": ["x"], "sql": BY_MARK}},
        },
        tmp_path,
        "float keys spec",
    )
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)

    def check(label: str) -> list[tuple[Any, ...]]:
        got = _canonical(DeltaRsStore().read(spec.outputs["by_mark"].path).to_pylist())
        expected = _canonical(query(pg_db, BY_MARK))
        assert got == expected, f"{label}:\n{got}\n{expected}"
        return got

    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            first = check("snapshot")
            assert ("NaN", "nan", 2, 3) in first
            assert (0.0, "zero", 1, 3) in first
            xids = {
                commit(pg_db, "UPDATE marks SET label = 'not a number' WHERE x = 'NaN'"),
                commit(pg_db, "INSERT INTO hits VALUES (7, 'NaN', 10), (8, '-0', 20)"),
                commit(pg_db, "DELETE FROM marks WHERE x = 'Infinity'", "UPDATE hits SET x = 1.5 WHERE id = 4"),
                commit(pg_db, "UPDATE marks SET label = 'plus zero' WHERE x = 0"),
                commit(pg_db, "INSERT INTO marks VALUES ('Infinity', 'back')"),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            last = check("after changes")
            # One NaN row and one zero row, each replaced in place, never beside its old version.
            assert [r for r in last if r[0] == "NaN"] == [("NaN", "not a number", 3, 13)]
            assert [r for r in last if r[0] == 0.0] == [(0.0, "plus zero", 2, 23)]
        finally:
            pipeline.close()
