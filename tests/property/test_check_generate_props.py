"""``txjoin check``'s generated statements fit the schema they were made for.

Rows and transactions drawn by :mod:`txjoin.check.generate` for a schema with
a deferrable key, a second UNIQUE column, an exclusion constraint, a
composite key and cascading foreign keys run one after another on a real
PostgreSQL database: no statement may fail except on a constraint (SQLSTATE
class 23), and most must change a row, or the examples check little.
"""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.capture import execute
from tests.support.profiles import examples
from txjoin.check.generate import initial_rows, workloads
from txjoin.check.harness import Statement
from txjoin.pg.catalog import describe_source
from txjoin.pg.names import QualifiedName

pytestmark = [pytest.mark.postgres]

SCHEMA = """
CREATE TABLE kinds (id int PRIMARY KEY, label text);
CREATE TABLE notes (id int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, body text);
CREATE TABLE users (id int PRIMARY KEY, email text UNIQUE, name text NOT NULL);
CREATE TABLE slots (id int PRIMARY KEY, during int4range, EXCLUDE USING gist (during WITH &&));
CREATE TABLE items (
  id int PRIMARY KEY, kind int REFERENCES kinds(id) ON DELETE CASCADE,
  owner int NOT NULL REFERENCES users(id) ON DELETE CASCADE, qty int CHECK (qty > 0)
);
CREATE TABLE tags (item int REFERENCES items(id) ON DELETE CASCADE, tag text, PRIMARY KEY (item, tag));
"""
TABLES = ["kinds", "notes", "users", "slots", "items", "tags"]


def test_generated_statements_fail_only_on_constraints(pg_db: str) -> None:
    execute(pg_db, SCHEMA)
    tables = list(describe_source(pg_db, "s", [QualifiedName("public", t) for t in TABLES]).values())
    counts = {"statements": 0, "changed": 0}

    @settings(max_examples=examples(ci=15, thorough=150), deadline=None, database=None)
    @given(data=st.data())
    def run(data: Any) -> None:
        rows = data.draw(initial_rows(tables, {}))
        work = data.draw(workloads(tables, {}, max_transactions=12))
        conn = psycopg2.connect(pg_db)
        try:
            with conn.cursor() as cur:
                cur.execute("TRUNCATE " + ", ".join(TABLES) + " CASCADE")
                for stmt in rows:
                    cur.execute("SAVEPOINT s")
                    try:
                        cur.execute(stmt.sql, stmt.args)
                    except psycopg2.Error as e:
                        _constraint_only(e, stmt)
                        cur.execute("ROLLBACK TO SAVEPOINT s")
            conn.commit()
            for tx in work.transactions:
                with conn.cursor() as cur:
                    for stmt in tx.statements:
                        try:
                            cur.execute(stmt.sql, stmt.args)
                        except psycopg2.Error as e:
                            _constraint_only(e, stmt)
                            break
                        counts["statements"] += 1
                        counts["changed"] += cur.rowcount > 0
                conn.rollback() if tx.rollback else conn.commit()
        finally:
            conn.rollback()
            conn.close()

    run()
    print(counts)
    assert counts["changed"] >= 0.5 * counts["statements"], counts


def _constraint_only(e: psycopg2.Error, stmt: Statement) -> None:
    if not (e.pgcode or "").startswith("23"):
        raise AssertionError(f"{stmt.sql} {stmt.args}: {e.pgcode} {e}") from e
