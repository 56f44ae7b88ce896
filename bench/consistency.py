"""txjoin beside the naive per-event join, on the three scenarios (issue [5 of 5]).

Each scenario runs end to end as ``txjoin scenario run`` does, with its
checks and its naive baseline on: the same change streams feed txjoin and
the naive baseline (events applied one by one as they arrive, a Delta
version after each delivery). Every Delta version of both is compared with
the output's SQL on PostgreSQL at a commit; a naive version equal to the SQL
at no commit is *torn*. Counts, not timings: one run per scenario. The
pizzeria's commit-to-visible is RESULTS.md's ``make demo`` row, so it runs
its scenario's own workload (400 transactions), as ``make demo`` does;
``--txs`` sets the other scenarios'.

    .venv/bin/python -m bench.consistency --txs 200
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.common import bench_postgres, bench_spark, machine, write_figures
from txjoin.scenario.definition import load_scenario
from txjoin.scenario.run import run_scenario

ROOT = Path(__file__).parent.parent
SCENARIOS = ("pizzeria", "two_databases", "ledger")
#: The scenario ``make demo`` runs: it runs its own workload here too.
DEMO = "pizzeria"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--txs", type=int, default=200, help=f"transactions per scenario but {DEMO}")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    print(f"machine: {machine()}; {args.txs} transactions per scenario, {DEMO}'s own as make demo")
    with (
        # Started as txjoin scenario run (make demo) starts it: a short-lived session.
        bench_spark("txjoin-bench-consistency", "txjoin-bench-consistency-", short_lived=True) as (
            spark,
            home,
        ),
        bench_postgres(fsync=True) as pg,
    ):
        for name in SCENARIOS:
            r = run_scenario(
                load_scenario(name, ROOT / "scenarios"),
                spark_factory=lambda spec: spark,
                home=home,
                dsn=pg.dsn(),
                txs=None if name == DEMO else args.txs,
                converge_timeout=600,
            )
            out[name] = {
                "transactions": r.transactions,
                "events": r.events,
                "versions_checked": sum(r.versions_checked.values()),
                "violations": len(r.violations),
                "naive_versions": r.naive_versions,
                "naive_torn": r.naive_torn,
                "naive_invariant_violations": r.naive_invariant_violations,
                "p50_s": r.latency_p50_s,
                "p99_s": r.latency_p99_s,
            }
            print(
                f"{name}: {r.transactions} transactions, {r.events:,} events; txjoin "
                f"{sum(r.versions_checked.values())} versions checked, {len(r.violations)} violations; "
                f"naive {r.naive_versions} versions, {r.naive_torn} torn"
                + (
                    f", {r.naive_invariant_violations} breaking the invariants"
                    if r.naive_invariant_violations
                    else ""
                ),
                flush=True,
            )
    write_figures(args.json, out)


if __name__ == "__main__":
    main()
