"""The join stage's part of a micro-batch: replicas, affected partitions, recompute.

:meth:`JoinStage.apply` turns the released rows (whole transactions, commit
order per source) into :class:`~txjoin.join.replica.Change` objects and, in
ONE replica-store transaction, finds the output partitions they reach over
the replicas as they were (before-images), applies them version-monotonically,
finds the partitions reached now, and records them with the batch id and the
new cut. A replayed batch finds that work done and reads it back.

:meth:`JoinStage.recompute` fetches the rows some partitions need and runs
the output's SQL over them on Spark, then guards the result: only rows of
the recomputed partitions, one row per output key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from txjoin.cut import Cut
from txjoin.debezium.record import parse_record
from txjoin.debezium.values import from_debezium
from txjoin.errors import ChangelogError, SchemaChangeError, TxJoinError
from txjoin.faults import crash_point
from txjoin.join.engine import SparkEngine
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import Planned
from txjoin.join.propagate import affected_partitions, closure, touched_keys
from txjoin.join.replica import Change, ReplicaStore, encode
from txjoin.pg.names import parse_table_name
from txjoin.spec import PipelineSpec

__all__ = ["Affected", "Applied", "BatchStats", "JoinStage", "Recomputed"]

log = logging.getLogger(__name__)

#: Output -> the partitions a batch recomputes (encoded anchor values; None: all of them).
Affected = dict[str, list[list[Any]] | None]


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

    def add_time(self, stage: str, since: float) -> float:
        """Count the time since ``since`` (``time.monotonic()``) to ``stage``; return now."""
        now = time.monotonic()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - since
        return now


@dataclass(frozen=True)
class Applied:
    """A batch's effect, durable in the replica store before anything is published."""

    affected: Affected
    #: Per source, the cut the outputs reach once the batch is published.
    cuts: dict[str, Cut]


@dataclass(frozen=True)
class Recomputed:
    """An output's new rows for some partitions, and those partitions as typed values."""

    rows: pa.Table
    #: The partitions' anchor values as Python values of their column types (None: all).
    partitions: list[list[Any]] | None


