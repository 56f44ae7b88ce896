"""Configuration of one capture source."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from txjoin.debezium.topics import heartbeat_topic, table_topic, transaction_topic, validate_prefix
from txjoin.errors import ConfigError
from txjoin.pg.names import QualifiedName, validate_publication_name, validate_slot_name

__all__ = ["CaptureConfig"]

_TOPIC_PART_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class CaptureConfig:
    """One source: a database, its captured tables, and where events go."""

    #: libpq connection string of the source database (never logged).
    dsn: str
    #: Tables to capture; each needs a primary key.
    tables: tuple[QualifiedName, ...]
    #: Root directory of the changelog.
    changelog: Path
    #: Topic prefix and source name (Debezium ``topic.prefix``).
    prefix: str
    #: Replication slot; default ``txjoin_<prefix>`` (lower-cased, '-' -> '_').
    slot: str = ""
    #: Publication; default the slot name.
    publication: str = ""
    #: A segment is made durable once this many bytes are pending...
    roll_bytes: int = 8 << 20
    #: ...or once the oldest pending record is this old (seconds).
    roll_interval: float = 0.2
    #: When the server has nothing more to send, pending records wait at most this long (seconds):
    #: a quiet source's commits reach the changelog sooner than ``roll_interval``.
    idle_flush_interval: float = 0.05
    #: Seconds between heartbeat records on an idle source. Each one costs the pipeline a micro-batch
    #: (which a commit arriving meanwhile waits behind); they only need to come often enough for
    #: assembly's ``incomplete_timeout`` (60 s) to be checked on an idle source.
    heartbeat_interval: float = 10.0
    #: Take an initial snapshot (Parquet beside the topics) when the slot is created.
    snapshot: bool = True
    #: Connections reading the snapshot in parallel (each imports the slot's exported snapshot).
    snapshot_workers: int = 2
    #: Heap megabytes per snapshot chunk: a worker holds about two chunks in memory.
    snapshot_chunk_mb: int = 64
    #: Give up reconnecting after this many seconds without a connection.
    reconnect_timeout: float = 300.0
    #: Set REPLICA IDENTITY FULL on the captured tables before starting.
    replica_identity_full: bool = False
    #: Minimum seconds between acknowledgements to the server (0: after every
    #: flush). Acknowledging less often saves round trips; after a crash the
    #: server resends at most this much, which capture skips.
    ack_interval: float = 0.0
    #: When the slot is active for another process (often the walsender of a
    #: capture that just died), wait this long for it to be released.
    slot_busy_wait: float = 10.0
    #: Keepalive/status interval of the replication connection (seconds).
    status_interval: float = 10.0
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_prefix(self.prefix)
        if not self.tables:
            raise ConfigError(f"source {self.prefix!r} captures no tables: list at least one")
        for t in self.tables:
            if not (_TOPIC_PART_RE.match(t.schema) and _TOPIC_PART_RE.match(t.table)):
                raise ConfigError(
                    f"table {t} cannot be captured: its schema and table names must consist of "
                    "letters, digits, '_' or '-' (topic names follow Kafka's rules) so its topic name "
                    "parses back",
                    table=str(t),
                )
        if len(set(self.tables)) != len(self.tables):
            raise ConfigError(f"source {self.prefix!r} lists a table twice")
        slot = self.slot or "txjoin_" + self.prefix.lower().replace("-", "_")
        object.__setattr__(self, "slot", validate_slot_name(slot))
        object.__setattr__(self, "publication", validate_publication_name(self.publication or slot))
        if self.roll_bytes <= 0 or self.roll_interval <= 0 or self.heartbeat_interval <= 0:
            raise ConfigError("roll_bytes, roll_interval and heartbeat_interval must be positive")

    @property
    def transaction_topic(self) -> str:
        return transaction_topic(self.prefix)

    @property
    def heartbeat_topic(self) -> str:
        return heartbeat_topic(self.prefix)

    def topic(self, table: QualifiedName) -> str:
        return table_topic(self.prefix, table)
