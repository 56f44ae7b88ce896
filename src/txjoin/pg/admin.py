"""Checks and set-up on a source PostgreSQL: wal_level, privileges, tables,
REPLICA IDENTITY, the publication and the replication slot.

Every check fails with a :class:`~txjoin.errors.SourceError` (or
:class:`~txjoin.errors.ConfigError`) that names the server, the object and the
statement that fixes it. Nothing here ever prints a password: DSNs are shown
through :func:`txjoin.pg.connect.describe_dsn`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions

from txjoin.errors import ConfigError, SlotInUse, SourceError
from txjoin.faults import mutated
from txjoin.pg.catalog import Table, describe
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import (
    QualifiedName,
    quote_ident,
    validate_publication_name,
    validate_slot_name,
)

__all__ = [
    "SlotInfo",
    "check_replication_privilege",
    "check_slot_usable",
    "check_tables",
    "check_wal_level",
    "drop_database",
    "drop_slot",
    "ensure_publication",
    "fresh_database",
    "list_slots",
    "set_replica_identity_full",
    "slot_info",
]

log = logging.getLogger(__name__)


def _one(conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    return None if row is None else row[0]


def check_wal_level(conn: Any, where: str) -> None:
    level = _one(conn, "SHOW wal_level")
    if level != "logical":
        raise SourceError(
            f"wal_level is {level!r} on {where}; logical replication needs 'logical'. "
            "Run ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL "
            "(on managed services, enable logical replication in the instance settings)",
            wal_level=level,
        )


def check_replication_privilege(conn: Any, where: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
    if row is None:  # pragma: no cover - current_user always has a pg_roles row
        raise SourceError(f"cannot read the current role on {where}")
    role, replication, superuser = row
    if not (replication or superuser):
        raise SourceError(
            f"role {role!r} on {where} has no REPLICATION privilege, which logical replication "
            f"needs. Grant it: ALTER ROLE {quote_ident(role)} WITH REPLICATION;",
            role=role,
        )


def check_tables(conn: Any, tables: Iterable[QualifiedName], where: str) -> list[Table]:
    """Describe ``tables``; refuse missing ones, non-tables, ones without a
    primary key (:func:`txjoin.pg.catalog.describe`) and REPLICA IDENTITY NOTHING."""
    described = describe(conn, tables, where=where)
    for t in described.values():
        if t.replica_identity == "n":
            raise SourceError(
                f"table {t.name} on {where} has REPLICA IDENTITY NOTHING: its updates and deletes "
                f"carry no key, so they cannot be applied. Run ALTER TABLE {t.name.quoted} "
                "REPLICA IDENTITY DEFAULT; (or FULL)",
                table=str(t.name),
            )
        if t.replica_identity == "i":
            _check_identity_index(conn, t, where)
        _check_inheritance(conn, t, where)
        if t.replica_identity != "f":
            log.info(
                "table %s has REPLICA IDENTITY %s: update and delete events carry only the key "
                "in 'before', and unchanged TOASTed values arrive as placeholders. txjoin fills "
                "both from its replicas; Debezium consumers such as Flink need FULL "
                "(txjoin capture --replica-identity-full sets it).",
                t.name,
                {"d": "DEFAULT", "i": "USING INDEX"}.get(t.replica_identity, t.replica_identity),
            )
    return list(described.values())


def _check_identity_index(conn: Any, t: Table, where: str) -> None:
    """REPLICA IDENTITY USING INDEX keys events by that index: only the primary key's will do."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisreplident",
            (t.oid,),
        )
        cols = {r[0] for r in cur.fetchall()}
    if cols != set(t.primary_key):
        raise SourceError(
            f"table {t.name} on {where} has REPLICA IDENTITY USING INDEX on ({', '.join(sorted(cols))}), "
            f"not its primary key ({', '.join(t.primary_key)}): its update and delete events name rows by "
            "that index, while txjoin keys rows by the primary key, so an update would leave the old row "
            f"behind. Run ALTER TABLE {t.name.quoted} REPLICA IDENTITY FULL; (or DEFAULT)",
            table=str(t.name),
        )


