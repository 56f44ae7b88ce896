"""``txjoin scenario run``: one scenario end to end, checked at every version.

1. A fresh database per source (and one for the naive baseline) on the
   embedded PostgreSQL, or on the server ``--dsn`` names; the scenario's
   schema and seed data.
2. Capture for every source, the Spark pipeline (streaming), the naive
   baseline, and the oracle.
3. Several concurrent clients run the workload; every commit is recorded
   by the oracle.
4. Once the outputs have caught up with the last commit, everything stops
   and every Delta version of every output is compared with the SQL on
   PostgreSQL at its cut (and with the scenario's invariants); the naive
   baseline's versions are checked too, and its torn ones counted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions

from txjoin.changelog import ChangelogReader
from txjoin.cut import Cut
from txjoin.debezium.envelope import parse_tx_id
from txjoin.errors import TxJoinError
from txjoin.join.plan import OutputPlan
from txjoin.pg import admin
from txjoin.pipeline import Pipeline
from txjoin.runner import CaptureProcesses
from txjoin.scenario.definition import Scenario
from txjoin.scenario.naive import NaiveBaseline, applied_transactions
from txjoin.scenario.workload import Clients, Committed
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import PipelineSpec, load_spec
from txjoin.verify.compare import normalize
from txjoin.verify.oracle import Oracle, oracle_for
from txjoin.verify.replay import TxEnd, read_transactions
from txjoin.verify.versions import check_versions

__all__ = ["Point", "Report", "run_scenario"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Point:
    """One Delta version on the scenario's timeline."""

    side: str  # 'txjoin' or 'naive'
    output: str
    version: int
    t_ms: int  # when the version was committed
    ok: bool  # equal to the SQL at a real state of the sources (and keeps the invariants)
    value: float | None  # the scenario's metric of the version, if it has one


@dataclass
class Report:
    scenario: str
    transactions: int = 0
    aborted: int = 0
    events: int = 0
    versions_checked: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    naive_versions: int = 0
    naive_torn: int = 0
    naive_invariant_violations: int = 0
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    events_per_s: float = 0.0
    seconds: float = 0.0
    micro_batches: int = 0
    #: Median seconds per micro-batch that committed, by stage.
    batch_stages_s: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    naive_outputs: dict[str, str] = field(default_factory=dict)
    #: (commit time, seconds until visible) per transaction, for benchmarks; not in the JSON.
    latency_series: list[tuple[float, float]] = field(default_factory=list, repr=False)
    #: Per Delta version of txjoin and of the naive baseline: what ``--plot`` draws; not in the JSON.
    timeline: list[Point] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("latency_series")
        d.pop("timeline")
        d["ok"] = self.ok
        return json.dumps(d, indent=2)

    def render(self) -> str:
        lat = (
            "n/a"
            if self.latency_p50_s is None
            else f"p50 {self.latency_p50_s:.2f} s, p99 {self.latency_p99_s:.2f} s"
        )
        checked = sum(self.versions_checked.values())
        lines = [
            f"scenario {self.scenario}: {'OK' if self.ok else 'VIOLATIONS'}",
            f"  transactions committed     {self.transactions:,} ({self.aborted:,} rolled back and retried)",
            f"  change events              {self.events:,} ({self.events_per_s:,.0f} events/s)",
            f"  txjoin Delta versions      {checked:,} checked against PostgreSQL at their cuts: "
            f"{len(self.violations)} violations",
            f"  naive baseline versions    {self.naive_versions:,}: {self.naive_torn:,} torn "
            f"(equal to the SQL at no commit of the source)"
            + (
                f", {self.naive_invariant_violations:,} break the invariants"
                if self.naive_invariant_violations
                else ""
            ),
            f"  commit-to-visible latency  {lat}",
            f"  micro-batches              {self.micro_batches:,}"
            + (
                " (median per batch: "
                + ", ".join(f"{k} {v:.2f} s" for k, v in self.batch_stages_s.items())
                + ")"
                if self.batch_stages_s
                else ""
            ),
        ]
        for v in self.violations[:10]:
            lines.append(f"  VIOLATION: {v}")
        lines.append("  output Delta tables:")
        for name, path in sorted(self.outputs.items()):
            lines.append(f"    {name}: {path}")
        lines.append("  naive baseline's Delta tables (torn versions included):")
        for name, path in sorted(self.naive_outputs.items()):
            lines.append(f"    {name}: {path}")
        return "\n".join(lines)


