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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from txjoin.assemble.buffer import COMMIT_STAGED, LOAD
from txjoin.changelog.snapshots import Manifest, read_manifest
from txjoin.cut import Cut
from txjoin.errors import (
    ChangelogError,
    SchemaChangeError,
    TxJoinError,
    UnsupportedQuery,
    ValueNotRepresentable,
)
from txjoin.faults import crash_point, mutated
from txjoin.join.changes import parse_released, touched_of
from txjoin.join.engine import SparkEngine, spark_column
from txjoin.join.full import recompute_files
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import Planned, plan_outputs
from txjoin.join.propagate import affected_partitions, closure, distinct
from txjoin.join.replica import Partitions, ReplicaStore
from txjoin.join.schema_watch import SchemaWatch
from txjoin.join.tables import quote as _q
from txjoin.pg.catalog import column_from_json, column_to_json
from txjoin.pg.names import QualifiedName, parse_table_name
from txjoin.spec import PipelineSpec, memory

__all__ = ["Affected", "Applied", "BatchStats", "JoinStage", "Recomputed"]

log = logging.getLogger(__name__)

#: Output -> the partitions a batch recomputes (anchor values; None: all of them).
Affected = dict[str, Partitions | None]


@dataclass
class BatchStats:
    """What one micro-batch did, for progress displays and reports."""

    batch: int
    transactions: int = 0
    events: int = 0
    commits: dict[str, int] = field(default_factory=dict)  # output -> Delta version
    partitions: dict[str, int] = field(default_factory=dict)  # output -> partitions recomputed (-1: all)
    replayed: bool = False
    held: list[str] = field(default_factory=list)  # outputs holding on a value they cannot read
    seconds: float = 0.0
    last_commit_ts_ms: dict[str, int] = field(default_factory=dict)  # source -> newest commit time seen
    #: Seconds per stage: 'collect' (Spark: read, decode, assembly, rows to the driver),
    #: 'apply' (replicas + propagation), 'fetch' (closure rows), 'recompute' (Spark SQL), 'commit' (Delta).
    timings: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, since: float) -> float:
        """Count the time since ``since`` (``time.monotonic()``) to ``stage``; return now."""
        now = time.monotonic()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - since
        return now


@dataclass
class LoadProgress:
    """An initial load's progress in the join stage, per table (read while it runs)."""

    #: "apply" while snapshots are loaded into the replicas, "recompute" while outputs are computed.
    phase: str = ""
    total: dict[str, int] = field(default_factory=dict)
    applied: dict[str, int] = field(default_factory=dict)
    #: Output -> rows written by its full recompute.
    written: dict[str, int] = field(default_factory=dict)
    started: float = 0.0


