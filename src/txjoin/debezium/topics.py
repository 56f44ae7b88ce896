"""Debezium's topic names for one source (``topic.prefix``).

- a table's changes: ``<prefix>.<schema>.<table>``;
- the transaction topic (BEGIN/END markers): ``<prefix>.transaction``;
- heartbeats: ``<prefix>.heartbeat`` from txjoin capture (Debezium's own
  ``__debezium-heartbeat.<prefix>`` is hidden from Spark's file source by its
  leading '_', and txjoin wants heartbeats in the stream); both are read.

The prefix has no dots, so a topic name parses back into its parts.
"""

from __future__ import annotations

import re

from txjoin.errors import ConfigError
from txjoin.pg.names import QualifiedName

__all__ = [
    "DEBEZIUM_HEARTBEAT_PREFIX",
    "HEARTBEAT_SUFFIX",
    "HEARTBEAT_TOPIC_RE",
    "TRANSACTION_SUFFIX",
    "heartbeat_topic",
    "is_heartbeat_topic",
    "table_topic",
    "transaction_topic",
    "validate_prefix",
]

#: Topics whose name ends with this hold BEGIN/END markers.
TRANSACTION_SUFFIX = ".transaction"
#: txjoin capture's heartbeat topics are ``<prefix>.heartbeat``.
HEARTBEAT_SUFFIX = ".heartbeat"
#: Those topics as a regular expression (Java's and Python's syntax alike).
HEARTBEAT_TOPIC_RE = r"^[^.]+\.heartbeat$"
#: Debezium's own heartbeat topics are ``__debezium-heartbeat.<prefix>``.
DEBEZIUM_HEARTBEAT_PREFIX = "__debezium-heartbeat."

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def validate_prefix(prefix: str) -> str:
    """A topic prefix (Debezium's ``topic.prefix``): no dots, so topics parse back."""
    if not _PREFIX_RE.match(prefix) or len(prefix) > 100:
        raise ConfigError(
            f"source name {prefix!r} is invalid as a topic prefix: use letters, digits, '_' and "
            "'-' (no dots), at most 100 characters",
            source=prefix,
        )
    return prefix


def table_topic(prefix: str, table: QualifiedName | str) -> str:
    """``table`` is a QualifiedName or its "schema.table" text."""
    return f"{prefix}.{table}"


def transaction_topic(prefix: str) -> str:
    return f"{prefix}{TRANSACTION_SUFFIX}"


def heartbeat_topic(prefix: str) -> str:
    return f"{prefix}{HEARTBEAT_SUFFIX}"


def is_heartbeat_topic(topic: str) -> bool:
    """Whether ``topic`` is a heartbeat topic: ``<prefix>.heartbeat`` exactly (a table named
    ``heartbeat`` is ``<prefix>.<schema>.heartbeat``) or Debezium's own."""
    return re.match(HEARTBEAT_TOPIC_RE, topic) is not None or topic.startswith(DEBEZIUM_HEARTBEAT_PREFIX)
