"""Drive transactions through the whole pipeline and check every Delta version.

One run (:func:`run_check`): capture starts on every source (its snapshot is
the first recorded state), then the workload's transactions run on a few
connections per source with their statements interleaved as the workload's
schedule says, commits one at a time through the :class:`Oracle`. At the
workload's trigger points the Spark query processes what the changelog
holds (each trigger is also a restart from the checkpoint). At the end every
version of every output is compared with the oracle at its cut, cuts must
never go back, and the last version must equal the sources' current result.

A statement that fails (a lock wait past ``lock_timeout``, a constraint)
rolls its transaction back: rolled-back transactions must leave no trace.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2

from txjoin.changelog import ChangelogReader
from txjoin.decode import ReaderKind
from txjoin.errors import TxJoinError
from txjoin.pipeline import Pipeline
from txjoin.runner import CaptureThreads
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import PipelineSpec
from txjoin.verify.compare import compare_rows
from txjoin.verify.oracle import Oracle, oracle_for
from txjoin.verify.replay import read_transactions
from txjoin.verify.versions import Violation, check_versions

__all__ = ["CheckResult", "Outcomes", "Statement", "TxPlan", "Workload", "run_check", "run_workload"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Statement:
    sql: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class TxPlan:
    source: str
    statements: tuple[Statement, ...]
    rollback: bool = False


@dataclass(frozen=True)
class Workload:
    transactions: tuple[TxPlan, ...]
    #: Connections per source running transactions at once.
    connections: int = 1
    #: Which open transaction takes the next step (modulo the open ones).
    schedule: tuple[int, ...] = ()
    #: Commit counts after which a micro-batch is triggered (one more at the end;
    #: 0: right after the snapshot, before any transaction).
    triggers: frozenset[int] = field(default_factory=frozenset)


@dataclass
class Outcomes:
    """What became of a workload's transactions."""

    committed: int = 0
    #: Rolled back on purpose (the workload says so).
    rolled_back: int = 0
    #: Failed on a constraint (SQLSTATE class 23): generation did not fit the schema.
    constraint: int = 0
    #: Failed waiting for a lock, on a deadlock or a serialization failure: concurrency.
    lock: int = 0
    #: Failed otherwise (a value out of range, ...).
    other: int = 0
    #: The first message of each failure kind, for the report.
    examples: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return self.constraint + self.lock + self.other

    def fail(self, e: psycopg2.Error) -> None:
        code = e.pgcode or ""
        kind = "constraint" if code.startswith("23") else "lock" if code in _LOCK_CODES else "other"
        setattr(self, kind, getattr(self, kind) + 1)
        self.examples.setdefault(kind, (str(e).strip().splitlines() or [""])[0])


_LOCK_CODES = ("55P03", "40P01", "40001")


@dataclass
class CheckResult:
    committed: int = 0
    rolled_back: int = 0
    outcomes: Outcomes = field(default_factory=Outcomes)
    versions: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Open:
    index: int
    plan: TxPlan
    step: int = 0
    xid: int | None = None
    changed: bool = False


def run_workload(
    dsns: Mapping[str, str],
    workload: Workload,
    oracle: Oracle,
    on_commit: Callable[[int, list[tuple[str, int]]], None] | None = None,
    *,
    lock_timeout_ms: int = 100,
) -> tuple[list[tuple[str, int]], Outcomes]:
    """Run ``workload``; return (source, xid) of committed transactions that changed rows, and
    what became of every transaction."""
    conns: dict[tuple[str, int], Any] = {}
    for source, dsn in dsns.items():
        for i in range(workload.connections):
            c = psycopg2.connect(dsn)
            with c.cursor() as cur:
                # One thread drives every connection: a statement waiting for
                # another's lock would wait forever, so it fails instead.
                cur.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
            c.commit()
            conns[(source, i)] = c
    queue = list(enumerate(workload.transactions))
    slots: dict[tuple[str, int], _Open] = {}
    schedule = iter(workload.schedule)
    committed: list[tuple[str, int]] = []
    outcomes = Outcomes()
    commits = 0
    try:
        while queue or slots:
            for key in sorted(conns):
                if key not in slots:
                    nxt = next((q for q in queue if q[1].source == key[0]), None)
                    if nxt is not None:
                        queue.remove(nxt)
                        slots[key] = _Open(*nxt)
            if not slots:
                raise TxJoinError(
                    f"workload names sources without connections: {sorted({q[1].source for q in queue})}"
                )
            key = sorted(slots)[next(schedule, 0) % len(slots)]
            tx, conn = slots[key], conns[key]
            if tx.step < len(tx.plan.statements):
                st = tx.plan.statements[tx.step]
                try:
                    with conn.cursor() as cur:
                        if tx.xid is None:
                            cur.execute("SELECT (txid_current() % 4294967296)::bigint")
                            tx.xid = int(cur.fetchone()[0])
                        cur.execute(st.sql, st.args)
                        tx.changed |= cur.rowcount > 0 or st.sql.lstrip().upper().startswith("TRUNCATE")
                except psycopg2.Error as e:
                    log.debug("transaction %d failed: %s", tx.index, str(e).strip())
                    conn.rollback()
                    outcomes.fail(e)
                    del slots[key]
                    continue
                tx.step += 1
                continue
            del slots[key]
            if tx.plan.rollback:
                conn.rollback()
                outcomes.rolled_back += 1
                continue
            assert tx.xid is not None
            with oracle.commit(tx.plan.source, tx.xid):
                conn.commit()
            commits += 1
            outcomes.committed += 1
            if tx.changed:
                committed.append((tx.plan.source, tx.xid))
            if on_commit is not None:
                on_commit(commits, committed)
    finally:
        for c in conns.values():
            c.close()
    return committed, outcomes