# -- databases --------------------------------------------------------------------


class _Databases:
    """Fresh databases on one server: the embedded PostgreSQL, or ``dsn``'s."""

    def __init__(self, home: Path, dsn: str | None) -> None:
        self.home = home
        self.admin_dsn = dsn
        self.server: Any = None
        self.started = False

    def start(self) -> None:
        if self.admin_dsn is not None:
            return
        from txjoin.pg.embedded import EmbeddedPostgres

        data = self.home / "pg"
        self.server = EmbeddedPostgres(data)
        if not self.server.status().running:
            self.server.start()
            self.started = True
            log.info("started an embedded PostgreSQL in %s for this run; it stops when the run ends", data)
        else:
            log.info(
                "using the embedded PostgreSQL already running in %s (stop it with: txjoin db stop "
                "--data-dir %s)",
                data,
                data,
            )
        self.admin_dsn = self.server.dsn()

    def stop(self) -> None:
        """Stop the embedded server if this run started it."""
        if self.server is not None and self.started:
            self.server.stop()
            self.started = False
            log.info("stopped the embedded PostgreSQL this run started (%s)", self.server.data_dir)

    def create(self, name: str) -> str:
        assert self.admin_dsn is not None
        return admin.fresh_database(self.admin_dsn, name)


# -- checks -----------------------------------------------------------------------


def _rows_key(rows: list[dict[str, Any]], plan: OutputPlan) -> frozenset[tuple[Any, int]]:
    from collections import Counter

    c = Counter(
        tuple(
            normalize(r.get(col), json_text=col in plan.json_columns, unordered=col in plan.unordered_columns)
            for col in plan.columns
        )
        for r in rows
    )
    return frozenset(c.items())


def _timeline(
    report: Report, violations: list[Any], plans: Mapping[str, Any], spec: PipelineSpec, scenario: Scenario
) -> None:
    """txjoin's versions on the timeline, checked against the scenario's invariants too."""
    delta = DeltaRsStore()
    torn = {(v.output, v.version) for v in violations}
    for name in plans:
        path = spec.outputs[name].path
        for commit in delta.history(path):
            needed = scenario.invariants is not None or scenario.metric is not None
            rows = delta.read(path, commit.version).to_pylist() if needed else []
            problem = scenario.invariants(name, rows) if scenario.invariants is not None else None
            if problem is not None:
                report.violations.append(f"{name} version {commit.version}: invariant broken: {problem}")
            value = scenario.metric(name, rows) if scenario.metric is not None else None
            ok = (name, commit.version) not in torn and problem is None
            report.timeline.append(Point("txjoin", name, commit.version, commit.timestamp_ms, ok, value))


