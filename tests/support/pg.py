"""PostgreSQL fixtures: one embedded server per test session, a database per test."""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from txjoin.pg import admin
from txjoin.pg.embedded import EmbeddedPostgres


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
    admin.drop_database(server.dsn(), name)


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


def en_us_database(server: EmbeddedPostgres, name: str, *, timezone: str = "") -> str:
    """A fresh database ``name`` with the ICU collation en-US (and ``timezone``); its DSN."""
    import psycopg2

    admin.drop_database(server.dsn(), name)
    conn = psycopg2.connect(server.dsn())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name} LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0")
            if timezone:
                cur.execute(f"ALTER DATABASE {name} SET timezone TO %s", (timezone,))
    finally:
        conn.close()
    return server.dsn(name)
