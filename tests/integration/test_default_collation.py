"""Text that no text column feeds (casts to text, string constants, ``->>``) orders under the
database's default collation in PostgreSQL. Under an en-US database its order is not Spark's
byte order, so ordering it is refused; under a C database it is accepted and gives
PostgreSQL's answer end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from tests.support.pg import en_us_database
from txjoin.errors import UnsupportedQuery
from txjoin.join.planned import plan_outputs
from txjoin.pg import admin
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import build_spec
from txjoin.verify.compare import compare_rows

pytestmark = [pytest.mark.postgres]

SCHEMA = """
CREATE TYPE mood AS ENUM ('Open', 'closed', 'ÉTÉ');
CREATE TABLE t (id int PRIMARY KEY, g int, e mood, n int, jb jsonb, tc text COLLATE "C");
INSERT INTO t VALUES (1, 1, 'Open', 5, '{"k": "Zebra"}', 'B'), (2, 1, 'closed', -3, '{"k": "apple"}', 'a'),
                     (3, 2, 'closed', 10, '{"k": "b"}', 'b');
"""

#: Each orders text computed from no text column (PostgreSQL: the database's default collation).
DEFAULT_ORDERED = {
    "enum_cast": "SELECT g, max(e::text) AS m FROM t GROUP BY g",
    "member": "SELECT g, min(jb ->> 'k') AS m FROM t GROUP BY g",
    "constants": "SELECT g, min(CASE WHEN n > 0 THEN 'a' ELSE 'B' END) AS m FROM t GROUP BY g",
    "concat": "SELECT id, e::text || '!' AS m FROM t WHERE e::text || '!' > 'a'",
}
#: lower/upper of such text map case as the default collation does: Unicode's mapping under
#: en-US (Spark's LOWER), ASCII letters only under C.
CASE_MAPPING = "SELECT id, lower(e::text) AS m FROM t"
#: A C-collated column, or COLLATE "C", decides the order instead: accepted everywhere.
C_ORDERED = {
    "column_beats_constant": "SELECT id, tc AS m FROM t WHERE tc > 'B'",
    "explicit": "SELECT g, max(e::text COLLATE \"C\") AS m FROM t GROUP BY g",
}


def _spec(dsn: str, tmp_path: Path, outputs: dict[str, str]) -> Any:
    raw = {
        "name": "coll",
        "state_dir": str(tmp_path / "state"),
        "sources": {"s": {"dsn": dsn, "tables": ["public.t"]}},
        "outputs": {
            name: {"key": ["id" if sql.startswith("SELECT id") else "g"], "sql": sql}
            for name, sql in outputs.items()
        },
    }
    return build_spec(raw, tmp_path, "collation spec")


def test_text_of_the_default_collation_is_not_ordered_by_bytes_under_en_us(
    pg_server: Any, tmp_path: Path
) -> None:
    name = "default_collation_icu"
    dsn = en_us_database(pg_server, name)
    try:
        execute(dsn, SCHEMA)
        # What Spark's byte order would have published: PostgreSQL orders 'closed' before 'Open'.
        assert query(dsn, DEFAULT_ORDERED["enum_cast"] + " ORDER BY g") == [
            {"g": 1, "m": "Open"},
            {"g": 2, "m": "closed"},
        ]
        assert max(["Open", "closed"]) == "closed"
        for output, sql in DEFAULT_ORDERED.items():
            with pytest.raises(UnsupportedQuery) as refused:
                plan_outputs(_spec(dsn, tmp_path, {output: sql}))
            message = str(refused.value)
            assert "ordering text under the collation 'en-US'" in message, message
            assert 'COLLATE "C"' in message
        planned = plan_outputs(_spec(dsn, tmp_path, {**C_ORDERED, "case_mapping": CASE_MAPPING}))
        assert set(planned.plans) == {*C_ORDERED, "case_mapping"}
        assert query(dsn, "SELECT lower('ÉTÉ'::mood::text) AS m") == [{"m": "été"}]
        assert "LOWER(CAST(" in planned.plans["case_mapping"].spark_sql  # not A-Z only
    finally:
        admin.drop_database(pg_server.dsn(), name)


@pytest.mark.spark
def test_text_of_the_default_collation_under_c_gives_postgresqls_answer(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    """The test server's databases are created under C (initdb --locale=C)."""
    assert query(pg_db, "SELECT datcollate FROM pg_database WHERE datname = current_database()") == [
        {"datcollate": "C"}
    ]
    execute(pg_db, SCHEMA)
    outputs = {**DEFAULT_ORDERED, **C_ORDERED, "case_mapping": CASE_MAPPING}
    spec = _spec(pg_db, tmp_path, outputs)
    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config) as ct:
        pipeline = Pipeline(spec, spark)
        try:
            pipeline.run_available()
            xids = {
                commit(pg_db, "INSERT INTO t VALUES (4, 2, 'ÉTÉ', 1, '{\"k\": \"Apple\"}', 'Ä')"),
                commit(pg_db, "UPDATE t SET e = 'Open', jb = '{\"k\": \"_x\"}' WHERE id = 2"),
            }
            wait_for_xids(spec.changelog, "s", xids, ct)
            pipeline.run_available()
            for output, sql in outputs.items():
                key = spec.outputs[output].key
                got = DeltaRsStore().read(spec.outputs[output].path).to_pylist()
                expected = query(pg_db, sql)
                assert expected, output
                assert not (diff := compare_rows(got, expected, (*key, "m"))), f"{output}: {diff.describe()}"
        finally:
            pipeline.close()