def _naive_torn(
    naive: NaiveBaseline,
    plans: dict[str, OutputPlan],
    oracle: Oracle,
    ends: dict[str, list[TxEnd]],
    invariants: Callable[[str, list[dict[str, Any]]], str | None] | None,
    metric: Callable[[str, list[dict[str, Any]]], float | None] | None,
    points: list[Point],
) -> tuple[int, int, int]:
    """(versions, torn, invariant violations) of the naive baseline; ``points`` gets one per version."""
    delta = DeltaRsStore()
    states: dict[str, set[frozenset[tuple[Any, int]]]] = {}
    torn = broken = 0
    times = {
        o: {h.version: h.timestamp_ms for h in delta.history(naive.delta_root / o)}
        for o in {v.output for v in naive.versions}
    }
    for v in naive.versions:
        plan = plans[v.output]
        rows = delta.read(naive.delta_root / v.output, v.version).to_pylist()
        bad = invariants is not None and invariants(v.output, rows) is not None
        broken += bad
        key = _rows_key(rows, plan)
        out = oracle.outputs[v.output]
        value = None if metric is None else metric(v.output, rows)
        if len(out.sources) == 1:
            if v.output not in states:
                states[v.output] = {_rows_key(r, plan) for r in oracle.results[v.output].values()}
            is_torn = key not in states[v.output]
        else:
            # Several sources: a state the sources really had is, per source, a
            # prefix of whole transactions; compare with the SQL at the largest one.
            cut: dict[str, Cut] = {}
            whole = True
            for s in out.sources:
                floor, _ceiling, w = applied_transactions(naive.changelog, v.offsets, s)
                whole &= w
                end = ends[s][max(floor, 1) - 1]
                cut[s] = Cut(end.end_lsn, end.xid)
            is_torn = not whole and (
                not oracle.known(v.output, cut) or key != _rows_key(oracle.expected(v.output, cut), plan)
            )
        torn += is_torn
        ok = not is_torn and not bad
        points.append(Point("naive", v.output, v.version, times[v.output].get(v.version, 0), ok, value))
    return len(naive.versions), torn, broken


def _latency(
    committed: list[Committed],
    ends: dict[str, list[TxEnd]],
    plans: dict[str, OutputPlan],
    spec: PipelineSpec,
) -> list[tuple[float, float]]:
    """(commit time, seconds from commit to the first output version holding it)."""
    delta = DeltaRsStore()
    histories = {name: delta.history(spec.outputs[name].path) for name in plans}
    by_xid = {(s, e.xid): e for s, es in ends.items() for e in es}
    out = []
    for c in committed:
        end = by_xid.get((c.source, c.xid))
        if end is None:
            continue  # changed nothing
        touched = set(end.counts)
        for name, plan in plans.items():
            if not touched & {str(t) for t in plan.tables}:
                continue
            for commit in histories[name]:
                reached = commit.cut.get(c.source)
                if reached is not None and reached.lsn >= end.end_lsn:
                    out.append((c.at, max(0.0, commit.timestamp_ms / 1000 - c.at)))
                    break
    return out


# -- the run ------------------------------------------------------------------------


