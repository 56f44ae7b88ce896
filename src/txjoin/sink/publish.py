"""Publishing a micro-batch: one Delta commit per output, carrying the cut.

For each output the batch affects, :meth:`Publisher.publish` asks the join
stage for the recomputed partitions and replaces them in ONE commit whose
metadata holds the cut and whose app transaction ``(txjoin:<pipeline>:<output>,
batch id)`` makes a replay find it already there (replay skip). Outputs the
batch did not change still move to the new cut now and then, with a commit
that changes no rows (idle advance), so readers see how fresh they are and a
quiet source converges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from txjoin.cut import Cut, same_position
from txjoin.errors import ChangelogError, ValueNotRepresentable
from txjoin.faults import crash_point
from txjoin.join.batch import Applied, BatchStats, JoinStage, Recomputed
from txjoin.join.planned import Planned
from txjoin.join.replica import Partitions
from txjoin.sink.delta import DeltaStore
from txjoin.spec import PipelineSpec

log = logging.getLogger(__name__)

__all__ = ["Publisher", "Recomputer"]


class Recomputer(Protocol):
    """What publishing needs of the join stage (:class:`txjoin.join.batch.JoinStage`)."""

    #: The plans the batch was applied with (a resync or schema change replans).
    planned: Planned

    def recompute(self, output: str, parts: Partitions | None, stats: BatchStats) -> Recomputed:
        """The output's rows for ``parts`` (None: all), through the driver."""
        ...

    def recompute_together(
        self, wanted: Mapping[str, Partitions | None], stats: BatchStats
    ) -> dict[str, Recomputed]:
        """As :meth:`recompute` for several outputs at once; those left out are for :meth:`recompute`."""
        ...

    def distributed(self, output: str) -> bool:
        """Whether every partition of ``output`` is best recomputed by :meth:`recompute_files`."""
        ...

    def recompute_files(self, output: str, target: Path, stats: BatchStats) -> tuple[list[Path], pa.Schema]:
        """Every partition of ``output``, written by Spark as Parquet files in ``target``."""
        ...

    def hold(self, output: str, held: bool) -> None:
        """Mark ``output`` as holding at its last version (recomputed in full each batch until it
        publishes), or no longer holding."""
        ...