class JoinStage:
    """The replicas and the recompute of a pipeline's outputs."""

    def __init__(self, spec: PipelineSpec, spark: Any, planned: Planned) -> None:
        self.spec = spec
        self.planned = planned
        self.plans = planned.plans
        self.store = ReplicaStore(spec.replicas, planned.replica_tables())
        self.engine = SparkEngine(spark, planned.tables)
        self._pks = {t: table.primary_key for t, table in planned.tables.items()}

    def check_plans(self) -> None:
        """Run every output's SQL over no rows: fails before any replica commit."""
        for plan in self.plans.values():
            self.engine.empty_result(plan)

    def fingerprint(self, output: str) -> str:
        """Changes when the output's SQL or key does (the output is then rebuilt)."""
        o = self.spec.outputs[output]
        return hashlib.sha256(json.dumps([o.sql, list(o.key)]).encode()).hexdigest()[:16]

    def close(self) -> None:
        self.store.close()

    # -- apply ------------------------------------------------------------------
    def apply(
        self, rows: pd.DataFrame, batch_id: int, stats: BatchStats, *, table_exists: Callable[[str], bool]
    ) -> Applied:
        """Apply a batch's released rows to the replicas (or read a replayed batch back).

        ``table_exists(output)`` says whether the output's table is there; a
        missing one is rebuilt in full at this batch's cut.
        """
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
            stats.replayed = True
            applied = Applied(store.pending(batch_id), store.cuts())
        else:
            if store.last_batch != batch_id - 1:
                raise ChangelogError(
                    f"micro-batch {batch_id} follows batch {store.last_batch} in the replica store "
                    f"{store.path}: "
                    "batches are missing, so the checkpoint and the replica store do not belong together. "
                    "Delete both (and the output tables) to rebuild from the changelog",
                )
            cuts = _advance(store.cuts(), rows)
            t0 = time.monotonic()
            affected = self._apply(changes, cuts, table_exists)
            stats.add_time("apply", t0)
            store.commit(batch_id, affected, cuts)
            crash_point("after-replica-commit")
            applied = Applied(affected, cuts)
        for source, cut in applied.cuts.items():
            stats.last_commit_ts_ms[source] = cut.commit_ts_ms or 0
        return applied

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
            if name not in self.planned.tables:
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

    def _apply(
        self, changes: list[Change], cuts: dict[str, Cut], table_exists: Callable[[str], bool]
    ) -> Affected:
        store = self.store
        store.begin()
        try:
            touched = touched_keys(changes, self._pks)
            old: dict[str, set[str] | None] = {}
            for name, plan in self.plans.items():
                if self.spec.options.propagate_before_images:
                    old[name] = affected_partitions(plan, store, touched, old_state=True)
                else:
                    old[name] = set()
            store.apply(changes)
            affected: Affected = {}
            initialized = store.meta("initialized", {})
            if isinstance(initialized, list):  # written by an earlier version
                initialized = {n: self.fingerprint(n) for n in initialized if n in self.plans}
            for name, plan in self.plans.items():
                ready = all(src in cuts for src in self.planned.sources_of(name))
                if not ready:
                    continue  # wait until every source of the output has released its snapshot
                if initialized.get(name) != self.fingerprint(name) or not table_exists(name):
                    if name in initialized:
                        log.warning(
                            "output %s: its SQL or key changed, or its table %s is missing: rebuilding it "
                            "in full at this batch's cut",
                            name,
                            self.spec.outputs[name].path,
                        )
                    affected[name] = None  # every partition, in one overwrite
                    initialized[name] = self.fingerprint(name)
                    continue
                new = affected_partitions(plan, store, touched, old_state=False)
                o = old[name]
                if o is None or new is None:
                    affected[name] = None
                elif o or new:
                    affected[name] = [json.loads(p) for p in sorted(o | new)]
            store.set_meta("initialized", initialized)
        except BaseException:
            store.rollback()
            raise
        return affected

    # -- recompute ----------------------------------------------------------------
    def recompute(self, output: str, parts: list[list[Any]] | None, stats: BatchStats) -> Recomputed:
        """The output's rows for ``parts`` (None: all), guarded; timings go to ``stats``."""
        plan = self.plans[output]
        keys = None if parts is None else {encode(p) for p in parts}
        t0 = time.monotonic()
        rows = closure(plan, self.store, keys)
        t0 = stats.add_time("fetch", t0)
        result = self.engine.run(plan, rows)
        if keys is not None:
            result = _only_partitions(plan, result, keys)
        _check_unique(plan, result)
        stats.add_time("recompute", t0)
        return Recomputed(result, None if parts is None else self._typed(plan, parts))

    def _typed(self, plan: OutputPlan, parts: list[list[Any]]) -> list[list[Any]]:
        """Partition values as Python values of their column types (from Debezium's JSON)."""
        types = self.planned.tables[plan.aliases[plan.anchor].name].types
        ctypes = [types[c] for c in plan.anchor_cols]
        return [[from_debezium(v, t) for v, t in zip(p, ctypes, strict=True)] for p in parts]


def _advance(cuts: dict[str, Cut], rows: pd.DataFrame) -> dict[str, Cut]:
    """The cuts after a batch's released rows: per source, its last transaction."""
    cuts = dict(cuts)
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
    return cuts


def _only_partitions(plan: OutputPlan, result: pa.Table, keys: set[str]) -> pa.Table:
    """Drop result rows outside the recomputed partitions.

    The SQL over a partition's rows can only produce that partition's rows;
    this guard keeps an over-fetch from overwriting rows of partitions that
    were not recomputed with partial data.
    """
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


def _check_unique(plan: OutputPlan, result: pa.Table) -> None:
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
