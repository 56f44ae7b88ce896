"""Capture: PostgreSQL logical replication (pgoutput) into a Debezium-format changelog.

One publication and one slot per source. On first start the slot is created
with an exported snapshot; the captured tables are read under that snapshot
and written as one snapshot unit (op 'r', framed by BEGIN/END), then the
stream starts at the slot's consistent point.

Durability before acknowledgement: a transaction's events and its END are
appended to the changelog, ``flush()`` makes them durable (data topics before
the transaction topic), and only then is ``flush_lsn = Commit.end_lsn`` sent
to the server. After a crash the server resends everything after the
acknowledged position; transactions already durable (commit record starting
before the durable end) are skipped, so only the unacknowledged tail can
appear twice, byte-identical.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions

from txjoin.capture.config import CaptureConfig
from txjoin.capture.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Relation,
    Truncate,
    TypeInfo,
    Update,
    decode,
)
from txjoin.capture.resync import RESYNC_PREFIX
from txjoin.capture.snapshot import Progress, take_snapshot
from txjoin.capture.tables import CapturedTable
from txjoin.capture.writer import ChangelogWriter
from txjoin.debezium import envelope
from txjoin.debezium.lsn import format_lsn, parse_lsn
from txjoin.errors import (
    ChangelogError,
    SlotInUse,
    SourceError,
    SourceUnavailable,
    TxJoinError,
)
from txjoin.pg import admin
from txjoin.pg.catalog import domain_bases, resolve_domain
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = ["Capture", "CaptureStats"]

log = logging.getLogger(__name__)


@dataclass
class CaptureStats:
    """Counters a progress display or benchmark can read while capture runs."""

    transactions: int = 0
    events: int = 0
    snapshot_rows: int = 0
    skipped_transactions: int = 0
    flushes: int = 0
    reconnects: int = 0
    acked_lsn: int = 0
    last_commit_ts_us: int = 0
    started: float = field(default_factory=time.monotonic)


class _Tx:
    __slots__ = (
        "begin_lsn",
        "bytes",
        "commit_ts",
        "counts",
        "events",
        "final_lsn",
        "manifest",
        "skip",
        "spilled",
        "total",
        "xid",
    )

    def __init__(self, xid: int, begin_lsn: int, commit_ts: int, skip: bool) -> None:
        self.xid = xid
        self.begin_lsn = begin_lsn
        self.commit_ts = commit_ts
        self.skip = skip
        self.events: list[tuple[str, bytes]] = []
        self.manifest: str | None = None  # a resync's manifest (txjoin.capture.resync)
        self.final_lsn = begin_lsn  # the commit record's LSN (Begin's final_lsn)
        self.counts: dict[str, int] = {}
        self.total = 0
        self.bytes = 0
        self.spilled = False


class Capture:
    """Runs one source's capture until stopped. Not thread-safe; one per source.

    Events go through ``writer`` (:mod:`txjoin.capture.writer`); with
    ``owns_writer`` capture closes it when :meth:`run` returns.
    """

    def __init__(self, config: CaptureConfig, writer: ChangelogWriter, *, owns_writer: bool = False) -> None:
        self.config = config
        self.where = describe_dsn(config.dsn)
        self._owns_writer = owns_writer
        self.writer = writer
        self.stats = CaptureStats()
        self.source = envelope.SourceInfo(name=config.prefix, db="")
        self._rels: dict[int, CapturedTable] = {}
        self._types: dict[int, str] = {}
        self._domains: dict[int, ColumnType] = {}
        self._tables = set(config.tables)
        self._pk: dict[QualifiedName, tuple[str, ...]] = {}
        self._topic_of = {t: config.topic(t) for t in config.tables}
        self._tx: _Tx | None = None
        self._durable_end = 0  # end LSN of the last transaction durable in the changelog
        self._last_commit_end = 0  # sequence[0] of the next transaction's events
        self._unacked_end = 0  # end LSN appended but not yet flushed
        self._last_activity = time.monotonic()
        self._last_ack = 0.0
        self._cursor: Any = None
        #: Set once the replication stream has started (after any snapshot).
        self.streaming = threading.Event()
        #: Rows of the initial snapshot per table, while it runs (progress displays).
        self.snapshot_progress = Progress({}, {}, time.monotonic())
        self._conn: Any = None

    # ------------------------------------------------------------------ set-up
    def prepare(self) -> None:
        """Check the source and create the publication. Safe to repeat."""
        conn = connect(self.config.dsn)
        try:
            admin.check_wal_level(conn, self.where)
            admin.check_replication_privilege(conn, self.where)
            infos = admin.check_tables(conn, self.config.tables, self.where)
            self._pk = {i.name: i.primary_key for i in infos}
            if self.config.replica_identity_full:
                admin.set_replica_identity_full(conn, self.config.tables)
            admin.ensure_publication(conn, self.config.publication, self.config.tables, self.where)
            with conn.cursor() as cur:
                cur.execute("SELECT current_database()")
                self.database = cur.fetchone()[0]
                cur.execute("SELECT oid, typname FROM pg_type")
                self._types = {int(o): n for o, n in cur.fetchall()}
                self._domains = domain_bases(cur)
            conn.commit()
        finally:
            conn.close()
        self.source = envelope.SourceInfo(name=self.config.prefix, db=self.database)

    def _recover_position(self) -> bool:
        """Find the changelog's last END; return whether the snapshot unit is done.

        A large transaction's BEGIN and events reach the changelog before its
        END, so after a crash the topic may end with such a BEGIN: the server
        resends that transaction whole, and its events again, byte-identical.
        """
        last = _last_end(self.writer, self.config.transaction_topic)
        if last is None:
            return False
        _, end_lsn = envelope.parse_tx_id(last["id"])
        self._durable_end = self._last_commit_end = end_lsn
        return True

    def _ensure_slot(self, snapshot_done: bool) -> None:
        conn = connect(self.config.dsn)
        try:
            info = admin.slot_info(conn, self.config.slot)
            conn.rollback()
            deadline = time.monotonic() + self.config.slot_busy_wait
            while info is not None and info.active and time.monotonic() < deadline:
                time.sleep(0.2)
                info = admin.slot_info(conn, self.config.slot)
                conn.rollback()
            if info is not None:
                admin.check_slot_usable(info, self.database, self.where)
                if snapshot_done or not self.config.snapshot:
                    return
                # The slot exists but the snapshot unit never reached the
                # changelog: its exported snapshot is gone, so start again.
                log.warning(
                    "slot %s on %s exists but the changelog holds no completed snapshot: "
                    "dropping the slot and taking the snapshot again",
                    self.config.slot,
                    self.where,
                )
                admin.drop_slot(conn, self.config.slot, self.where)
            elif snapshot_done:
                raise SourceError(
                    f"replication slot {self.config.slot!r} does not exist on {self.where}, but the "
                    f"changelog {self.config.changelog} already holds changes up to LSN "
                    f"{format_lsn(self._durable_end)}: the slot was dropped and the changes "
                    "made since are lost to txjoin. Start over with an empty changelog directory "
                    "to take a new snapshot",
                    slot=self.config.slot,
                )
        finally:
            conn.close()
        self._create_slot_and_snapshot()

    def _create_slot_and_snapshot(self) -> None:
        repl = connect(self.config.dsn, replication=True)
        try:
            cur = repl.cursor()
            try:
                cur.create_replication_slot(self.config.slot, output_plugin="pgoutput")
            except psycopg2.errors.DuplicateObject as e:
                raise SlotInUse(
                    f"replication slot {self.config.slot!r} was created concurrently on {self.where}: "
                    "another capture for this source is starting; run one at a time",
                    slot=self.config.slot,
                ) from e
            _slot, consistent_point, snapshot_name, _plugin = cur.fetchone()
            lsn = parse_lsn(consistent_point)
            log.info("created slot %s on %s at %s", self.config.slot, self.where, consistent_point)
            if self.config.snapshot:
                # The exported snapshot lives until the next command on `repl`.
                take_snapshot(
                    self.config,
                    self.writer,
                    self.source,
                    snapshot_name,
                    lsn,
                    self._snapshot_rows,
                    self.snapshot_progress,
                )
            self._durable_end = self._last_commit_end = lsn
        finally:
            repl.close()

    # ----------------------------------------------------------------- running
    def run(
        self, stop: threading.Event | None = None, *, until: Callable[[Capture], bool] | None = None
    ) -> CaptureStats:
        """Capture until ``stop`` is set or ``until(self)`` is true; then flush and return."""
        stop = stop or threading.Event()
        try:
            self.prepare()
            snapshot_done = self._recover_position()
            self._ensure_slot(snapshot_done)
            self._stream_with_reconnect(stop, until)
        finally:
            self._close_connection()
            if self._owns_writer:
                self.writer.close()
        return self.stats

    def _stream_with_reconnect(self, stop: threading.Event, until: Callable[[Capture], bool] | None) -> None:
        backoff = 0.5
        down_since: float | None = None
        while not stop.is_set():
            try:
                self._stream(stop, until)
                return
            except SourceUnavailable as e:
                err: TxJoinError = e
            except psycopg2.Error as e:
                if not self._connection_lost(e):
                    raise
                err = SourceUnavailable(f"lost the replication connection to {self.where}: {_first_line(e)}")
            self._abandon_open_transaction()
            self._flush_and_ack(send=False)
            self._close_connection()
            now = time.monotonic()
            down_since = down_since or now
            if now - down_since > self.config.reconnect_timeout:
                raise SourceUnavailable(
                    f"{err} — gave up after {self.config.reconnect_timeout:.0f} s of retries "
                    "(raise reconnect_timeout to wait longer); restart capture when the server "
                    "is back, it resumes from the slot",
                ) from None
            self.stats.reconnects += 1
            log.warning("%s; reconnecting in %.1f s", err, backoff)
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, 30.0)
            try:
                self._recover_position()
            except ChangelogError:
                raise
            self._last_commit_end = max(self._last_commit_end, self._durable_end)

    def _connection_lost(self, e: psycopg2.Error) -> bool:
        """Whether ``e`` means the server or the network went away (retry)."""
        if isinstance(e, psycopg2.OperationalError | psycopg2.InterfaceError):
            return True
        # After a dropped connection psycopg2 may report a plain
        # DatabaseError ("no COPY in progress") from read_message().
        return self._conn is None or bool(self._conn.closed) or "no COPY in progress" in str(e)

    def _close_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
        self._conn = self._cursor = None

    def _stream(self, stop: threading.Event, until: Callable[[Capture], bool] | None) -> None:
        self._conn = connect(self.config.dsn, replication=True)
        cur = self._cursor = self._conn.cursor()
        try:
            cur.start_replication(
                slot_name=self.config.slot,
                decode=False,
                start_lsn=0,
                # messages: txjoin resync's marker (a transactional logical message).
                options={
                    "proto_version": "1",
                    "publication_names": self.config.publication,
                    "messages": "true",
                },
                status_interval=self.config.status_interval,
            )
        except psycopg2.errors.ObjectInUse as e:
            raise SlotInUse(
                f"replication slot {self.config.slot!r} on {self.where} is in use: {_first_line(e)}. "
                "A slot serves one reader: stop the other reader or use another slot",
                slot=self.config.slot,
            ) from None
        except psycopg2.errors.UndefinedObject as e:
            raise SourceError(f"cannot start replication on {self.where}: {_first_line(e)}") from None
        log.info("streaming %s from slot %s", self.where, self.config.slot)
        self.streaming.set()
        handle = self._handle
        read = cur.read_message
        while not stop.is_set():
            if until is not None and self._tx is None and until(self):
                break
            msg = read()
            if msg is not None:
                handle(msg.payload, msg.data_start)
                continue
            timeout = self._idle()
            with contextlib.suppress(InterruptedError):
                select.select([cur], [], [], timeout)
        self._flush_and_ack()

    # --------------------------------------------------------------- messages
    def _handle(self, payload: bytes, data_start: int) -> None:
        try:
            msg = decode(payload)
        except TxJoinError as e:
            e.details.setdefault("lsn", format_lsn(data_start))
            raise
        tx = self._tx
        if isinstance(msg, Insert | Update | Delete):
            if tx is None:
                raise SourceError(f"change outside a transaction at LSN {format_lsn(data_start)}")
            if tx.skip:
                return
            rel = self._rels.get(msg.relid)
            if rel is None:
                return  # not one of ours (a publication shared with other tables)
            if isinstance(msg, Insert):
                self._event(tx, rel, envelope.Op.CREATE, None, rel.row(msg.new), data_start)
            elif isinstance(msg, Update):
                after = rel.row(msg.new)
                if msg.old is None:
                    before = None
                elif msg.old_kind == "O":
                    before = rel.row(msg.old)
                else:
                    before = rel.key_row(msg.old)
                if before is not None and any(
                    before.get(rel.names[i], after[rel.names[i]]) != after[rel.names[i]] for i in rel.pk_idx
                ):
                    # Debezium emits a primary-key change as a delete of the old
                    # key followed by a create of the new one.
                    self._event(tx, rel, envelope.Op.DELETE, before, None, data_start)
                    self._event(tx, rel, envelope.Op.CREATE, None, after, data_start)
                else:
                    self._event(tx, rel, envelope.Op.UPDATE, before, after, data_start)
            else:
                before = rel.row(msg.old) if msg.old_kind == "O" else rel.key_row(msg.old)
                self._event(tx, rel, envelope.Op.DELETE, before, None, data_start)
        elif isinstance(msg, Begin):
            if tx is not None:
                raise SourceError(
                    f"BEGIN inside transaction {tx.xid} at LSN {format_lsn(data_start)}"
                )
            skip = msg.final_lsn < self._durable_end
            self._tx = _Tx(msg.xid, data_start, msg.commit_ts, skip)
            self._tx.final_lsn = msg.final_lsn
        elif isinstance(msg, Commit):
            if tx is None:
                raise SourceError(f"COMMIT without BEGIN at LSN {format_lsn(data_start)}")
            self._commit(tx, msg)
            self._tx = None
        elif isinstance(msg, Relation):
            # Relation messages carry no position of their own (data_start is 0): the
            # columns hold from the transaction they arrive in, i.e. its commit record.
            self._relation(msg, tx.final_lsn if tx is not None else data_start)
        elif isinstance(msg, Truncate):
            if tx is None or tx.skip:
                return
            for relid in msg.relids:
                rel = self._rels.get(relid)
                if rel is not None:
                    self._event(tx, rel, envelope.Op.TRUNCATE, None, None, data_start)
        elif isinstance(msg, TypeInfo):
            self._types[msg.oid] = msg.name
        elif (
            isinstance(msg, LogicalMessage)
            and msg.transactional
            and msg.prefix == RESYNC_PREFIX
            and tx is not None
            and not tx.skip
        ):
            tx.manifest = msg.content.decode()  # a resync's copy: its END names it
        # Origin messages carry nothing we publish.

    def _relation(self, msg: Relation, lsn: int) -> None:
        name = QualifiedName(msg.namespace or "pg_catalog", msg.name)
        if name not in self._tables:
            self._rels.pop(msg.oid, None)
            return
        cols = [
            resolve_domain(ColumnType(c.type_oid, self._type_name(c.type_oid), c.typmod), self._domains)
            for c in msg.columns
        ]
        names = [c.name for c in msg.columns]
        pk = self._pk.get(name, ())
        missing = [k for k in pk if k not in names]
        if missing:
            raise SourceError(
                f"table {name} lost its primary key column(s) {missing} (schema change at LSN "
                f"{format_lsn(lsn)}): txjoin cannot key its rows any more; restore the "
                "column or start a new pipeline for the new schema",
                table=str(name),
            )
        rel = CapturedTable(
            msg.oid,
            name,
            self._topic_of[name],
            cols,
            names,
            [i for i, c in enumerate(msg.columns) if c.is_key],
            [names.index(k) for k in pk],
        )
        self._rels[msg.oid] = rel
        rel.record_schema(self.writer, lsn)

    def _type_name(self, oid: int) -> str:
        name = self._types.get(oid)
        if name is None:
            conn = connect(self.config.dsn)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT typname FROM pg_type WHERE oid = %s", (oid,))
                    row = cur.fetchone()
            finally:
                conn.close()
            name = row[0] if row else f"oid{oid}"
            self._types[oid] = name
        return name

    def _snapshot_rows(self, n: int) -> None:
        self.stats.snapshot_rows += n

    def _event(
        self,
        tx: _Tx,
        rel: CapturedTable,
        op: envelope.Op,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        lsn: int,
    ) -> None:
        tx.total += 1
        dco = tx.counts.get(rel.topic, 0) + 1
        tx.counts[rel.topic] = dco
        value = envelope.change_event(
            self.source,
            schema=rel.name.schema,
            table=rel.name.table,
            op=op,
            before=before,
            after=after,
            xid=tx.xid,
            lsn=lsn,
            prev_commit_lsn=self._last_commit_end,
            commit_ts_us=tx.commit_ts,
            snapshot="false",
            total_order=tx.total,
            data_collection_order=dco,
        )
        data = envelope.dumps(value)
        tx.events.append((rel.topic, data))
        tx.bytes += len(data)
        if tx.bytes >= self.config.roll_bytes:
            self._spill(tx)

    def _spill(self, tx: _Tx) -> None:
        """Hand a large transaction's events to the changelog before its COMMIT."""
        if not tx.spilled:
            self.writer.append(
                self.config.transaction_topic,
                envelope.dumps(envelope.begin_event(tx.xid, tx.begin_lsn, tx.commit_ts)),
            )
            tx.spilled = True
        for topic, data in tx.events:
            self.writer.append(topic, data)
        tx.events.clear()
        tx.bytes = 0
        if self.writer.pending_bytes() >= self.config.roll_bytes:
            self.writer.flush()
            self.stats.flushes += 1

    def _commit(self, tx: _Tx, msg: Commit) -> None:
        if tx.skip:
            self.stats.skipped_transactions += 1
            return
        if tx.total == 0 and tx.manifest is None:
            # Only tables we do not capture changed (pgoutput skips truly
            # empty transactions itself); nothing to publish.
            return
        if not tx.spilled:
            self.writer.append(
                self.config.transaction_topic,
                envelope.dumps(envelope.begin_event(tx.xid, tx.begin_lsn, tx.commit_ts)),
            )
        append = self.writer.append
        for topic, data in tx.events:
            append(topic, data)
        collections = [(self._collection_of(topic), n) for topic, n in tx.counts.items()]
        append(
            self.config.transaction_topic,
            envelope.dumps(
                envelope.end_event(
                    tx.xid, msg.end_lsn, tx.commit_ts, collections, snapshot_manifest=tx.manifest
                )
            ),
        )
        self._last_commit_end = msg.end_lsn
        self._unacked_end = msg.end_lsn
        self.stats.transactions += 1
        self.stats.events += tx.total
        self.stats.last_commit_ts_us = tx.commit_ts
        if (
            self.writer.pending_bytes() >= self.config.roll_bytes
            or self.writer.pending_age() >= self.config.roll_interval
        ):
            self._flush_and_ack()

    def _collection_of(self, topic: str) -> str:
        return topic.split(".", 1)[1]

    def _abandon_open_transaction(self) -> None:
        # The server resends an unacknowledged transaction whole.
        self._tx = None

    def _flush_and_ack(self, send: bool = True) -> None:
        if self.writer.pending_bytes() or self._unacked_end > self._durable_end:
            self.writer.flush()
            self.stats.flushes += 1
            self._last_activity = time.monotonic()
        if self._unacked_end > self._durable_end:
            self._durable_end = self._unacked_end
        self._ack(send)

    def _ack(self, send: bool = True) -> None:
        if not send or self._cursor is None or self._durable_end <= self.stats.acked_lsn:
            return
        now = time.monotonic()
        if now - self._last_ack < self.config.ack_interval:
            return
        self._cursor.send_feedback(write_lsn=self._durable_end, flush_lsn=self._durable_end, force=True)
        self.stats.acked_lsn = self._durable_end
        self._last_ack = now

    def _idle(self) -> float:
        """The server has nothing more for now: flush what is due, acknowledge, beat; return how long
        to wait for the server before coming back."""
        now = time.monotonic()
        cfg = self.config
        # Waiting longer than this only delays the pending records.
        limit = min(cfg.roll_interval, cfg.idle_flush_interval)
        if self._tx is None and self.writer.pending_age() >= limit:
            self._flush_and_ack()
        self._ack()
        # Heartbeats only on an idle source: under load, data keeps the
        # stream moving and every heartbeat would cost a segment file.
        if self._tx is None and now - self._last_activity >= self.config.heartbeat_interval:
            self.writer.append(
                self.config.heartbeat_topic,
                envelope.dumps(envelope.heartbeat_event(int(time.time() * 1000))),
            )
            self._flush_and_ack()
            self._last_activity = now
            self._trim_heartbeats()
        wait = min(cfg.roll_interval, cfg.heartbeat_interval, cfg.idle_flush_interval)
        age = self.writer.pending_age()
        if age:  # wake when the pending records are due, not a whole interval later
            wait = min(wait, limit - age)
        return max(0.005, wait)

    def _trim_heartbeats(self, keep: int = 64) -> None:
        """Keep the heartbeat topic small: old heartbeats are worthless."""
        self.writer.trim(self.config.heartbeat_topic, keep)


def _last_end(writer: ChangelogWriter, topic: str) -> dict[str, Any] | None:
    """The last END marker of a transaction topic, read from the end."""
    for line in writer.read_backwards(topic):
        value = json.loads(line)
        if value.get("status") == "END":
            return dict(value)
        if value.get("status") != "BEGIN":
            raise ChangelogError(
                f"record {line[:80]!r} of topic {topic} is not a transaction marker: the changelog was "
                "not written by txjoin capture or is damaged; move it aside and start over",
                topic=topic,
            )
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
