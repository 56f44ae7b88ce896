"""The streaming pipeline: changelog -> whole transactions -> replicas -> outputs.

Wiring only; the logic lives in the stages. Per micro-batch (``foreachBatch``):

1. the released rows (whole transactions, commit order per source) become
   :class:`~txjoin.join.replica.Change` objects;
2. in ONE SQLite transaction: find the output partitions the changes reach
   over the replicas as they were (before-images), apply the changes
   version-monotonically, find the partitions reached now, and record them
   with the batch id and the new cut;
3. per output with affected partitions: fetch the rows they need, run the
   SQL on Spark, commit ONE Delta MERGE carrying the cut, idempotent per
   batch id.

A crash anywhere replays the batch: step 2 is found already done (its
partitions are read back), and an output whose commit is already there is
skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from txjoin import errors
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream
from txjoin.cut import Cut, same_position
from txjoin.debezium.record import parse_record
from txjoin.debezium.values import from_debezium
from txjoin.decode import ChangelogInput, read_events
from txjoin.delta_sink import DeltaRsStore, DeltaStore
from txjoin.errors import ChangelogError, SchemaChangeError, TxJoinError
from txjoin.faults import crash_point
from txjoin.join.engine import SparkEngine
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import plan_outputs
from txjoin.join.propagate import affected_partitions, closure, touched_keys
from txjoin.join.replica import Change, ReplicaStore, encode
from txjoin.pg.catalog import Table
from txjoin.pg.names import QualifiedName, parse_table_name
from txjoin.spec import PipelineSpec

__all__ = ["BatchStats", "Pipeline"]

log = logging.getLogger(__name__)


@dataclass
class BatchStats:
    """What one micro-batch did, for progress displays and reports."""

    batch: int
    transactions: int = 0
    events: int = 0
    commits: dict[str, int] = field(default_factory=dict)  # output -> Delta version
    partitions: dict[str, int] = field(default_factory=dict)  # output -> partitions recomputed (-1: all)
    replayed: bool = False
    seconds: float = 0.0
    last_commit_ts_ms: dict[str, int] = field(default_factory=dict)  # source -> newest commit time seen
    #: Seconds per stage: 'apply' (replicas + propagation), 'fetch' (closure rows),
    #: 'recompute' (Spark SQL), 'commit' (Delta).
    timings: dict[str, float] = field(default_factory=dict)

    def _add(self, stage: str, since: float) -> float:
        now = time.monotonic()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - since
        return now


class Pipeline:
    """One pipeline spec running on one Spark session."""

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
        self.delta = delta or DeltaRsStore(
            file_bytes=spec.options.output_file_bytes, compact_after=spec.options.compact_after_files
        )
        self.on_batch = on_batch
        planned = plan_outputs(spec, tables)
        self.planned = planned
        self.tables = dict(planned.tables)
        self.plans: dict[str, OutputPlan] = dict(planned.plans)
        self.store = ReplicaStore(spec.replicas, planned.replica_tables())
        self.engine = SparkEngine(spark, self.tables)
        self.pks = {t: table.primary_key for t, table in self.tables.items()}
        self.sources_of = {name: planned.sources_of(name) for name in self.plans}
        self.query: Any = None
        #: The error the last micro-batch raised, if any.
        self.failure: BaseException | None = None
        self.history: list[BatchStats] = []
        #: Per source, the cut every output reflects once its batch is published.
        self.progress: dict[str, Cut] = {}
        #: Per output: the cut of its last Delta version and when it was written.
        self._published: dict[str, tuple[dict[str, Cut], float]] = {}
        self._check_outputs()

    def _check_outputs(self) -> None:
        """Before any batch: every output's SQL runs on Spark, and its Delta
        table belongs with this replica store."""
        for name, plan in self.plans.items():
            self.engine.empty_result(plan)  # fails now, not after a replica commit
            out = self.spec.outputs[name]
            done = self.delta.committed_batch(out.path, self._app_id(name))
            if done is not None and done > self.store.last_batch:
                raise ChangelogError(
                    f"output {name!r} at {out.path} already holds micro-batch {done}, but the replica store "
                    f"{self.store.path} is at batch {self.store.last_batch}: the table belongs to an "
                    "earlier run of this pipeline. Delete the table (it is rebuilt from the changelog) or "
                    "restore the "
                    "state directory it was built with",
                    output=name,
                    path=str(out.path),
                )

    def _app_id(self, output: str) -> str:
        return f"txjoin:{self.spec.name}:{output}"

    def _fingerprint(self, output: str) -> str:
        o = self.spec.outputs[output]
        return hashlib.sha256(json.dumps([o.sql, list(o.key)]).encode()).hexdigest()[:16]

    # -- streaming ----------------------------------------------------------
    def start(self, checkpoint: Path | None = None, *, available_now: bool = False) -> Any:
        """Start the streaming query (capture must be writing the changelog).

        ``available_now``: process what the changelog holds now, in as many
        micro-batches as Spark plans, then stop (see :meth:`run_available`).
        """
        self.failure = None
        cfg = AssemblerConfig(
            max_transaction_events=self.spec.options.max_transaction_events,
            incomplete_timeout=self.spec.options.incomplete_timeout,
            on_incomplete=self.spec.options.on_incomplete,  # type: ignore[arg-type]
        )
        events = read_events(
            self.spark, ChangelogInput("files", self.spec.changelog), sorted(self.spec.sources)
        )
        released = assemble_stream(events, cfg)
        writer = released.writeStream.foreachBatch(self.process_batch).option(
            "checkpointLocation", str(checkpoint or self.spec.checkpoint)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.spec.options.trigger_interval)
        self.query = writer.queryName(f"txjoin_{self.spec.name}").start()
        return self.query

    def run_available(self, checkpoint: Path | None = None) -> None:
        """Process everything the changelog holds now, then stop; raise the query's error."""
        query = self.start(checkpoint, available_now=True)
        try:
            query.awaitTermination()
        except Exception as e:
            raise _unwrap(e, self.failure) from None
        finally:
            self.query = None
        if query.exception() is not None:
            raise _unwrap(query.exception(), self.failure)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def close(self) -> None:
        """Stop the query and close the replica store."""
        self.stop()
        self.store.close()

    def check(self) -> None:
        """Raise the query's error, if it stopped with one."""
        if self.query is not None and self.query.exception() is not None:
            raise _unwrap(self.query.exception(), self.failure)

    # -- one micro-batch ------------------------------------------------------
    def process_batch(self, df: Any, batch_id: int) -> None:
        """``foreachBatch``'s function: apply, recompute and publish one micro-batch."""
        try:
            self._process_batch(df, batch_id)
        except BaseException as e:
            self.failure = e  # Spark passes it on as text; keep the object for the caller
            raise

    def _process_batch(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        rows = df.toPandas() if not isinstance(df, pd.DataFrame) else df
        stats = BatchStats(batch_id)
        changes = self._changes(rows)
        stats.events = len(changes)
        stats.transactions = (
            int(rows[["source", "xid", "commit_lsn"]].drop_duplicates().shape[0]) if len(rows) else 0
        )
        store = self.store
        if batch_id <= store.last_batch:
            if batch_id < store.last_batch:
                raise ChangelogError(
                    f"Spark replays micro-batch {batch_id}, but the replica store {store.path} is already at "
                    f"batch {store.last_batch}: the checkpoint and the replica store do not belong together. "
                    "Delete both (and the output tables) to rebuild from the changelog",
                )
            affected = store.pending(batch_id)
            cuts = store.cuts()
            stats.replayed = True
        else:
            if store.last_batch != batch_id - 1:
                raise ChangelogError(
                    f"micro-batch {batch_id} follows batch {store.last_batch} in the replica store "
                    f"{store.path}: "
                    "batches are missing, so the checkpoint and the replica store do not belong together. "
                    "Delete both (and the output tables) to rebuild from the changelog",
                )
            cuts = store.cuts()
            for source, g in rows.groupby("source") if len(rows) else []:
                last = g.loc[g["commit_lsn"].idxmax()]
                prev = cuts.get(str(source))
                cuts[str(source)] = Cut(
                    lsn=int(last["commit_lsn"]),
                    xid=int(last["xid"]),
                    transactions=int(last["tx_seq"]),
                    commit_ts_ms=int(last["commit_ts_ms"]),
                )
                if prev is not None and prev.lsn > int(last["commit_lsn"]):
                    raise ChangelogError(f"source {source!s}: released commit LSN went backwards")
            t0 = time.monotonic()
            affected = self._apply(changes, cuts)
            stats._add("apply", t0)
            store.commit(batch_id, affected, cuts)
            crash_point("after-replica-commit")
        for source, cut in cuts.items():
            stats.last_commit_ts_ms[source] = cut.commit_ts_ms or 0
        self._publish(batch_id, affected, cuts, stats)
        self.progress = dict(cuts)
        stats.seconds = time.monotonic() - started
        self.history.append(stats)
        if self.on_batch is not None:
            self.on_batch(stats)

    def _changes(self, rows: pd.DataFrame) -> list[Change]:
        out: list[Change] = []
        if not len(rows):
            return out
        for table, op, lsn, order, value, xid in zip(
            rows["table"],
            rows["op"],
            rows["commit_lsn"],
            rows["total_order"],
            rows["value"],
            rows["xid"],
            strict=True,
        ):
            name = parse_table_name(table)
            if name not in self.tables:
                continue  # captured but not used by any output
            rec = parse_record(value)
            before, after = rec.get("before"), rec.get("after")
            used = self.planned.used_columns(name)
            if after is not None:
                missing = used - set(after)
                if missing:
                    raise SchemaChangeError(
                        f"transaction {xid} changes {name} without column(s) {sorted(missing)}, "
                        "which an output "
                        "reads: the column was dropped or renamed at the source. Nothing after the last good "
                        "transaction was committed; restore the column or start a new pipeline",
                        table=str(name),
                        xid=int(xid),
                        columns=sorted(missing),
                    )
            out.append(Change(name, str(op), int(lsn), int(order), before, after, int(xid)))
        return out

    def _apply(self, changes: list[Change], cuts: dict[str, Cut]) -> dict[str, list[list[Any]] | None]:
        store = self.store
        store.begin()
        try:
            touched = touched_keys(changes, self.pks)
            old: dict[str, set[str] | None] = {}
            for name, plan in self.plans.items():
                if self.spec.options.propagate_before_images:
                    old[name] = affected_partitions(plan, store, touched, old_state=True)
                else:
                    old[name] = set()
            store.apply(changes)
            affected: dict[str, list[list[Any]] | None] = {}
            initialized = store.meta("initialized", {})
            if isinstance(initialized, list):  # written by an earlier version
                initialized = {n: self._fingerprint(n) for n in initialized if n in self.plans}
            for name, plan in self.plans.items():
                ready = all(src in cuts for src in self.sources_of[name])
                if not ready:
                    continue  # wait until every source of the output has released its snapshot
                path = self.spec.outputs[name].path
                if initialized.get(name) != self._fingerprint(name) or not self.delta.exists(path):
                    if name in initialized:
                        log.warning(
                            "output %s: its SQL or key changed, or its table %s is missing: rebuilding it "
                            "in full at this batch's cut",
                            name,
                            path,
                        )
                    affected[name] = None  # every partition, in one overwrite
                    initialized[name] = self._fingerprint(name)
                    continue
                new = affected_partitions(plan, store, touched, old_state=False)
                o = old[name]
                if o is None or new is None:
                    affected[name] = None
                elif o or new:
                    affected[name] = [json.loads(p) for p in sorted(o | new)]
            store._set_meta("initialized", initialized)
        except BaseException:
            store.rollback()
            raise
        return affected

    def _publish(
        self,
        batch_id: int,
        affected: dict[str, list[list[Any]] | None],
        cuts: dict[str, Cut],
        stats: BatchStats,
    ) -> None:
        now = time.monotonic()
        for name, parts in affected.items():
            plan = self.plans[name]
            out = self.spec.outputs[name]
            app_id = self._app_id(name)
            done = self.delta.committed_batch(out.path, app_id)
            if done is not None and done >= batch_id:
                continue  # this batch's commit is already there (a replay)
            keys = None if parts is None else {encode(p) for p in parts}
            t0 = time.monotonic()
            rows = closure(plan, self.store, keys)
            t0 = stats._add("fetch", t0)
            result = self.engine.run(plan, rows)
            t0 = stats._add("recompute", t0)
            if keys is not None:
                result = _only_partitions(plan, result, keys)
            _check_unique(plan, result)
            cut = {s: c for s, c in cuts.items() if s in self.sources_of[name]}
            version = self.delta.replace_partitions(
                out.path,
                result,
                key=plan.key,
                partition_cols=plan.partition_cols,
                partitions=None if parts is None else self._typed(plan, parts),
                cut=cut,
                batch=batch_id,
                app_id=app_id,
            )
            stats._add("commit", t0)
            stats.commits[name] = version
            self._published[name] = (cut, now)
            crash_point("after-output-commit")
            stats.partitions[name] = -1 if parts is None else len(parts)
        self._advance_idle(batch_id, affected, cuts, stats, now)

    def _typed(self, plan: OutputPlan, parts: list[list[Any]]) -> list[list[Any]]:
        """Partition values as Python values of their column types (from Debezium's JSON)."""
        types = self.tables[plan.aliases[plan.anchor].name].types
        ctypes = [types[c] for c in plan.anchor_cols]
        return [[from_debezium(v, t) for v, t in zip(p, ctypes, strict=True)] for p in parts]

    def _advance_idle(
        self,
        batch_id: int,
        affected: dict[str, list[list[Any]] | None],
        cuts: dict[str, Cut],
        stats: BatchStats,
        now: float,
    ) -> None:
        """Outputs the batch did not change still move to the new cut, at most
        every ``idle_commit_interval`` seconds, with a commit that changes no
        rows: readers see how fresh they are, and a quiet source converges."""
        interval = self.spec.options.idle_commit_interval
        for name in self.plans:
            if name in affected or not all(src in cuts for src in self.sources_of[name]):
                continue
            out = self.spec.outputs[name]
            cut = {s: c for s, c in cuts.items() if s in self.sources_of[name]}
            if name not in self._published:
                if not self.delta.exists(out.path):
                    continue
                history = self.delta.history(out.path)
                self._published[name] = (history[-1].cut if history else {}, 0.0)
            last_cut, at = self._published[name]
            if same_position(last_cut, cut) or now - at < interval:
                continue
            app_id = self._app_id(name)
            done = self.delta.committed_batch(out.path, app_id)
            if done is not None and done >= batch_id:
                continue
            stats.commits[name] = self.delta.advance(out.path, cut=cut, batch=batch_id, app_id=app_id)
            stats.partitions[name] = 0
            self._published[name] = (cut, now)


def _only_partitions(plan: OutputPlan, result: Any, keys: set[str]) -> Any:
    """Drop result rows outside the recomputed partitions.

    The SQL over a partition's rows can only produce that partition's rows;
    this guard keeps an over-fetch from overwriting rows of partitions that
    were not recomputed with partial data.
    """
    import pyarrow as pa

    if plan.mode != "root" and not plan.anchor:
        return result
    # Partition keys are Debezium-encoded; they compare with the result's
    # values as they are only for integers and strings (other types: no guard).
    types = [result.schema.field(c).type for c in plan.partition_cols]
    if not all(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        return result
    cols = result.select(list(plan.partition_cols)).to_pylist()
    mask = pa.array([encode([r[c] for c in plan.partition_cols]) in keys for r in cols], type=pa.bool_())
    return result.filter(mask)


def _check_unique(plan: OutputPlan, result: Any) -> None:
    if result.num_rows < 2:
        return
    keys = result.select(list(plan.key)).to_pylist()
    seen: set[tuple[Any, ...]] = set()
    for k in keys:
        t = tuple(k.values())
        if t in seen:
            raise TxJoinError(
                f"output {plan.name!r}: key {list(plan.key)} is not unique: "
                f"{dict(zip(plan.key, t, strict=True))} "
                "appears more than once. Add columns to the key so each output row has its own",
                output=plan.name,
            )
        seen.add(t)


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