def run_scenario(
    scenario: Scenario,
    *,
    spark_factory: Callable[[PipelineSpec], Any],
    home: Path,
    txs: int | None = None,
    seconds: float | None = None,
    clients: int | None = None,
    dsn: str | None = None,
    status: Callable[[str], None] | None = None,
    converge_timeout: float = 180,
    check: bool = True,
    baseline: bool = True,
    rate: float | None = None,
    options: dict[str, Any] | None = None,
    backlog: bool = False,
) -> Report:
    """Run ``scenario`` end to end and report.

    ``check=False`` skips recording the SQL's result after every commit and
    checking the versions; ``baseline=False`` skips the naive baseline. Both
    serve measurements (bench/), where the checks would compete for the cores.
    ``rate`` overrides the scenario's transactions per second (0: unpaced);
    ``options`` override pipeline options of the scenario's spec.
    ``backlog=True`` stops capture and the pipeline while the clients run,
    then starts both and times the drain alone (``seconds`` and
    ``events_per_s`` from the restart to convergence): txjoin's throughput
    with the cores to itself, as capture alone is measured (bench/).
    """
    home = home.absolute()
    work = home / "scenarios" / scenario.name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    dbs = _Databases(home, dsn)
    dbs.start()
    try:
        env = scenario.dsn_env()
        saved = {k: os.environ.get(k) for k in env.values()}
        dsns = {}
        for source, schema in scenario.schemas.items():
            d = dbs.create(f"txjoin_{scenario.name}_{source}")
            conn = psycopg2.connect(d)
            with conn.cursor() as cur:
                cur.execute(schema.read_text())
            conn.commit()
            conn.close()
            dsns[source] = d
        naive_dsn = dbs.create(f"txjoin_{scenario.name}_naive")
        try:
            for source, var in env.items():
                os.environ[var] = dsns[source]
            spec = load_spec(scenario.spec_path, state_dir=work / "state")
            # Every version is checked after the run: none may leave the Delta log before that.
            given = {**({"output_log_retention": "30 days"} if check else {}), **(options or {})}
            if given:
                spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, **given))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        report = Report(scenario.name)
        captures = CaptureProcesses(spec)
        captures.start()
        spark = spark_factory(spec)
        pipeline = Pipeline(spec, spark)
        oracle = (
            oracle_for(spec, pipeline.plans)
            if check
            else Oracle({s.name: s.dsn for s in spec.sources.values()}, [])
        )
        naive: NaiveBaseline | None = None
        progress_stop = threading.Event()
        try:
            for s in spec.sources:
                oracle.record(s, read_transactions(ChangelogReader(spec.changelog), s)[0].xid)
            pipeline.start()
            if baseline:
                naive = NaiveBaseline(
                    spec.changelog,
                    {name: list(s.tables) for name, s in spec.sources.items()},
                    {name: o.sql for name, o in spec.outputs.items()},
                    naive_dsn,
                    work / "naive",
                )
                naive.start()
            _wait_first_versions(spec, pipeline, captures)
            if backlog:
                pipeline.stop()
                captures.stop()
            run = Clients(
                dsns,
                scenario.workload,
                oracle,
                n=clients or scenario.clients,
                txs=txs if txs is not None or seconds is not None else scenario.txs,
                seconds=seconds,
                rate=scenario.rate if rate is None else rate,
            )
            if status is not None:
                threading.Thread(
                    target=_progress,
                    args=(status, progress_stop, run, pipeline, naive, captures),
                    daemon=True,
                ).start()
            run.run()
            started = run.started
            if backlog:
                started = time.time()
                captures = CaptureProcesses(spec)
                captures.start()
                pipeline.start()
                _drain_captures(captures, run.committed, converge_timeout)
            _converge(spec, pipeline, captures, converge_timeout)
            finished = time.time()
            pipeline.stop()
            if naive is not None:
                naive.finish()
        finally:
            progress_stop.set()
            pipeline.close()
            if naive is not None:
                naive.stop()
            captures.stop()
        ends = {s: read_transactions(ChangelogReader(spec.changelog), s) for s in spec.sources}
        report.transactions = len(run.committed)
        report.aborted = run.aborted
        report.events = sum(e.event_count for es in ends.values() for e in es[1:])
        report.seconds = finished - started  # from the first transaction (or the restart) to convergence
        report.events_per_s = report.events / report.seconds if report.seconds > 0 else 0.0
        if check:
            versions, violations = check_versions(pipeline.plans, spec, oracle)
            report.versions_checked = versions
            report.violations = [str(v) for v in violations]
        if check:
            _timeline(report, violations, pipeline.plans, spec, scenario)
        if naive is not None and check:
            report.naive_versions, report.naive_torn, report.naive_invariant_violations = _naive_torn(
                naive, pipeline.plans, oracle, ends, scenario.invariants, scenario.metric, report.timeline
            )
        series = _latency(run.committed, ends, pipeline.plans, spec)
        report.latency_series = series
        lat = [s for _, s in series]
        if lat:
            report.latency_p50_s = statistics.median(lat)
            report.latency_p99_s = sorted(lat)[min(len(lat) - 1, int(len(lat) * 0.99))]
        report.micro_batches = len(pipeline.history)
        busy = [b for b in pipeline.history if b.commits]
        if busy:
            report.batch_stages_s["total"] = statistics.median(b.seconds for b in busy)
            for stage in ("apply", "fetch", "recompute", "commit"):
                report.batch_stages_s[stage] = statistics.median(b.timings.get(stage, 0.0) for b in busy)
        report.outputs = {n: str(o.path) for n, o in spec.outputs.items()}
        if naive is not None:
            report.naive_outputs = {n: str(p) for n, p in naive.paths().items()}
        oracle.close()
        return report
    finally:
        dbs.stop()


