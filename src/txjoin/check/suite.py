"""``txjoin check``: the property-based regression suite on a user's own pipeline.

For each example, every source's captured tables are created anew in a
scratch database (same columns, keys and constraints; no data), filled with
random rows, and a random workload of concurrent transactions runs through
capture, the Spark pipeline and Delta (:func:`txjoin.check.harness.run_check`).
Every Delta version of every output must equal the output's SQL on
PostgreSQL at its cut. Hypothesis draws the examples and, on a failure,
shrinks it to a small one to report.

The real sources are only read (their catalogs); nothing is written to them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
from hypothesis import HealthCheck, Phase, given, note, settings

from txjoin.check.generate import initial_rows, scratch_ddl, workloads
from txjoin.check.harness import CheckResult, Statement, Workload, run_check
from txjoin.check.scratch import ScratchSetup, create_scratch, read_setup
from txjoin.decode import ReaderKind
from txjoin.errors import TxJoinError
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import plan_outputs
from txjoin.pg import admin
from txjoin.pg.catalog import Table
from txjoin.spec import PipelineSpec

__all__ = ["SuiteResult", "check_spec", "describe_example", "plan_spec"]

log = logging.getLogger(__name__)

_counter = itertools.count()


@dataclass
class SuiteResult:
    examples: int = 0
    committed: int = 0
    rolled_back: int = 0
    constraint_failures: int = 0
    lock_failures: int = 0
    other_failures: int = 0
    versions: int = 0
    #: How each source's scratch copy was made.
    setups: dict[str, ScratchSetup] = field(default_factory=dict)
    #: The failing example's report, if any (after shrinking).
    failure: str | None = None
    #: The failing example as SQL to paste into psql.
    failure_sql: str = ""
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def transactions(self) -> int:
        return (
            self.committed
            + self.rolled_back
            + self.constraint_failures
            + self.lock_failures
            + self.other_failures
        )

    def totals(self) -> str:
        n = max(self.transactions, 1)
        per_example = self.versions / max(self.examples, 1)
        return (
            f"{self.examples} examples: {self.transactions} transactions, {self.committed} committed, "
            f"{self.rolled_back} rolled back on purpose ({100 * self.rolled_back / n:.0f}%), "
            f"{self.constraint_failures} failed on a constraint ({100 * self.constraint_failures / n:.1f}%), "
            f"{self.lock_failures} on a lock wait, {self.other_failures} otherwise; "
            f"{self.versions} Delta versions checked ({per_example:.1f} per example)"
        )


def plan_spec(spec: PipelineSpec) -> tuple[dict[str, list[Table]], dict[str, OutputPlan]]:
    """The captured tables per source (from the real catalogs) and the outputs' plans."""
    planned = plan_outputs(spec)
    tables = {name: [planned.tables[t] for t in s.tables] for name, s in spec.sources.items()}
    return tables, dict(planned.plans)


def describe_example(n: int, r: CheckResult) -> str:
    o = r.outcomes
    return (
        f"example {n}: {o.committed} committed, {o.rolled_back} rolled back on purpose, "
        f"{o.constraint} failed on a constraint, {o.lock} on a lock, {o.other} otherwise; "
        f"versions checked {dict(r.versions)}: {'ok' if r.ok else str(len(r.violations)) + ' violations'}"
        + "".join(f"\n    first {kind} failure: {msg}" for kind, msg in sorted(o.examples.items()))
    )


#: One example in this many of a check reads its changelog by offset, as ``txjoin run`` does (the
#: others use Spark's file source).
OFFSET_READER_EVERY = 4