def _check_inheritance(conn: Any, t: Table, where: str) -> None:
    """Inheritance children (not partitions) are separate tables in the change stream."""
    if t.kind != "r":
        return
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s ORDER BY 1",
            (t.oid,),
        )
        children = [r[0] for r in cur.fetchall()]
    if children:
        raise SourceError(
            f"table {t.name} on {where} has inheritance children ({', '.join(children[:5])}): a query "
            "on it reads their rows too, but their changes arrive as changes of the child tables, "
            "which txjoin does not merge back. Capture the children as tables of their own and "
            "query them explicitly, or turn the hierarchy into a partitioned table",
            table=str(t.name),
        )


def set_replica_identity_full(conn: Any, tables: Iterable[QualifiedName]) -> None:
    """ALTER TABLE ... REPLICA IDENTITY FULL (needs table ownership)."""
    with conn.cursor() as cur:
        for t in tables:
            cur.execute(f"ALTER TABLE {t.quoted} REPLICA IDENTITY FULL")
    conn.commit()


def ensure_publication(conn: Any, name: str, tables: Sequence[QualifiedName], where: str) -> None:
    """Create the publication for ``tables`` or check that it covers them."""
    validate_publication_name(name)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables, pubviaroot "
            "FROM pg_publication WHERE pubname = %s",
            (name,),
        )
        row = cur.fetchone()
        if row is None:
            # Via the partition root: changes of a partitioned table arrive under its own
            # name, as its snapshot does, not under its leaves' names.
            table_list = ", ".join(t.quoted for t in tables)
            via_root = "false" if mutated("partition-leaves") else "true"
            cur.execute(
                f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {table_list} "
                f"WITH (publish_via_partition_root = {via_root})"
            )
            conn.commit()
            log.info("created publication %s on %s for %d tables", name, where, len(tables))
            return
        ins, upd, dele, trunc, alltables, viaroot = row
        _check_publication_rows(cur, name, tables, where, viaroot)
        missing_ops = [
            op
            for op, on in (("insert", ins), ("update", upd), ("delete", dele), ("truncate", trunc))
            if not on
        ]
        if missing_ops:
            raise SourceError(
                f"publication {name!r} on {where} does not publish {', '.join(missing_ops)}: "
                f"ALTER PUBLICATION {quote_ident(name)} SET (publish = 'insert, update, delete, truncate');",
                publication=name,
            )
        if alltables:
            return
        cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
        published = {QualifiedName(s, t) for s, t in cur.fetchall()}
    conn.rollback()
    missing = [t for t in tables if t not in published]
    if missing:
        names = ", ".join(str(t) for t in missing)
        raise SourceError(
            f"table(s) {names} not published by publication {name!r} on {where}: "
            f"ALTER PUBLICATION {quote_ident(name)} ADD TABLE {', '.join(t.quoted for t in missing)};",
            publication=name,
            tables=[str(t) for t in missing],
        )


def _check_publication_rows(
    cur: Any, name: str, tables: Sequence[QualifiedName], where: str, viaroot: bool
) -> None:
    """An existing publication must publish every row and column, partitions via their root."""
    cur.execute(
        "SELECT n.nspname, c.relname, c.relkind, r.prqual IS NOT NULL, r.prattrs IS NOT NULL "
        "FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid "
        "JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE p.pubname = %s",
        (name,),
    )
    wanted = set(tables)
    for schema, table, _kind, filtered, column_list in cur.fetchall():
        t = QualifiedName(schema, table)
        if t not in wanted:
            continue
        if filtered or column_list:
            what = "a row filter (WHERE)" if filtered else "a column list"
            raise SourceError(
                f"publication {name!r} on {where} publishes {t} with {what}, while txjoin's snapshot "
                "reads every row and column: outputs would mix filtered changes with unfiltered rows. "
                f"Publish the whole table: ALTER PUBLICATION {quote_ident(name)} SET TABLE ... with "
                f"{t.quoted} listed without WHERE or columns, or let txjoin create its own publication",
                publication=name,
                table=str(t),
            )
    if viaroot:
        return
    cur.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'p'"
    )
    for schema, table in cur.fetchall():
        t = QualifiedName(schema, table)
        if t in wanted:
            raise SourceError(
                f"publication {name!r} on {where} publishes the partitioned table {t} through its "
                "partitions, whose changes txjoin would not match to the table: "
                f"ALTER PUBLICATION {quote_ident(name)} SET (publish_via_partition_root = true);",
                publication=name,
                table=str(t),
            )


