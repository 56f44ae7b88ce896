"""The streaming pipeline: changelog -> whole transactions -> replicas -> outputs.

Wiring only; the logic lives in the stages. The changelog is read and
decoded (:mod:`txjoin.decode`), assembled into whole transactions in commit
order (:mod:`txjoin.assemble`), and each micro-batch (``foreachBatch``)

1. is applied by the join stage (:meth:`txjoin.join.batch.JoinStage.apply`):
   in ONE replica-store transaction, the output partitions the changes reach
   before and after, the changes themselves, the batch id and the new cut;
2. is published by the sink (:meth:`txjoin.sink.publish.Publisher.publish`):
   per affected output, the join stage recomputes its partitions and ONE
   Delta commit carries them and the cut, idempotent per batch id.

A crash anywhere replays the batch: step 1 is found already done (its
partitions are read back), and an output whose commit is already there is
skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from txjoin import errors
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream, state_partitions
from txjoin.cut import Cut
from txjoin.decode import ReaderKind, changelog_input, read_events
from txjoin.errors import TxJoinError
from txjoin.join.batch import BatchStats, JoinStage
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import plan_pipeline
from txjoin.join.replica import ReplicaStore, out_of_memory
from txjoin.pg.catalog import Table
from txjoin.pg.names import QualifiedName
from txjoin.session import check_jvm, jvm_exit_code
from txjoin.sink.delta import DeltaRsStore, DeltaStore
from txjoin.sink.publish import Publisher
from txjoin.spec import PipelineSpec, log_retention, memory

__all__ = ["BatchStats", "Pipeline"]

log = logging.getLogger(__name__)


class Pipeline:
    """One pipeline spec running on one Spark session (``tables``: the sources' catalogs, if read)."""

    changelog_reader: ReaderKind = "offsets"  # see txjoin.decode.ChangelogInput

    def __init__(
        self,
        spec: PipelineSpec,
        spark: Any,
        *,
        delta: DeltaStore | None = None,
        tables: Mapping[QualifiedName, Table] | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.spec = spec
        self.spark = spark
        self.on_batch = on_batch
        planned = plan_pipeline(spec, tables)
        self.tables: dict[QualifiedName, Table] = dict(planned.tables)
        self.plans: dict[str, OutputPlan] = dict(planned.plans)
        self.join = JoinStage(spec, spark, planned)
        opts = spec.options
        self.memory = memory(opts)  # read once: check() runs every 0.5 s
        delta = delta or DeltaRsStore(opts.output_file_bytes, opts.compact_after_files, log_retention(opts))
        self.sink = Publisher(spec, planned, delta)
        self.query: Any = None
        #: The error the last micro-batch raised, if any.
        self.failure: BaseException | None = None
        self.history: list[BatchStats] = []
        #: Per source, the cut every output reflects once its batch is published.
        self.progress: dict[str, Cut] = {}
        #: When the query started or last finished a micro-batch (the watchdog's clock).
        self.last_progress = time.monotonic()
        # Before any batch: every output's SQL runs on Spark, and its Delta
        # table belongs with this replica store.
        self.join.check_plans()
        self.sink.check_tables(self.store.last_batch, self.store.path)
        self.sink.build_stale(self.join)

    @property
    def store(self) -> ReplicaStore:
        return self.join.store

    @property
    def delta(self) -> DeltaStore:
        return self.sink.delta

    # -- streaming ----------------------------------------------------------
    def start(self, checkpoint: Path | None = None, *, available_now: bool = False) -> Any:
        """Start the streaming query (capture must be writing the changelog).

        ``available_now``: process what the changelog holds now, in as many
        micro-batches as Spark plans, then stop (see :meth:`run_available`).
        """
        self.failure = None
        opts = self.spec.options
        source = changelog_input(self.spec, self.changelog_reader)
        cfg = AssemblerConfig(
            max_transaction_events=opts.max_transaction_events,
            stage_events=opts.stage_transaction_events,
            incomplete_timeout=opts.incomplete_timeout,
            on_incomplete=opts.on_incomplete,  # type: ignore[arg-type]
            check_segments=source.kind == "files",
            debezium_snapshots=source.kind == "debezium",
        )
        ck = checkpoint or self.spec.checkpoint
        events = read_events(self.spark, source, sorted(self.spec.sources), ck)
        released = assemble_stream(events, cfg)
        writer = released.writeStream.foreachBatch(self.process_batch).option("checkpointLocation", str(ck))
        interval = source.trigger(opts.trigger_interval)
        trigger = {"availableNow": True} if available_now else {"processingTime": interval}
        writer = writer.trigger(**trigger)
        with state_partitions(self.spark, len(self.spec.sources)):
            self.query = writer.queryName(f"txjoin_{self.spec.name}").start()
        self.last_progress = time.monotonic()
        return self.query

    def run_available(self, checkpoint: Path | None = None) -> None:
        """Process everything the changelog holds now, then stop; raise the query's error."""
        query = self.start(checkpoint, available_now=True)
        try:
            query.awaitTermination()
        except Exception as e:
            self._check_jvm(cause=e)
            raise _unwrap(e, self.failure) from None
        finally:
            self.query = None
        if query.exception() is not None:
            raise _unwrap(query.exception(), self.failure)

    def stop(self, wait: float = 120.0) -> None:
        """Stop the query, letting a running micro-batch finish first (up to ``wait`` seconds):
        stopped mid-batch, the batch would be replayed on restart anyway, but noisily."""
        if self.query is None:
            return
        deadline = time.monotonic() + wait
        while self.query.isActive and self.query.status.get("isTriggerActive"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.query.stop()
        self.query = None

    def close(self) -> None:
        """Stop the query and close the replica store."""
        try:
            if jvm_exit_code(self.spark) is None:  # a dead driver has no query left to stop
                self.stop()
        except Exception as e:
            self._check_jvm(cause=e)
            raise
        finally:
            self.query = None
            self.join.close()

    def check(self) -> None:
        """Raise the query's error if it stopped with one, or if Spark's driver died."""
        self._check_jvm()
        if self.query is None:
            return
        try:
            error = self.query.exception()
            if error is not None:
                raise _unwrap(error, self.failure)
            self._watchdog()
        except Exception as e:  # the JVM may have gone away since the first check
            self._check_jvm(cause=e)
            raise

    def _watchdog(self) -> None:
        """Never stay alive and idle: raise if the query stopped on its own, or made no
        progress for ``stall_timeout`` while a micro-batch ran or changelog data waited."""
        query = self.query
        batch = f"batch {self.history[-1].batch}" if self.history else "its first batch"
        if query is not None and not query.isActive:
            raise errors.PipelineStalled(
                f"the streaming query of pipeline {self.spec.name!r} stopped without an error at "
                f"{batch}; nothing is lost: start txjoin run again"
            )
        idle = time.monotonic() - self.last_progress
        limit = self.spec.options.stall_timeout
        if query is None or idle <= limit:
            return
        status = query.status
        if status.get("isTriggerActive") or status.get("isDataAvailable"):
            doing = "a micro-batch running" if status.get("isTriggerActive") else "changelog data waiting"
            raise errors.PipelineStalled(
                f"no progress for {idle:.0f} s at {batch} of pipeline {self.spec.name!r} with "
                f"{doing} (Spark: {status.get('message', '?')}); stopping. Raise [options] stall_timeout "
                f"(now {limit:.0f} s) if batches this long are expected, then start txjoin run again",
                setting="stall_timeout",
            )

    def _check_jvm(self, cause: BaseException | None = None) -> None:
        mem = self.memory
        check_jvm(self.spark, driver_memory=mem.driver, batch_bytes=mem.batch_bytes, cause=cause)

    # -- one micro-batch ------------------------------------------------------
    def process_batch(self, df: Any, batch_id: int) -> None:
        """``foreachBatch``'s function: apply, recompute and publish one micro-batch."""
        try:
            started = time.monotonic()
            stats = BatchStats(batch_id)
            rows = df.toPandas() if not isinstance(df, pd.DataFrame) else df
            stats.add_time("collect", started)  # Spark runs read, decode and assembly here
            applied = self.join.apply(rows, batch_id, stats, table_exists=self.sink.table_exists)
            self.sink.publish(batch_id, applied, self.join, stats)
            self.progress = dict(applied.cuts)
            self.last_progress = time.monotonic()
            stats.seconds = time.monotonic() - started
            self.history.append(stats)
            if self.on_batch is not None:
                self.on_batch(stats)
        except BaseException as e:
            oom = out_of_memory(e, replica_memory=self.memory.replica, batch_bytes=self.memory.batch_bytes)
            self.failure = oom or e  # Spark passes it on as text; keep the object for the caller
            if oom is not None:
                raise oom from e
            raise


def _unwrap(e: Any, failure: BaseException | None = None) -> BaseException:
    """The txjoin error behind a StreamingQueryException, if there is one.

    ``failure`` is what :meth:`Pipeline.process_batch` raised on the driver;
    errors raised in Spark's Python workers (assembly) come back as text, so
    the last ``txjoin.errors.X: message`` line there is rebuilt as ``X``.
    """
    if isinstance(e, TxJoinError):
        return e
    if failure is not None:
        return failure
    return errors.from_text(str(e)) or RuntimeError(_first_line(str(e)))


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else "the streaming query failed"
