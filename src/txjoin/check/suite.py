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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
from hypothesis import HealthCheck, Phase, given, note, settings

from txjoin.check.generate import initial_rows, scratch_ddl, workloads
from txjoin.check.harness import CheckResult, Statement, Workload, run_check
from txjoin.errors import TxJoinError
from txjoin.join.plan import OutputPlan
from txjoin.join.planned import plan_outputs
from txjoin.pg.catalog import Table
from txjoin.spec import PipelineSpec

__all__ = ["SuiteResult", "check_spec", "plan_spec"]

log = logging.getLogger(__name__)

_counter = itertools.count()


@dataclass
class SuiteResult:
    examples: int = 0
    committed: int = 0
    rolled_back: int = 0
    versions: int = 0
    #: The failing example's report, if any (after shrinking).
    failure: str | None = None
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None


def plan_spec(spec: PipelineSpec) -> tuple[dict[str, list[Table]], dict[str, OutputPlan]]:
    """The captured tables per source (from the real catalogs) and the outputs' plans."""
    planned = plan_outputs(spec)
    tables = {name: [planned.tables[t] for t in s.tables] for name, s in spec.sources.items()}
    return tables, dict(planned.plans)


def check_spec(
    spec: PipelineSpec,
    spark: Any,
    *,
    create_database: Callable[[str], str],
    drop_database: Callable[[str], None],
    examples: int = 25,
    max_transactions: int = 10,
    shrink: bool = True,
    seed: int | None = None,
    on_example: Callable[[int, CheckResult], None] | None = None,
) -> SuiteResult:
    """Run ``examples`` random workloads on scratch copies of ``spec``'s sources.

    ``create_database(name)`` makes an empty database and returns its DSN;
    ``drop_database(name)`` removes it.
    """
    tables, plans = plan_spec(spec)
    all_tables = [t for ts in tables.values() for t in ts]
    ddl = {name: scratch_ddl(ts) for name, ts in tables.items()}
    suite = SuiteResult()

    def one(initial: list[Statement], workload: Workload) -> None:
        n = next(_counter)
        tmp = Path(tempfile.mkdtemp(prefix="txjoin-check-"))
        made: list[str] = []
        try:
            sources = {}
            for name, s in spec.sources.items():
                db = f"txjoin_check_{name}_{n}"
                drop_database(db)
                dsn = create_database(db)
                made.append(db)
                conn = psycopg2.connect(dsn)
                with conn.cursor() as cur:
                    cur.execute(ddl[name])
                    for stmt in initial:
                        if _source_of(stmt, tables) == name:
                            cur.execute("SAVEPOINT s")
                            try:
                                cur.execute(stmt.sql, stmt.args)
                            except psycopg2.Error:
                                cur.execute("ROLLBACK TO SAVEPOINT s")  # a constraint: skip the row
                conn.commit()
                conn.close()
                sources[name] = dataclasses.replace(s, dsn=dsn, slot="", publication="")
            scratch = dataclasses.replace(
                spec, state_dir=tmp / "state", sources=sources, outputs=_outputs_under(spec, tmp)
            )
            result = run_check(scratch, spark, workload)
            suite.examples += 1
            suite.committed += result.committed
            suite.rolled_back += result.rolled_back
            suite.versions += sum(result.versions.values())
            suite.results.append(result)
            if on_example is not None:
                on_example(suite.examples, result)
            note(f"{result.committed} transactions committed, versions {result.versions}")
            if not result.ok:
                raise AssertionError("\n".join(str(v) for v in result.violations))
        finally:
            for db in made:
                drop_database(db)
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


def _source_of(stmt: Statement, tables: dict[str, list[Table]]) -> str:
    for source, ts in tables.items():
        for t in ts:
            if f"INTO {t.name.quoted} " in stmt.sql:
                return source
    return ""


def _outputs_under(spec: PipelineSpec, tmp: Path) -> dict[str, Any]:
    return {name: dataclasses.replace(o, path=tmp / "delta" / name) for name, o in spec.outputs.items()}