def _ends(changelog: Path, source: str) -> list[int]:
    if not (changelog / f"{source}.transaction").exists():
        return []
    return [e.xid for e in read_transactions(ChangelogReader(changelog), source)]


def _wait_for(
    changelog: Path, xids: list[tuple[str, int]], captures: CaptureThreads, timeout: float
) -> list[tuple[str, int]]:
    """Wait until capture wrote ``xids``; those still missing after ``timeout`` (capture alive)."""
    want: dict[str, set[int]] = {}
    for s, x in xids:
        want.setdefault(s, set()).add(x)
    deadline = time.monotonic() + timeout
    while True:
        captures.check()
        have = {s: set(_ends(changelog, s)) for s in want}
        missing = [(s, x) for s, w in want.items() for x in sorted(w - have[s])]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.05)


def _lost(missing: list[tuple[str, int]], timeout: float) -> Violation:
    xids = ", ".join(f"{s} xid {x}" for s, x in missing[:5])
    return Violation(
        "(capture)",
        -1,
        {},
        f"{len(missing)} committed transactions that changed captured tables never reached the "
        f"changelog within {timeout:.0f} s while capture ran ({xids}): their changes were lost",
    )


def run_check(
    spec: PipelineSpec,
    spark: Any,
    workload: Workload,
    *,
    timeout: float = 120,
    lost_after: float = 30,
    capture_overrides: Mapping[str, Any] | None = None,
    changelog_reader: ReaderKind = "files",
) -> CheckResult:
    """One run of ``workload`` through capture, the pipeline and Delta, checked at every version.
    ``changelog_reader``: "offsets" reads the changelog as ``txjoin run`` does; "files" (Spark's file
    source) starts a query 0.4 s sooner, and a check starts one per trigger."""
    # Every batch moves every output to its cut (an idle commit where unchanged): the
    # versions to check then follow the workload's triggers, not the wall clock. Every version
    # stays in the Delta log until it is checked.
    opts = dataclasses.replace(spec.options, idle_commit_interval=0.0, output_log_retention="30 days")
    spec = dataclasses.replace(spec, options=opts)
    overrides = {"roll_interval": 0.02, "heartbeat_interval": 0.2, **(capture_overrides or {})}
    captures = CaptureThreads(spec, **overrides)
    result = CheckResult()
    pipeline: Pipeline | None = None
    oracle: Oracle | None = None
    captures.start(timeout)
    try:
        pipeline = Pipeline(spec, spark)
        pipeline.changelog_reader = changelog_reader
        oracle = oracle_for(spec, pipeline.plans)
        for s in spec.sources:
            oracle.record(s, _ends(spec.changelog, s)[0])  # the snapshot: nothing else commits now
        if 0 in workload.triggers:
            pipeline.run_available()
        p = pipeline

        lost: list[tuple[str, int]] = []

        def trigger(commits: int, committed: list[tuple[str, int]]) -> None:
            if commits in workload.triggers:
                # Once a transaction is lost the example has failed: no more long waits.
                wait = 0.5 if lost else lost_after
                pending = [c for c in committed if c not in lost]
                lost.extend(_wait_for(spec.changelog, pending, captures, wait))
                p.run_available()

        committed, result.outcomes = run_workload(
            {s.name: s.dsn for s in spec.sources.values()}, workload, oracle, trigger
        )
        result.rolled_back = result.outcomes.rolled_back
        result.committed = len(committed)
        wait = 0.5 if lost else lost_after
        lost.extend(_wait_for(spec.changelog, [c for c in committed if c not in lost], captures, wait))
        if lost:
            result.violations.append(_lost(lost, lost_after))
        pipeline.run_available()
        result.versions, found = check_versions(pipeline.plans, spec, oracle)
        result.violations += found
        delta = DeltaRsStore()
        for name, plan in pipeline.plans.items():
            path = spec.outputs[name].path
            if not delta.exists(path):
                continue
            diff = compare_rows(
                delta.read(path).to_pylist(),
                oracle.current(name),
                plan.columns,
                json_columns=plan.json_columns,
                unordered_columns=plan.unordered_columns,
            )
            if diff:
                last = delta.history(path)[-1]
                result.violations.append(
                    Violation(
                        name,
                        last.version,
                        last.cut,
                        "the last version differs from the source now:\n" + diff.describe(),
                    )
                )
        return result
    finally:
        if pipeline is not None:
            pipeline.close()
        if oracle is not None:
            oracle.close()
        captures.stop()