def _wait_first_versions(spec: PipelineSpec, pipeline: Pipeline, captures: CaptureProcesses) -> None:
    """Start the workload once every output has its first version (Spark is warm)."""
    delta = DeltaRsStore()
    deadline = time.monotonic() + 300
    while not all(delta.exists(o.path) for o in spec.outputs.values()):
        captures.check()
        pipeline.check()
        if time.monotonic() > deadline:
            raise TxJoinError("the pipeline wrote no first version within 300 s: see its log")
        time.sleep(0.2)


def _drain_captures(captures: CaptureProcesses, committed: list[Committed], timeout: float) -> None:
    """Wait until the restarted captures have written as many transactions as the clients
    committed (every transaction of a backlog run must change a captured table)."""
    want = {s: sum(1 for c in committed if c.source == s) for s in captures.captures}
    deadline = time.monotonic() + timeout
    while any(captures.captures[s].stats.transactions < n for s, n in want.items()):
        captures.check()
        if time.monotonic() > deadline:
            got = {s: c.stats.transactions for s, c in captures.captures.items()}
            raise TxJoinError(f"capture wrote {got} of {want} transactions within {timeout:.0f} s")
        time.sleep(0.05)


def _last_end_lsn(reader: ChangelogReader, source: str) -> int:
    """The commit LSN of ``source``'s last transaction in the changelog.

    From the topic's last record: re-reading the whole transaction topic on
    every poll took 14% of the process's CPU (py-spy, bench.e2e), time the
    pipeline's batches, sharing the GIL, did not get.
    """
    last = reader.last(f"{source}.transaction")
    if last is not None:
        v = json.loads(last[1])
        if v.get("status") == "END":
            return parse_tx_id(v["id"])[1]
    return read_transactions(reader, source)[-1].end_lsn


def _converge(spec: PipelineSpec, pipeline: Pipeline, captures: CaptureProcesses, timeout: float) -> None:
    """Wait until every output's last version covers each source's last transaction."""
    delta = DeltaRsStore()
    reader = ChangelogReader(spec.changelog)
    deadline = time.monotonic() + timeout
    while True:
        captures.check()
        pipeline.check()
        last = {s: _last_end_lsn(reader, s) for s in spec.sources}
        done = True
        for out in spec.outputs.values():
            if not delta.exists(out.path):
                done = False
                break
            cut = delta.history(out.path)[-1].cut
            if any(c.lsn < last[s] for s, c in cut.items()):
                done = False
                break
        if done:
            return
        if time.monotonic() > deadline:
            raise TxJoinError(
                f"the outputs did not catch up with the sources within {timeout:.0f} s: "
                "see the pipeline's log"
            )
        time.sleep(0.2)


def _progress(
    status: Callable[[str], None],
    stop: threading.Event,
    run: Clients,
    pipeline: Pipeline,
    naive: NaiveBaseline | None,
    captures: CaptureProcesses,
) -> None:
    while not stop.wait(2.0):
        events = sum(c.stats.events for c in captures.captures.values())
        batches = len(pipeline.history)
        commits = sum(len(b.commits) for b in pipeline.history)
        status(
            f"committed {len(run.committed):,} transactions ({run.aborted} retried), "
            f"captured {events:,} events; pipeline: {batches} micro-batches, {commits} Delta commits"
            + (f"; naive: {len(naive.versions)} versions" if naive is not None else "")
        )