class Publisher:
    """Commits a pipeline's outputs to their Delta tables."""

    def __init__(self, spec: PipelineSpec, planned: Planned, delta: DeltaStore) -> None:
        self.spec = spec
        self.planned = planned
        self.delta = delta
        #: Per output: the cut of its last Delta version and when it was written.
        self._published: dict[str, tuple[dict[str, Cut], float]] = {}

    def app_id(self, output: str) -> str:
        """The Delta app transaction id of ``output``'s commits (its version is the batch id)."""
        return f"txjoin:{self.spec.name}:{output}"

    def table_exists(self, output: str) -> bool:
        return self.delta.exists(self.spec.outputs[output].path)

    def check_tables(self, last_batch: int, replicas: Any) -> None:
        """Refuse output tables that hold batches the replica store (at ``last_batch``) has not seen."""
        for name in self.planned.plans:
            out = self.spec.outputs[name]
            done = self.delta.committed_batch(out.path, self.app_id(name))
            if done is not None and done > last_batch:
                raise ChangelogError(
                    f"output {name!r} at {out.path} already holds micro-batch {done}, but the replica store "
                    f"{replicas} is at batch {last_batch}: the table belongs to an "
                    "earlier run of this pipeline. Delete the table (it is rebuilt from the changelog) or "
                    "restore the "
                    "state directory it was built with",
                    output=name,
                    path=str(out.path),
                )

    def _cut(self, output: str, cuts: dict[str, Cut]) -> dict[str, Cut]:
        sources = self.planned.sources_of(output)
        return {s: c for s, c in cuts.items() if s in sources}

    def _committed(self, output: str, batch_id: int) -> bool:
        done = self.delta.committed_batch(self.spec.outputs[output].path, self.app_id(output))
        return done is not None and done >= batch_id

    def publish(self, batch_id: int, applied: Applied, join: Recomputer, stats: BatchStats) -> None:
        """Commit every affected output (skipping commits a replay finds done), then idle advances."""
        now = time.monotonic()
        self.planned = join.planned
        # A replay skips the commits already there.
        todo = {n: p for n, p in applied.affected.items() if not self._committed(n, batch_id)}
        small = {n: p for n, p in todo.items() if not (p is None and join.distributed(n))}
        together = join.recompute_together(small, stats) if len(small) > 1 else {}
        for name, parts in todo.items():
            cut = self._cut(name, applied.cuts)
            try:
                version = self._commit(name, parts, batch_id, cut, join, stats, together.pop(name, None))
            except ValueNotRepresentable as e:
                # Every version must equal PostgreSQL at its cut: no version until the value changes.
                log.warning("output %s holds at its last version: %s", name, e.message)
                join.hold(name, True)
                stats.held.append(name)
                continue
            join.hold(name, False)
            stats.commits[name] = version
            self._published[name] = (cut, now)
            crash_point("after-output-commit")
            stats.partitions[name] = -1 if parts is None else parts.num_rows
        self._advance_idle(batch_id, applied, stats, now)

    def build_stale(self, join: JoinStage) -> None:
        """On start: outputs added to the spec, or whose SQL or key changed, are built from the
        replicas at their current cut (under the batch id they last applied), each in one
        commit, rather than when the next change arrives."""
        batch_id, cuts = join.store.last_batch, join.store.cuts()
        for name in join.stale_outputs(self.table_exists):
            cut = self._cut(name, cuts)
            # Files in a directory of their own: batch_id's may hold the table's current files.
            tag = f"-spec-{join.fingerprint(name)}"
            version = self._commit(name, None, batch_id, cut, join, BatchStats(batch_id), tag=tag)
            join.built(name)
            self._published[name] = (cut, time.monotonic())
            log.info("output %s built at the replicas' current cut: version %d", name, version)

    def _commit(
        self,
        name: str,
        parts: Partitions | None,
        batch_id: int,
        cut: dict[str, Cut],
        join: Recomputer,
        stats: BatchStats,
        recomputed: Recomputed | None = None,
        tag: str = "",
    ) -> int:
        plan = self.planned.plans[name]
        path = self.spec.outputs[name].path
        if parts is None and join.distributed(name):
            files, schema = join.recompute_files(name, path / f"txjoin-{batch_id:010d}{tag}", stats)
            crash_point("full-files-written")
            t0 = time.monotonic()
            version = self.delta.commit_files(
                path,
                files,
                schema,
                stats_columns=plan.partition_cols or plan.key,
                cut=cut,
                batch=batch_id,
                app_id=self.app_id(name),
            )
        else:
            result = recomputed if recomputed is not None else join.recompute(name, parts, stats)
            t0 = time.monotonic()
            version = self.delta.replace_partitions(
                path,
                result.rows,
                key=plan.key,
                partition_cols=plan.partition_cols,
                partitions=result.partitions,
                cut=cut,
                batch=batch_id,
                app_id=self.app_id(name),
            )
        stats.add_time("commit", t0)
        return version

    def _advance_idle(self, batch_id: int, applied: Applied, stats: BatchStats, now: float) -> None:
        """Outputs the batch did not change move to the new cut, at most every
        ``idle_commit_interval`` seconds, with a commit that changes no rows."""
        interval = self.spec.options.idle_commit_interval
        for name in self.planned.plans:
            sources = self.planned.sources_of(name)
            if (
                name in applied.affected
                or name in applied.waiting
                or not all(src in applied.cuts for src in sources)
            ):
                continue
            path = self.spec.outputs[name].path
            cut = self._cut(name, applied.cuts)
            if name not in self._published:
                if not self.delta.exists(path):
                    continue
                history = self.delta.history(path)
                self._published[name] = (history[-1].cut if history else {}, 0.0)
            last_cut, at = self._published[name]
            if same_position(last_cut, cut) or now - at < interval:
                continue
            if self._committed(name, batch_id):
                continue
            stats.commits[name] = self.delta.advance(path, cut=cut, batch=batch_id, app_id=self.app_id(name))
            stats.partitions[name] = 0
            self._published[name] = (cut, now)
