"""Connections to a source: capture's session settings, and DSNs shown
without their password.

Every connection txjoin opens to a source goes through :func:`connect`, so
text output of dates, timestamps, floats and bytea is the same on the
snapshot connection and the walsender, whatever the server's defaults. DSNs
reach messages only through :func:`describe_dsn`.
"""

from __future__ import annotations

from typing import Any

import psycopg2
import psycopg2.extensions

from txjoin.errors import SourceError, SourceUnavailable

__all__ = ["SESSION_SETTINGS", "connect", "describe_dsn", "exact_text", "session_options"]

#: Session settings for every connection capture opens, so text output of
#: dates, timestamps, floats and bytea is the same on the snapshot connection
#: and the walsender, whatever the server's defaults.
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}


def session_options() -> str:
    """The libpq ``options`` value that applies :data:`SESSION_SETTINGS`."""
    return " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())


def describe_dsn(dsn: str) -> str:
    """``user@host:port/dbname`` for messages; never includes the password."""
    try:
        p = psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return "(unparsable DSN)"
    host = p.get("host") or p.get("hostaddr") or "localhost"
    port = p.get("port") or "5432"
    user = p.get("user") or "(default user)"
    db = p.get("dbname") or user
    return f"{user}@{host}:{port}/{db}"


#: json, jsonb and time read as the text PostgreSQL prints (psycopg2 would parse
#: them, and has no 24:00:00): outputs hold that text and compare byte for byte.
_TEXT = psycopg2.extensions.new_type((114, 3802, 1083), "TXJOIN_TEXT", lambda v, _cur: v)
_ARRAY_TEXT = psycopg2.extensions.new_array_type((199, 3807, 1183), "TXJOIN_TEXT_ARRAY", _TEXT)


def exact_text(conn: Any) -> Any:
    """``conn``, reading json, jsonb and time values as PostgreSQL's text."""
    psycopg2.extensions.register_type(_TEXT, conn)
    psycopg2.extensions.register_type(_ARRAY_TEXT, conn)
    return conn


def connect(dsn: str, *, replication: bool = False) -> Any:
    """Connect with capture's session settings; errors never show the password."""
    from psycopg2.extras import LogicalReplicationConnection

    where = describe_dsn(dsn)
    kwargs: dict[str, Any] = {"options": session_options()}
    if replication:
        kwargs["connection_factory"] = LogicalReplicationConnection
    try:
        return exact_text(psycopg2.connect(dsn, **kwargs))
    except psycopg2.OperationalError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "replication" in msg and ("permission" in msg or "must be superuser" in msg):
            raise SourceError(
                f"{where} refused a replication connection: {msg}. Grant the role "
                "REPLICATION and allow it in pg_hba.conf ('host replication ...' is not needed "
                "for logical replication, but the database line must match)",
            ) from None
        raise SourceUnavailable(f"cannot connect to {where}: {msg}") from None
