"""Exceptions raised by txjoin.

Every error txjoin raises derives from :class:`TxJoinError`; errors caused by
bad input also derive from the matching builtin so ``except ValueError`` works::

    TxJoinError
    ├── ConfigError (ValueError)          bad spec, option or name
    ├── MissingDependency                 a binary or package is not installed
    ├── SourceError                       PostgreSQL refused or is misconfigured
    │   ├── SlotInUse                     slot active for another process
    │   └── SourceUnavailable             server gone; retryable
    ├── ProtocolError (ValueError)        malformed pgoutput or Debezium input
    ├── ChangelogError                    the changelog store is damaged
    ├── AssemblyError                     transaction assembly cannot proceed
    │   ├── TransactionTooLarge           over the configured buffer limit
    │   └── IncompleteTransaction         END or events missing past the timeout
    ├── UnsupportedQuery (ValueError)     SQL that cannot be maintained incrementally
    ├── SchemaChangeError                 a source schema change breaks the join
    ├── SinkError                         a Delta table could not be written or read
    ├── SparkDied                         Spark's driver process exited (out of memory...)
    └── OutOfMemory                       txjoin's own process ran out (replicas, Python)

Messages say what went wrong, where (table, xid, LSN, offset), and how to fix
it. Errors are picklable (they cross from Spark's Python workers to the
driver), so every subclass keeps its fields in ``self.details``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AssemblyError",
    "ChangelogError",
    "ConfigError",
    "IncompleteTransaction",
    "MissingDependency",
    "OutOfMemory",
    "ProtocolError",
    "SchemaChangeError",
    "SinkError",
    "SlotInUse",
    "SourceError",
    "SourceUnavailable",
    "SparkDied",
    "TransactionTooLarge",
    "TxJoinError",
    "UnsupportedQuery",
]


class TxJoinError(Exception):
    """Base of every error txjoin raises.

    ``details`` holds structured context (``table``, ``xid``, ``lsn`` ...) so
    callers and the ``--json`` output can use it without parsing the message.
    """

    #: Whether retrying the same operation may succeed (server restarting...).
    transient: bool = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword details must survive pickling across Spark's worker boundary.
        return (_rebuild, (type(self), self.message, self.details))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[TxJoinError], message: str, details: dict[str, Any]) -> TxJoinError:
    return cls(message, **details)


def from_text(text: str) -> TxJoinError | None:
    """Rebuild the txjoin error a Python traceback's text ends with, if any.

    Spark returns errors raised in its Python workers as text (the worker's
    traceback inside a Java exception); the user should see our message, not
    the Java stack trace.
    """
    found: TxJoinError | None = None
    for line in text.splitlines():
        head, sep, message = line.strip().partition(": ")
        if not sep:
            continue
        name = head.rsplit(".", 1)[-1]
        cls = globals().get(name)
        is_ours = head == name or head.startswith("txjoin.")
        if is_ours and isinstance(cls, type) and issubclass(cls, TxJoinError) and message:
            found = cls(message.strip())
    return found


class ConfigError(TxJoinError, ValueError):
    """A pipeline spec, option, slot or publication name is invalid."""


class MissingDependency(TxJoinError):
    """A program or package txjoin needs is not installed."""


class SourceError(TxJoinError):
    """The source PostgreSQL refused an operation or is misconfigured."""


class SlotInUse(SourceError):
    """The replication slot is active for another process."""


class SourceUnavailable(SourceError):
    """The source server cannot be reached; retrying may succeed."""

    transient = True


class ProtocolError(TxJoinError, ValueError):
    """A pgoutput message or Debezium event is malformed."""


class ChangelogError(TxJoinError):
    """The changelog directory is damaged or was written by something else."""


class ValueNotRepresentable(ProtocolError):
    """A source value the join stage cannot read exactly (the output holds until it changes)."""


class AssemblyError(TxJoinError):
    """Transaction assembly cannot make progress safely."""


class TransactionTooLarge(AssemblyError):
    """One transaction buffers more events than the configured limit."""


class IncompleteTransaction(AssemblyError):
    """A transaction stayed incomplete past the configured timeout."""


class UnsupportedQuery(TxJoinError, ValueError):
    """An output's SQL uses a construct txjoin cannot maintain incrementally."""


class SchemaChangeError(TxJoinError):
    """A source schema change breaks an output's SQL."""


class SinkError(TxJoinError):
    """A Delta table could not be read or written."""


class SparkDied(TxJoinError):
    """Spark's driver process exited under txjoin (out of memory, killed)."""


class OutOfMemory(TxJoinError):
    """txjoin's own process ran out of memory (the replica store, or Python)."""


class PipelineStalled(TxJoinError):
    """The streaming query stopped, or made no progress while changes waited."""
