"""PostgreSQL fixtures: one embedded server per test session, a database per test."""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from txjoin.pg.embedded import EmbeddedPostgres
from txjoin.pg.names import quote_ident


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    # Under /tmp, not pytest's tmp_path: when tests run as root the server runs
    # as an unprivileged user, who cannot enter pytest's 0700 base directory.
    base = Path(tempfile.mkdtemp(prefix="txjoin-test-pg-"))
    base.chmod(0o755)
    server = EmbeddedPostgres(base / "data", fsync=False)
    server.start(stop_with_parent=True)
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def _db_name(nodeid: str) -> str:
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9_]+", "_", nodeid.split("::")[-1].lower())[:40]
    return f"t_{stem}_{digest}"


def drop_database(server: EmbeddedPostgres, name: str) -> None:
    """Drop ``name`` and any replication slot on it."""
    conn = psycopg2.connect(server.dsn())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL",
                (name,),
            )
            # A terminated walsender releases its slot asynchronously.
            for _ in range(50):
                cur.execute(
                    "SELECT slot_name, active FROM pg_replication_slots WHERE database = %s",
                    (name,),
                )
                rows = cur.fetchall()
                if not any(active for _, active in rows):
                    break
                import time

                time.sleep(0.1)
            for slot, _ in rows:
                with contextlib.suppress(psycopg2.Error):
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
    finally:
        conn.close()


@pytest.fixture
def pg_db(pg_server: EmbeddedPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a fresh, empty database for this test."""
    name = _db_name(request.node.nodeid)
    drop_database(pg_server, name)
    dsn = pg_server.create_database(name)
    try:
        yield dsn
    finally:
        drop_database(pg_server, name)
