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

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from txjoin import errors
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream
from txjoin.decode import ChangelogInput, read_events
from txjoin.delta_sink import DeltaRsStore, DeltaStore
from txjoin.errors import ChangelogError, SchemaChangeError, TxJoinError
from txjoin.faults import crash_point
from txjoin.join.engine import SparkEngine, TableSchema, load_schemas
from txjoin.join.plan import OutputPlan, plan_output
from txjoin.join.propagate import affected_partitions, closure, touched_keys
from txjoin.join.replica import Change, ReplicaStore, TableSpec
from txjoin.pg.names import QualifiedName, parse_table_name
from txjoin.spec import PipelineSpec

__all__ = ["BatchStats", "Pipeline", "parse_record"]

log = logging.getLogger(__name__)


def parse_record(value: str) -> dict[str, Any]:
    """A Debezium record's payload, plain or wrapped as {schema, payload}."""
    v = json.loads(value)
    if isinstance(v, dict) and "payload" in v and "schema" in v:
        p = v["payload"]
        return dict(p) if isinstance(p, dict) else {}
    return dict(v)


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


class Pipeline:
    """One pipeline spec running on one Spark session."""

    def __init__(
        self,
        spec: PipelineSpec,
        spark: Any,
        *,
        delta: DeltaStore | None = None,
        schemas: dict[QualifiedName, TableSchema] | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.spec = spec
        self.spark = spark
        self.delta = delta or DeltaRsStore()
        self.on_batch = on_batch
        if schemas is None:
            schemas = {}
            for s in spec.sources.values():
                schemas.update(load_schemas(s.dsn, s.name, s.tables))
        self.schemas = schemas
        infos = {t: sch.info for t, sch in schemas.items()}
        self.plans: dict[str, OutputPlan] = {
            name: plan_output(name, o.sql, o.key, infos) for name, o in spec.outputs.items()
        }
        indexed: dict[QualifiedName, set[str]] = {t: set() for t in schemas}
        arrays: dict[QualifiedName, set[str]] = {t: set() for t in schemas}
        for p in self.plans.values():
            for t, cols in p.index_columns().items():
                indexed[t] |= cols
            for t, cols in p.array_columns().items():
                arrays[t] |= cols
        self.store = ReplicaStore(
            spec.replicas,
            [
                TableSpec(
                    t,
                    sch.primary_key,
                    frozenset(
                        indexed[t] - set(sch.primary_key[:1]) if len(sch.primary_key) == 1 else indexed[t]
                    ),
                    frozenset(arrays[t]),
                )
                for t, sch in schemas.items()
            ],
        )
        self.engine = SparkEngine(spark, schemas)
        self.pks = {t: sch.primary_key for t, sch in schemas.items()}
        self.sources_of = {name: {schemas[t].source for t in p.tables} for name, p in self.plans.items()}
        self.query: Any = None
        #: The error the last micro-batch raised, if any.
        self.failure: BaseException | None = None
        self.history: list[BatchStats] = []
        #: Per source, the cut every output reflects once its batch is published.
        self.progress: dict[str, dict[str, Any]] = {}

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
            cuts: dict[str, Any] = store.meta("cuts", {})
            stats.replayed = True
        else:
            if store.last_batch != -1 and store.last_batch != batch_id - 1:
                raise ChangelogError(
                    f"micro-batch {batch_id} follows batch {store.last_batch} in the replica store "
                    f"{store.path}: "
                    "batches are missing, so the checkpoint and the replica store do not belong together. "
                    "Delete both (and the output tables) to rebuild from the changelog",
                )
            cuts = dict(store.meta("cuts", {}))
            for source, g in rows.groupby("source") if len(rows) else []:
                last = g.loc[g["commit_lsn"].idxmax()]
                prev = cuts.get(str(source), {})
                cuts[str(source)] = {
                    "lsn": int(last["commit_lsn"]),
                    "xid": int(last["xid"]),
                    "transactions": int(last["tx_seq"]),
                    "commit_ts_ms": int(last["commit_ts_ms"]),
                }
                if prev and int(prev["lsn"]) > int(last["commit_lsn"]):
                    raise ChangelogError(f"source {source!s}: released commit LSN went backwards")
            affected = self._apply(changes, cuts)
            store.commit(batch_id, affected, cuts)
            crash_point("after-replica-commit")
        for source, cut in cuts.items():
            stats.last_commit_ts_ms[source] = int(cut.get("commit_ts_ms", 0))
        self._publish(batch_id, affected, cuts, stats)
        self.progress = {k: dict(v) for k, v in cuts.items()}
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
            if name not in self.schemas:
                continue  # captured but not used by any output
            rec = parse_record(value)
            before, after = rec.get("before"), rec.get("after")
            used = self._used_columns(name)
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

    def _used_columns(self, table: QualifiedName) -> set[str]:
        cache = getattr(self, "_used_cache", None)
        if cache is None:
            cache = {}
            for p in self.plans.values():
                for alias, cols in p.used_columns.items():
                    cache.setdefault(p.aliases[alias].name, set()).update(cols)
            self._used_cache = cache
        used: set[str] = cache.get(table, set())
        return used

    def _apply(self, changes: list[Change], cuts: dict[str, Any]) -> dict[str, list[list[Any]] | None]:
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
            initialized = set(store.meta("initialized", []))
            for name, plan in self.plans.items():
                ready = all(src in cuts for src in self.sources_of[name])
                if not ready:
                    continue  # wait until every source of the output has released its snapshot
                if name not in initialized:
                    affected[name] = None  # first commit: every partition
                    initialized.add(name)
                    continue
                new = affected_partitions(plan, store, touched, old_state=False)
                o = old[name]
                if o is None or new is None:
                    affected[name] = None
                elif o or new:
                    affected[name] = [json.loads(p) for p in sorted(o | new)]
            store._set_meta("initialized", sorted(initialized))
        except BaseException:
            store.rollback()
            raise
        return affected

    def _publish(
        self,
        batch_id: int,
        affected: dict[str, list[list[Any]] | None],
        cuts: dict[str, Any],
        stats: BatchStats,
    ) -> None:
        for name, parts in affected.items():
            plan = self.plans[name]
            out = self.spec.outputs[name]
            app_id = f"txjoin:{self.spec.name}:{name}"
            done = self.delta.committed_batch(out.path, app_id)
            if done is not None and done >= batch_id:
                continue  # this batch's commit is already there (a replay)
            keys = None if parts is None else {json.dumps(p) for p in parts}
            rows = closure(plan, self.store, keys)
            result = self.engine.run(plan, rows)
            _check_unique(plan, result)
            cut = {s: c for s, c in cuts.items() if s in self.sources_of[name]}
            version = self.delta.replace_partitions(
                out.path,
                result,
                key=plan.key,
                partition_cols=plan.partition_cols,
                partitions=parts,
                cut=cut,
                batch=batch_id,
                app_id=app_id,
            )
            stats.commits[name] = version
            crash_point("after-output-commit")
            stats.partitions[name] = -1 if parts is None else len(parts)


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
