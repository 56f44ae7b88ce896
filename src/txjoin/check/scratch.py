"""Scratch databases that decide semantics like the source.

``txjoin check`` runs its workloads on empty copies of the sources, never on
the sources. A copy must compare, sort and convert as its source does, or the
suite proves the wrong thing (a C-locale copy hides every collation bug). So
the copy is made from the source itself:

- the database's collation and ctype (ICU locale or libc), and encoding;
- the source's TimeZone (its database/role/server default, not a session's);
- the schema from ``pg_dump --schema-only`` of the captured tables' schemas:
  enum and domain types, partitioned tables and their partitions, CHECK,
  UNIQUE and foreign-key constraints with their cascades, replica identity,
  triggers, defaults. Foreign keys to tables the spec does not capture are
  dropped (the copy leaves those tables empty).

Where ``pg_dump`` cannot run (not installed, older than the server), the copy
falls back to DDL built from the catalog (:func:`txjoin.check.generate.scratch_ddl`)
and says so: enums, domains and partitioning are then missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg2
import psycopg2.extensions

from txjoin.errors import SourceError, TxJoinError
from txjoin.pg.catalog import Table
from txjoin.pg.connect import describe_dsn
from txjoin.pg.names import quote_ident

__all__ = ["ScratchSetup", "create_scratch", "read_setup"]


@dataclass(frozen=True)
class ScratchSetup:
    """What a scratch copy of one source needs."""

    #: 'icu' or 'libc'.
    provider: str = "libc"
    icu_locale: str = ""
    collate: str = "C"
    ctype: str = "C"
    timezone: str = "UTC"
    #: SQL creating the captured tables and everything they depend on.
    ddl: str = ""
    #: 'pg_dump' or 'catalog' (a fallback with less fidelity).
    ddl_origin: str = "catalog"
    note: str = ""

    def describe(self) -> str:
        locale = f"ICU {self.icu_locale}" if self.provider == "icu" else f"libc {self.collate}"
        return f"collation {locale}, TimeZone {self.timezone}, schema from {self.ddl_origin}"


_LOCALE_SQL = """
SELECT to_jsonb(d) ->> 'datlocprovider',
       coalesce(to_jsonb(d) ->> 'daticulocale', to_jsonb(d) ->> 'datlocale'),
       d.datcollate, d.datctype, current_setting('TimeZone')
FROM pg_database d WHERE d.datname = current_database()
"""


def read_setup(dsn: str, tables: Sequence[Table], fallback_ddl: str) -> ScratchSetup:
    """The source's locale, TimeZone and schema, for a scratch copy."""
    conn = psycopg2.connect(dsn)  # no session settings: the source's own TimeZone
    try:
        with conn.cursor() as cur:
            cur.execute(_LOCALE_SQL)
            row = cur.fetchone()
            assert row is not None
            provider, icu, collate, ctype, tz = row
        conn.rollback()
    finally:
        conn.close()
    ddl, origin, note = _dumped_schema(dsn, tables)
    if ddl is None:
        ddl, origin = fallback_ddl, "catalog"
    return ScratchSetup(
        "icu" if provider == "i" else "libc", icu or "", collate, ctype, tz, ddl, origin, note
    )


def _pg_dump() -> str | None:
    try:
        from txjoin.pg.embedded import find_bindir

        path = find_bindir() / "pg_dump"
        if path.is_file():
            return str(path)
    except TxJoinError:
        pass  # no server binaries here: look on PATH
    return shutil.which("pg_dump")


def _dumped_schema(dsn: str, tables: Sequence[Table]) -> tuple[str | None, str, str]:
    binary = _pg_dump()
    if binary is None:
        return None, "catalog", "pg_dump not found: enums, domains and partitioning are not copied"
    params = psycopg2.extensions.parse_dsn(dsn)
    env = dict(os.environ)
    if "password" in params:
        env["PGPASSWORD"] = params.pop("password")  # not on the command line, where ps shows it
    schemas = sorted({t.name.schema for t in tables})
    cmd = [
        binary, "--schema-only", "--no-owner", "--no-privileges", "--no-publications",
        "--no-subscriptions", "--no-comments", "--no-security-labels", "--no-tablespaces",
        *(f"--schema={quote_ident(s)}" for s in schemas),
        "--dbname", psycopg2.extensions.make_dsn(**params),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return None, "catalog", f"pg_dump of {describe_dsn(dsn)} failed ({why}): schema from the catalog"
    # psql meta-commands (\\restrict in newer dumps) are not SQL.
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("\\")]
    # A fresh database has schema public already.
    create = re.compile(r"^CREATE SCHEMA (?!IF NOT EXISTS)")
    sql = "\n".join(create.sub("CREATE SCHEMA IF NOT EXISTS ", x) for x in lines)
    captured = {t.name for t in tables}
    drops = [
        f"ALTER TABLE {t.name.quoted} DROP CONSTRAINT {quote_ident(fk.name)};"
        for t in tables
        for fk in t.foreign_keys
        if fk.table not in captured and fk.name
    ]
    return sql + "\n" + "\n".join(drops), "pg_dump", ""


def create_scratch(admin_dsn: str, name: str, setup: ScratchSetup) -> str:
    """Create database ``name`` on ``admin_dsn``'s server as ``setup`` says; its DSN."""
    conn = psycopg2.connect(admin_dsn)
    conn.autocommit = True
    q = quote_ident(name)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {q} WITH (FORCE)")
            locale = ["TEMPLATE template0", "ENCODING 'UTF8'"]
            if setup.provider == "icu":
                locale += ["LOCALE_PROVIDER icu", "ICU_LOCALE %(icu)s", "LC_COLLATE 'C'", "LC_CTYPE 'C'"]
            else:
                locale += ["LOCALE_PROVIDER libc", "LC_COLLATE %(collate)s", "LC_CTYPE %(ctype)s"]
            try:
                cur.execute(
                    f"CREATE DATABASE {q} {' '.join(locale)}",
                    {"icu": setup.icu_locale, "collate": setup.collate, "ctype": setup.ctype},
                )
            except psycopg2.Error as e:
                raise SourceError(
                    f"could not create the scratch database {name} with the source's locale "
                    f"({setup.describe()}) on {describe_dsn(admin_dsn)}: {str(e).strip()}. The scratch "
                    "server needs the same locale (install it, or use an ICU database at the source)"
                ) from None
            cur.execute(f"ALTER DATABASE {q} SET timezone TO %s", (setup.timezone,))
    finally:
        conn.close()
    dsn = str(psycopg2.extensions.make_dsn(admin_dsn, dbname=name))
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(setup.ddl)
            cur.execute("SELECT pg_catalog.set_config('search_path', 'public', false)")
        conn.commit()
    except psycopg2.Error as e:
        raise SourceError(
            f"could not create the source's schema ({setup.ddl_origin}) in the scratch database "
            f"{name}: {str(e).strip()}"
        ) from None
    finally:
        conn.close()
    return dsn