def check_spec(
    spec: PipelineSpec,
    spark: Any,
    *,
    admin_dsn: str,
    examples: int = 25,
    max_transactions: int = 12,
    shrink: bool = True,
    seed: int | None = None,
    on_example: Callable[[int, CheckResult], None] | None = None,
) -> SuiteResult:
    """Run ``examples`` random workloads on scratch copies of ``spec``'s sources,
    made on ``admin_dsn``'s server (a role that may create databases)."""
    tables, plans = plan_spec(spec)
    all_tables = [t for ts in tables.values() for t in ts]
    suite = SuiteResult()
    for name, s in spec.sources.items():
        suite.setups[name] = read_setup(s.dsn, tables[name], scratch_ddl(tables[name]))

    readers: dict[int, ReaderKind] = {}

    def one(initial: list[Statement], workload: Workload) -> None:
        n = next(_counter)
        tmp = Path(tempfile.mkdtemp(prefix="txjoin-check-"))
        made: list[str] = []
        scripts: dict[str, list[str]] = {}
        try:
            sources = {}
            for name, s in spec.sources.items():
                db = f"txjoin_check_{name}_{n}"
                dsn = create_scratch(admin_dsn, db, suite.setups[name])
                made.append(db)
                conn = psycopg2.connect(dsn)
                lines = scripts.setdefault(name, [])
                with conn.cursor() as cur:
                    for stmt in initial:
                        if _source_of(stmt, tables) == name:
                            cur.execute("SAVEPOINT s")
                            try:
                                cur.execute(stmt.sql, stmt.args)
                                lines.append(cur.mogrify(stmt.sql, stmt.args).decode() + ";")
                            except psycopg2.Error:
                                cur.execute("ROLLBACK TO SAVEPOINT s")  # a constraint: skip the row
                    for tx in workload.transactions:
                        if tx.source == name:
                            body = [cur.mogrify(x.sql, x.args).decode() + ";" for x in tx.statements]
                            end = "ROLLBACK;" if tx.rollback else "COMMIT;"
                            lines.append("\n".join(["BEGIN;", *body, end]))
                conn.commit()
                conn.close()
                sources[name] = dataclasses.replace(s, dsn=dsn, slot="", publication="")
            scratch = dataclasses.replace(
                spec, state_dir=tmp / "state", sources=sources, outputs=_outputs_under(spec, tmp)
            )
            # One example in four reads the changelog as txjoin run does (the offset reader), the
            # first included; the others through Spark's file source, which starts each trigger's
            # query 0.4 s sooner. Remembered per example, so a failing one replays the same way.
            seen = zlib.crc32(repr((initial, workload)).encode())
            first_of_four = len(readers) % OFFSET_READER_EVERY == 0
            reader = readers.setdefault(seen, "offsets" if first_of_four else "files")
            result = run_check(scratch, spark, workload, changelog_reader=reader)
            suite.examples += 1
            o = result.outcomes
            suite.committed += o.committed
            suite.rolled_back += o.rolled_back
            suite.constraint_failures += o.constraint
            suite.lock_failures += o.lock
            suite.other_failures += o.other
            suite.versions += sum(result.versions.values())
            suite.results.append(result)
            if on_example is not None:
                on_example(suite.examples, result)
            note(describe_example(suite.examples, result))
            if not result.ok:
                suite.failure_sql = _script(scripts)
                raise AssertionError("\n".join(str(v) for v in result.violations))
        finally:
            for db in made:
                admin.drop_database(admin_dsn, db)
            shutil.rmtree(tmp, ignore_errors=True)

    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    test = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=phases,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
    )(
        given(
            initial=initial_rows(all_tables, plans),
            workload=workloads(all_tables, plans, max_transactions=max_transactions),
        )(one)
    )
    if seed is not None:
        from hypothesis import seed as hseed

        test = hseed(seed)(test)
    try:
        test()
    except AssertionError as e:
        suite.failure = str(e)
    except TxJoinError:
        raise
    return suite


def _script(scripts: dict[str, list[str]]) -> str:
    """The example as psql input: per source, its rows, then its transactions in
    the order they were started (they ran interleaved on several connections)."""
    out: list[str] = []
    for source, lines in scripts.items():
        out.append(f"-- source {source}: on an empty copy of its schema")
        out.extend(lines)
    return "\n".join(out)


def _source_of(stmt: Statement, tables: dict[str, list[Table]]) -> str:
    for source, ts in tables.items():
        for t in ts:
            if f"INTO {t.name.quoted} " in stmt.sql:
                return source
    return ""


def _outputs_under(spec: PipelineSpec, tmp: Path) -> dict[str, Any]:
    return {name: dataclasses.replace(o, path=tmp / "delta" / name) for name, o in spec.outputs.items()}
