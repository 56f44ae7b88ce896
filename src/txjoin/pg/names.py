"""Validation and quoting of PostgreSQL names that come from configuration.

Slot names follow PostgreSQL's own rule (``ReplicationSlotValidateName``:
lower-case letters, digits and underscores, at most 63 bytes). Publication,
schema and table names are quoted wherever they reach SQL; we still refuse
the ones that cannot be valid so the error names the setting, not a SQL
syntax error.
"""

from __future__ import annotations

import re

from txjoin.errors import ConfigError

__all__ = [
    "QualifiedName",
    "parse_table_name",
    "quote_ident",
    "quote_literal",
    "validate_publication_name",
    "validate_slot_name",
]

NAMEDATALEN = 64
_SLOT_RE = re.compile(r"^[a-z0-9_]+$")
# Plain identifiers we accept for publications: what PostgreSQL accepts
# unquoted, so users can type the same name in psql.
_PLAIN_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_$]*$")


def validate_slot_name(name: str) -> str:
    """Return ``name`` if PostgreSQL accepts it as a replication slot name."""
    if not name:
        raise ConfigError("replication slot name is empty: set a name such as 'txjoin_shop'")
    if len(name.encode()) >= NAMEDATALEN:
        raise ConfigError(
            f"replication slot name {name!r} is {len(name.encode())} bytes long: "
            f"PostgreSQL allows at most {NAMEDATALEN - 1}",
            slot=name,
        )
    if not _SLOT_RE.match(name):
        raise ConfigError(
            f"replication slot name {name!r} is invalid: PostgreSQL allows only "
            "lower-case letters, digits and underscores",
            slot=name,
        )
    return name


def validate_publication_name(name: str) -> str:
    """Return ``name`` if it is a plain identifier usable as a publication name."""
    if not name or len(name.encode()) >= NAMEDATALEN or not _PLAIN_IDENT_RE.match(name):
        raise ConfigError(
            f"publication name {name!r} is invalid: use a lower-case identifier "
            f"(letters, digits, '_', '$'; not starting with a digit; at most "
            f"{NAMEDATALEN - 1} bytes)",
            publication=name,
        )
    return name


def quote_ident(name: str) -> str:
    """Quote an identifier the way PostgreSQL's ``quote_ident`` does, always."""
    if "\x00" in name:
        raise ConfigError(f"identifier {name!r} contains a NUL byte")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """Quote a string literal (standard_conforming_strings=on, the default)."""
    if "\x00" in value:
        raise ConfigError(f"literal {value!r} contains a NUL byte")
    return "'" + value.replace("'", "''") + "'"


class QualifiedName(tuple[str, str]):
    """A ``(schema, table)`` pair; ``str()`` gives ``schema.table``."""

    __slots__ = ()

    def __new__(cls, schema: str, table: str) -> QualifiedName:
        return super().__new__(cls, (schema, table))

    def __getnewargs__(self) -> tuple[str, str]:  # pickle calls __new__ with these
        return (self[0], self[1])

    @property
    def schema(self) -> str:
        return self[0]

    @property
    def table(self) -> str:
        return self[1]

    @property
    def quoted(self) -> str:
        return f"{quote_ident(self[0])}.{quote_ident(self[1])}"

    def __str__(self) -> str:
        return f"{self[0]}.{self[1]}"

    def __repr__(self) -> str:
        return f"QualifiedName({self[0]!r}, {self[1]!r})"


def parse_table_name(text: str, default_schema: str = "public") -> QualifiedName:
    """Parse ``table`` or ``schema.table`` (names as stored, not SQL-quoted)."""
    parts = text.split(".")
    if len(parts) == 1 and parts[0]:
        return QualifiedName(default_schema, parts[0])
    if len(parts) == 2 and all(parts):
        return QualifiedName(parts[0], parts[1])
    raise ConfigError(f"table name {text!r} is invalid: write 'table' or 'schema.table'", table=text)