@dataclass(frozen=True)
class SlotInfo:
    name: str
    plugin: str | None
    database: str | None
    active: bool
    active_pid: int | None
    restart_lsn: str | None
    confirmed_flush_lsn: str | None
    retained_wal_bytes: int | None
    wal_status: str | None


_SLOT_SQL = """
SELECT slot_name, plugin, database, active, active_pid, restart_lsn::text,
       confirmed_flush_lsn::text,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status
FROM pg_replication_slots
"""


def list_slots(conn: Any) -> list[SlotInfo]:
    with conn.cursor() as cur:
        cur.execute(_SLOT_SQL + " ORDER BY slot_name")
        return [SlotInfo(*r) for r in cur.fetchall()]


def slot_info(conn: Any, name: str) -> SlotInfo | None:
    validate_slot_name(name)
    with conn.cursor() as cur:
        cur.execute(_SLOT_SQL + " WHERE slot_name = %s", (name,))
        row = cur.fetchone()
    return None if row is None else SlotInfo(*row)


def check_slot_usable(info: SlotInfo, database: str, where: str) -> None:
    if info.plugin != "pgoutput":
        raise ConfigError(
            f"replication slot {info.name!r} on {where} uses plugin {info.plugin!r}, not pgoutput: "
            "choose another slot name, or drop it with txjoin slots drop",
            slot=info.name,
        )
    if info.database != database:
        raise ConfigError(
            f"replication slot {info.name!r} on {where} belongs to database {info.database!r}, "
            f"not {database!r}: choose another slot name",
            slot=info.name,
        )
    if info.active:
        raise SlotInUse(
            f"replication slot {info.name!r} on {where} is active for PID {info.active_pid}: "
            "a slot serves one reader at a time. Stop that process (SELECT "
            f"pg_terminate_backend({info.active_pid});) or give this source another slot",
            slot=info.name,
            pid=info.active_pid,
        )


def drop_slot(conn: Any, name: str, where: str) -> None:
    info = slot_info(conn, name)
    if info is None:
        raise ConfigError(f"replication slot {name!r} does not exist on {where}", slot=name)
    if info.active:
        raise SlotInUse(
            f"replication slot {name!r} on {where} is active for PID {info.active_pid}: stop "
            "its reader before dropping it",
            slot=name,
            pid=info.active_pid,
        )
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (name,))
    conn.commit()


# -- scratch databases (txjoin check, scenarios, tests) ----------------------------------


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, with its replication slots (their readers are stopped)."""
    conn = connect(admin_dsn)
    conn.autocommit = True
    where = describe_dsn(admin_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL",
                (name,),
            )
            # A terminated walsender releases its slot asynchronously.
            rows: list[tuple[str, bool]] = []
            for _ in range(50):
                cur.execute("SELECT slot_name, active FROM pg_replication_slots WHERE database = %s", (name,))
                rows = cur.fetchall()
                if not any(active for _, active in rows):
                    break
                time.sleep(0.1)
            for slot, _ in rows:
                with contextlib.suppress(psycopg2.Error):
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
    except psycopg2.Error as e:
        raise SourceError(f"could not drop database {name} on {where}: {str(e).strip()}") from None
    finally:
        conn.close()


def fresh_database(admin_dsn: str, name: str) -> str:
    """An empty database ``name`` on ``admin_dsn``'s server (dropped first if it exists); its DSN."""
    drop_database(admin_dsn, name)
    conn = connect(admin_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {quote_ident(name)}")
    except psycopg2.Error as e:
        raise SourceError(
            f"could not create database {name} on {describe_dsn(admin_dsn)}: {str(e).strip()}. The role "
            "needs CREATEDB, and REPLICATION to capture from it (see docker-compose.yml)"
        ) from None
    finally:
        conn.close()
    return str(psycopg2.extensions.make_dsn(admin_dsn, dbname=name))