@dataclass(frozen=True)
class Applied:
    """A batch's effect, durable in the replica store before anything is published."""

    affected: Affected
    #: Per source, the cut the outputs reach once the batch is published.
    cuts: dict[str, Cut]
    #: Outputs that stay at their last version: a resync of a table they read has not arrived.
    waiting: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Recomputed:
    """An output's new rows for some partitions, and those partitions as typed values."""

    rows: pa.Table
    #: The partitions' values in the output's partition columns, as Python values (None: all).
    partitions: list[tuple[Any, ...]] | None


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as tuples, column by column: a dict per row cost 12x as much."""
    if not table.num_columns:
        return [()] * table.num_rows
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


class JoinStage:
    """The replicas and the recompute of a pipeline's outputs."""

    def __init__(self, spec: PipelineSpec, spark: Any, planned: Planned) -> None:
        self.spec = spec
        self.planned = planned
        self.plans = planned.plans
        self.spark = spark
        mem = memory(spec.options)
        self.store = ReplicaStore(
            spec.replicas,
            planned.replica_tables(),
            memory_limit=mem.replica,
            threads=spec.options.spark_cores,
        )
        # A staged transaction is applied in steps of about one micro-batch's changelog bytes.
        self._chunk_bytes = mem.batch_bytes
        self.engine = SparkEngine(spark, planned.tables)
        self._used = planned.used_by_table()
        self.watch = SchemaWatch(spec.changelog, sorted(spec.sources), str(spec.path or "SPEC"))
        self._recorded: Planned | None = None  # the plan whose tables' columns the store holds
        #: The initial load's progress (progress displays).
        self.progress = LoadProgress()
        self._compute = duckdb.connect()  # Arrow-only work: the result guard
        self._held: set[str] | None = None  # the store's "held" list, read once

    def check_plans(self) -> None:
        """Run every output's SQL over no rows: fails before any replica commit."""
        for plan in self.plans.values():
            self.engine.empty_result(plan)

    def stale_outputs(self, table_exists: Callable[[str], bool]) -> list[str]:
        """Outputs to build at the replicas' current cut on start: added to the spec, or whose
        SQL or key changed since they were built (their sources' snapshots are in)."""
        store = self.store
        if store.last_batch < 0:
            return []
        cuts = store.cuts()
        known = store.meta("initialized", {})
        known = known if isinstance(known, dict) else {}
        waiting = set(self.watch.pending(list(store.meta("resynced", []))))
        return [
            name
            for name in self.plans
            if all(src in cuts for src in self.planned.sources_of(name))
            and not self.plans[name].tables & waiting  # built when the resync's copy arrives
            and (known.get(name) != self.fingerprint(name) or not table_exists(name))
        ]

    def built(self, output: str) -> None:
        """Record that ``output`` was built with the spec's current SQL and key."""
        known = self.store.meta("initialized", {})
        known = dict(known) if isinstance(known, dict) else {}
        known[output] = self.fingerprint(output)
        self.store.set_meta("initialized", known)

    def hold(self, output: str, held: bool) -> None:
        """Mark ``output`` as holding at its last version, or not: a held output is recomputed
        in full by every batch (and never advanced idly) until it publishes again."""
        if self._held is None:  # every published output calls this: one store read per run
            self._held = set(self.store.meta("held", []))
        if (output in self._held) != held:
            self._held = self._held | {output} if held else self._held - {output}
            self.store.set_meta("held", sorted(self._held))

    def fingerprint(self, output: str) -> str:
        """Changes when the output's SQL or key does (the output is then rebuilt)."""
        o = self.spec.outputs[output]
        return hashlib.sha256(json.dumps([o.sql, list(o.key)]).encode()).hexdigest()[:16]

    def close(self) -> None:
        self.store.close()
        self._compute.close()

    # -- apply ------------------------------------------------------------------
    def apply(
        self, rows: pd.DataFrame, batch_id: int, stats: BatchStats, *, table_exists: Callable[[str], bool]
    ) -> Applied:
        """Apply a batch's released rows to the replicas (or read a replayed batch back).

        ``table_exists(output)`` says whether the output's table is there; a
        missing one is rebuilt in full at this batch's cut.
        """
        staged = rows.loc[rows["tx_seq"] < 0] if len(rows) else rows
        rows = rows.loc[rows["tx_seq"] >= 0] if len(rows) else rows
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
            stats.events = int(rows["op"].isin(["c", "r", "u", "d", "t"]).sum()) if len(rows) else 0
            waiting = set(self.watch.pending(list(store.meta("resynced", []))))
            applied = Applied(
                self._replanned(store.pending(batch_id), table_exists), store.cuts(), self._waiting(waiting)
            )
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
            affected, waiting = self._apply(rows, staged, cuts, table_exists, stats)
            stats.add_time("apply", t0)
            store.commit(batch_id, affected, cuts)
            crash_point("after-replica-commit")
            applied = Applied(affected, cuts, self._waiting(waiting))
        for source, cut in applied.cuts.items():
            stats.last_commit_ts_ms[source] = cut.commit_ts_ms or 0
        return applied

    def _replanned(
        self, pending: dict[str, Partitions | None], table_exists: Callable[[str], bool]
    ) -> dict[str, Partitions | None]:
        """A replayed batch's outputs under the spec as it is now: an output removed from
        the spec is left as it is; one whose SQL or key changed since the batch was
        applied, or whose table is missing, is recomputed in full at the batch's cut
        (never the old batch's partitions under the new SQL: one version, one SQL)."""
        initialized = self.store.meta("initialized", {})
        out: dict[str, Partitions | None] = {}
        for name, parts in pending.items():
            if name not in self.plans:
                log.info("output %s is no longer in the spec: its table is left as it is", name)
                continue
            out[name] = parts
        known = initialized if isinstance(initialized, dict) else {}
        held = set(self.store.meta("held", []))
        for name in self.plans:
            if name in held or (
                name in known and (known[name] != self.fingerprint(name) or not table_exists(name))
            ):
                out[name] = None
        return out

    def _apply(
        self,
        rows: pd.DataFrame,
        staged: pd.DataFrame,
        cuts: dict[str, Cut],
        table_exists: Callable[[str], bool],
        stats: BatchStats,
    ) -> tuple[Affected, set[QualifiedName]]:
        store = self.store
        before = self.planned
        loads = rows.loc[rows["op"] == LOAD] if len(rows) else rows
        rows, waiting = self._schemas(rows, loads)
        store.begin()
        try:
            loaded, resynced = self._load(loads, stats)
            batches = parse_released(rows, store.tables, self._used)
            stats.events += sum(b.num_rows for b in batches.values())
            store.stage(staged)
            bulk = self._apply_staged(rows.loc[rows["op"] == COMMIT_STAGED] if len(rows) else rows, stats)
            touched = touched_of(batches, store.tables)
            old: dict[str, Partitions | None] = {}
            for name, plan in self.plans.items():
                if self.spec.options.propagate_before_images and not mutated("no-before-images"):
                    old[name] = affected_partitions(plan, store, touched, old_state=True)
                else:
                    old[name] = None if plan.mode == "group" and not plan.anchor else pa.table({})
            store.apply(batches)
            affected: Affected = {}
            initialized = store.meta("initialized", {})
            if isinstance(initialized, list):  # written by an earlier version
                initialized = {n: self.fingerprint(n) for n in initialized if n in self.plans}
            for name, plan in self.plans.items():
                sources = self.planned.sources_of(name)
                if not all(src in cuts for src in sources) or plan.tables & waiting:
                    # Wait until every source of the output has released its snapshot, and
                    # until a resync of one of its tables has arrived.
                    continue
                if sources & loaded or plan.tables & (bulk | resynced):
                    # A source's snapshot arrived, or a staged transaction changed the
                    # output's tables: every partition.
                    affected[name] = None
                    initialized[name] = self.fingerprint(name)
                    continue
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
                elif o.num_rows or new.num_rows:
                    both = [p for p in (o, new) if p.num_rows]
                    affected[name] = distinct(pa.concat_tables(both))
            for name in self.store.meta("held", []):
                if (
                    name in self.plans
                    and all(src in cuts for src in self.planned.sources_of(name))
                    and not self.plans[name].tables & waiting
                ):
                    affected[name] = None  # still holding: try again, in full, at this cut
            store.set_meta("initialized", initialized)
            self._record_schemas()
        except BaseException:
            store.rollback()
            self._recorded = None
            if self.planned is not before:
                self._set_planned(before)
            raise
        return affected, waiting

    def _waiting(self, tables: set[QualifiedName]) -> frozenset[str]:
        """The outputs that read one of ``tables``."""
        return frozenset(n for n, p in self.plans.items() if p.tables & tables)

    # -- schema changes and resyncs ---------------------------------------------------
    def _schemas(self, rows: pd.DataFrame, loads: pd.DataFrame) -> tuple[pd.DataFrame, set[QualifiedName]]:
        """Drop the changes resyncs supersede and absorb (or refuse) schema changes; the tables
        whose resync has not arrived yet (their outputs wait)."""
        applied = list(self.store.meta("resynced", []))
        pending = self.watch.pending(applied)
        in_batch: dict[QualifiedName, int] = {}
        for ref in loads["value"] if len(loads) else []:
            m = read_manifest(self.spec.changelog, str(ref))
            if m.resync is not None:
                t = parse_table_name(str(m.resync["table"]))
                in_batch[t] = max(in_batch.get(t, m.lsn), m.lsn)
        bounds = {t: p.lsn for t, p in pending.items()}
        for t, lsn in in_batch.items():
            bounds[t] = max(bounds.get(t, lsn), lsn)
        floors = {parse_table_name(t): int(v) for t, v in self.store.meta("floors", {}).items()}
        for t, lsn in floors.items():
            bounds[t] = max(bounds.get(t, lsn), lsn)
        rows = self.watch.superseded(rows, bounds)
        views = self.watch.check(
            rows,
            {t: tuple(self.planned.tables[t].columns) for t in self.store.tables},
            {t: self.planned.tables[t].source for t in self.store.tables},
            self._readers(),
            {t: spec.primary_key for t, spec in self.store.tables.items()},
        )
        if views:
            tables = dict(self.planned.tables)
            for t, cols in views.items():
                tables[t] = replace(tables[t], columns=cols)
            self._set_planned(plan_outputs(self.spec, tables))
        return rows, set(pending) - set(in_batch)

    def _readers(self) -> dict[QualifiedName, dict[str, list[str]]]:
        """Per table, column -> the outputs whose SQL reads it."""
        out: dict[QualifiedName, dict[str, list[str]]] = {}
        for name, plan in self.plans.items():
            for alias, cols in plan.used_columns.items():
                table = out.setdefault(plan.aliases[alias].name, {})
                for c in cols:
                    table.setdefault(c, []).append(name)
        return out

    def _set_planned(self, planned: Planned, replaced: QualifiedName | None = None) -> None:
        """Plan over changed tables: the plans, the engine's types and the store's views follow."""
        self.planned = planned
        self.plans = planned.plans
        self.engine = SparkEngine(self.spark, planned.tables)
        self._used = planned.used_by_table()
        for spec in planned.replica_tables():
            if spec.name == replaced:
                self.store.replace_table(spec)
            else:
                self.store.set_view(spec)

    def _record_schemas(self) -> None:
        """Keep the store's view of every table's columns (what later starts plan with): once per
        plan, not every batch (a rolled-back batch clears ``_recorded``)."""
        if self._recorded is self.planned:
            return
        known = self.store.meta("schemas", {})
        now = {str(t): [column_to_json(c) for c in table.columns] for t, table in self.planned.tables.items()}
        if known != now:
            self.store.set_meta("schemas", {**known, **now})
        self._recorded = self.planned

    def _resync(self, manifest: Manifest, ref: str, stats: BatchStats) -> QualifiedName:
        """Replace a table's replica with a resync's copy (its columns as they are now), replan."""
        assert manifest.resync is not None
        name = parse_table_name(str(manifest.resync["table"]))
        if name not in self.planned.tables:
            return name  # no longer read by this spec
        columns = tuple(column_from_json(c) for c in manifest.resync["columns"])
        tables = dict(self.planned.tables)
        tables[name] = replace(tables[name], columns=columns)
        try:
            planned = plan_outputs(self.spec, tables)
        except UnsupportedQuery as e:
            raise SchemaChangeError(
                f"after the resync of {name} (its columns changed at the source), {e}. Change the output's "
                f"SQL in {self.spec.path or 'the spec'}, then txjoin run again: the resync is applied then",
                table=str(name),
            ) from None
        self._set_planned(planned, replaced=name)
        n = 0
        for f in manifest.files.get(str(name), []):
            n += self.store.load_parquet(name, [f], manifest.lsn, first=n)
            crash_point("load-file")
        if n != manifest.rows[str(name)]:
            raise ChangelogError(
                f"the resync {ref} lists {manifest.rows[str(name)]} rows of {name}, but its files hold {n}: "
                f"it is damaged. Run txjoin resync again for {name}",
                table=str(name),
            )
        floors = dict(self.store.meta("floors", {}))
        floors[str(name)] = max(int(floors.get(str(name), 0)), manifest.lsn)
        self.store.set_meta("floors", floors)
        self.store.set_meta("resynced", [*self.store.meta("resynced", []), ref])
        stats.events += n
        log.warning(
            "%s: resynced: %d rows at LSN %s; rebuilding the outputs that read it", name, n, manifest.lsn
        )
        return name

    def _apply_staged(self, commits: pd.DataFrame, stats: BatchStats) -> set[QualifiedName]:
        """Apply each staged transaction ``commits`` names, in chunks; the tables it changed."""
        changed: set[QualifiedName] = set()
        for _, c in commits.iterrows():
            source, xid = str(c["source"]), int(c["xid"])
            n = 0
            t0 = time.monotonic()
            chunks = self.store.staged(source, xid, self.spec.options.stage_chunk_rows, self._chunk_bytes)
            for chunk in chunks:
                chunk = chunk.assign(
                    source=source,
                    commit_lsn=int(c["commit_lsn"]),
                    commit_ts_ms=int(c["commit_ts_ms"]),
                    tx_seq=int(c["tx_seq"]),
                )
                parsed = parse_released(chunk, self.store.tables, self._used)
                self.store.apply(parsed, bulk=True)
                changed |= set(parsed)
                n += len(chunk)
                crash_point("staged-chunk")
            if n != int(c["tx_events"]):
                raise ChangelogError(
                    f"staged transaction {xid} of source {source} has {n} events in the replica store but "
                    f"its END counts {int(c['tx_events'])}: the store and the checkpoint do not belong "
                    "together. Delete both (and the output tables) to rebuild from the changelog",
                    xid=xid,
                )
            self.store.unstage(source, xid)
            stats.events += n
            log.info(
                "source %s: applied staged transaction %d (%d events) in %.1f s",
                source,
                xid,
                n,
                time.monotonic() - t0,
            )
        return changed

    def _load(self, loads: pd.DataFrame, stats: BatchStats) -> tuple[set[str], set[QualifiedName]]:
        """Bulk-load the columnar snapshots named by ``loads``' rows; the sources loaded, and the
        tables resynced."""
        done: set[str] = set()
        resynced: set[QualifiedName] = set()
        manifests = []
        for source, ref in zip(loads["source"], loads["value"], strict=True):
            m = read_manifest(self.spec.changelog, str(ref))
            if m.resync is not None:
                resynced.add(self._resync(m, str(ref), stats))
            else:
                manifests.append((str(source), str(ref), m))
        if manifests:
            self.progress = LoadProgress("apply", started=time.monotonic())
            for _, _, m in manifests:
                self.progress.total.update(m.rows)
        for source, ref, manifest in manifests:
            for table_text, files in manifest.files.items():
                name = parse_table_name(table_text)
                if name not in self.store.tables:
                    continue  # captured but not used by any output
                t0 = time.monotonic()
                n = 0
                for f in files:  # file by file: progress shows as it goes
                    n += self.store.load_parquet(name, [f], manifest.lsn, first=n)
                    self.progress.applied[table_text] = n
                    crash_point("load-file")
                log.info(
                    "source %s: loaded %d rows of %s into the replicas in %.1f s",
                    source,
                    n,
                    name,
                    time.monotonic() - t0,
                )
                if n != manifest.rows[table_text]:
                    raise ChangelogError(
                        f"the snapshot {ref} of source {source} lists {manifest.rows[table_text]} rows of "
                        f"{name}, but its files hold {n}: the snapshot is damaged. Capture again into an "
                        "empty changelog",
                        table=str(name),
                    )
                stats.events += n
            done.add(source)
        if manifests:
            self.progress.phase = "recompute"
        return done, resynced

    # -- recompute ----------------------------------------------------------------
    def recompute(self, output: str, parts: Partitions | None, stats: BatchStats) -> Recomputed:
        """The output's rows for ``parts`` (None: all), guarded; timings go to ``stats``."""
        plan = self.plans[output]
        t0 = time.monotonic()
        rows = closure(plan, self.store, parts)
        t0 = stats.add_time("fetch", t0)
        recomputed = self._guarded(plan, parts, self.engine.run(plan, rows))
        stats.add_time("recompute", t0)
        return recomputed

    def recompute_together(
        self, wanted: Mapping[str, Partitions | None], stats: BatchStats
    ) -> dict[str, Recomputed]:
        """Several outputs' small recomputes in one Spark query (:meth:`SparkEngine.run_many`). The
        outputs left out are for :meth:`recompute`: rows past the engine's limit for one query (their
        closures are fetched twice), a value Spark cannot hold, a query Spark refuses."""
        t0 = time.monotonic()
        work: dict[str, tuple[OutputPlan, dict[str, pa.Table]]] = {}
        rows = nbytes = 0
        for name, parts in wanted.items():
            plan = self.plans[name]
            if parts is None and sum(self.store.count(t) for t in plan.tables) > self.engine.combine_rows:
                continue
            try:
                views = self.engine.views(plan, closure(plan, self.store, parts))
            except ValueNotRepresentable:
                continue
            n, b = sum(t.num_rows for t in views.values()), sum(t.nbytes for t in views.values())
            if self.engine.small(rows + n, nbytes + b):
                work[name] = (plan, views)
                rows, nbytes = rows + n, nbytes + b
        t0 = stats.add_time("fetch", t0)
        out = {}
        for name, result in self.engine.run_many(work).items():
            try:
                out[name] = self._guarded(self.plans[name], wanted[name], result)
            except ValueNotRepresentable:
                continue
        stats.add_time("recompute", t0)
        return out

    def _guarded(self, plan: OutputPlan, parts: Partitions | None, result: pa.Table) -> Recomputed:
        """``result`` without rows outside ``parts``, its key checked unique."""
        typed = None if parts is None else self._typed(plan, parts)
        if typed is not None and (plan.mode == "root" or plan.anchor):
            result = self._only_partitions(plan, result, typed)
        _check_unique(plan, result)
        return Recomputed(result, None if typed is None else _tuples(typed))

    def distributed(self, output: str) -> bool:
        """Whether recomputing every partition of ``output`` runs as one Spark job over exports."""
        plan = self.plans[output]
        return sum(self.store.count(t) for t in plan.tables) >= self.spec.options.distributed_rows

    def recompute_files(self, output: str, target: Path, stats: BatchStats) -> tuple[list[Path], pa.Schema]:
        """Every partition of ``output``, computed by Spark into Parquet files in ``target``."""
        t0 = time.monotonic()
        files, schema, rows = recompute_files(
            self.spark,
            self.plans[output],
            self.store,
            dict(self.planned.tables),
            self.spec.state_dir / "tmp" / f"full-{output}",
            target,
            rows_per_file=max(10_000, self.spec.options.output_file_bytes // 64),
        )
        stats.add_time("recompute", t0)
        self.progress.written[output] = rows
        seconds = time.monotonic() - t0
        log.info("output %s: recomputed in full on Spark: %d rows in %.1f s", output, rows, seconds)
        return files, schema

    def _typed(self, plan: OutputPlan, parts: Partitions) -> pa.Table:
        """Partitions in the output's partition columns and types (as the SQL's result has them)."""
        if not plan.anchor:
            return pa.table({})
        table = self.planned.tables[plan.aliases[plan.anchor].name]
        types = table.types
        arrays = [spark_column(parts.column(c), types[c], table.name, c) for c in plan.anchor_cols]
        return pa.Table.from_arrays(arrays, names=list(plan.partition_cols))

    def _only_partitions(self, plan: OutputPlan, result: pa.Table, typed: pa.Table) -> pa.Table:
        """Drop result rows outside the recomputed partitions.

        The SQL over a partition's rows can only produce that partition's rows;
        this guard keeps an over-fetch from overwriting rows of partitions that
        were not recomputed with partial data.
        """
        if result.num_rows == 0:
            return result
        kept = in_partitions(result, typed, plan.partition_cols)
        return semi_join(self._compute, result, typed, plan.partition_cols) if kept is None else kept


def in_partitions(result: pa.Table, typed: pa.Table, cols: Sequence[str]) -> pa.Table | None:
    """``result``'s rows whose partition is a row of ``typed`` (NULL matching NULL), by Arrow set
    membership: 0.1 ms where DuckDB's semi join takes 7 (bench/NOTES.md). None where membership
    could differ from SQL's IS NOT DISTINCT FROM: several columns, other types (-0.0, NaN)."""
    if len(cols) != 1:
        return None
    values, wanted = result.column(cols[0]), typed.column(cols[0])
    t = values.type
    exact = (
        pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_date(t)
    )
    if t != wanted.type or not exact:
        return None
    return result.filter(pc.is_in(values, value_set=wanted.combine_chunks(), skip_nulls=False))


def semi_join(
    con: duckdb.DuckDBPyConnection, result: pa.Table, typed: pa.Table, cols: Sequence[str]
) -> pa.Table:
    """``result``'s rows whose partition is a row of ``typed``, matched with IS NOT DISTINCT FROM."""
    con.register("res", result)
    con.register("parts", typed)
    try:
        on = " AND ".join(f"res.{_q(c)} IS NOT DISTINCT FROM parts.{_q(c)}" for c in cols)
        sql = f"SELECT res.* FROM res SEMI JOIN parts ON {on}"  # noqa: S608 (quoted names)
        rel = con.sql(sql)
        assert rel is not None
        kept: pa.Table = rel.to_arrow_table()
    finally:
        con.unregister("res")
        con.unregister("parts")
    return kept.cast(result.schema)


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


def _check_unique(plan: OutputPlan, result: pa.Table) -> None:
    if result.num_rows < 2:
        return
    keys = result.select(list(plan.key))
    counts = keys.group_by(list(plan.key), use_threads=False).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        first = {k: dup.column(k)[0].as_py() for k in plan.key}
        raise TxJoinError(
            f"output {plan.name!r}: key {list(plan.key)} is not unique: {first} "
            "appears more than once. Add columns to the key so each output row has its own",
            output=plan.name,
        )
