"""Testing commands: ``check`` (the property-based regression suite on a
spec's own schema) and ``scenario`` (the consistency scenarios)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from txjoin.cli.common import add_spark_options, option_pairs, progress_wanted, spark_for
from txjoin.errors import TxJoinError

__all__ = ["add_commands"]


def _check(args: argparse.Namespace) -> int:
    import dataclasses

    from txjoin.check.suite import check_spec
    from txjoin.pg.embedded import EmbeddedPostgres
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    if not args.debug:
        # Each example runs capture and the pipeline: their progress lines would bury the report.
        logging.getLogger("txjoin").setLevel(logging.ERROR)
    if args.no_before_images:
        # Deliberately broken maintenance: shows the suite catches it.
        spec = dataclasses.replace(
            spec, options=dataclasses.replace(spec.options, propagate_before_images=False)
        )
    server = EmbeddedPostgres(Path(args.home) / "check-pg")
    if not server.status().running:
        server.start()
        print(
            f"started a scratch PostgreSQL in {server.data_dir} (it keeps running for the next check; "
            f"stop it with: txjoin db stop --data-dir {server.data_dir})",
            file=sys.stderr,
        )
    from txjoin.check.suite import describe_example

    def on_example(n: int, r: Any) -> None:
        print(f"  {describe_example(n, r)}", file=sys.stderr, flush=True)

    print(f"checking pipeline {spec.name}: {args.examples} random workloads on scratch copies of its sources")
    result = check_spec(
        spec,
        spark_for(spec, short_lived=True),
        admin_dsn=server.dsn(),
        examples=args.examples,
        shrink=not args.no_shrink,
        seed=args.seed,
        on_example=on_example,
    )
    for name, setup in result.setups.items():
        extra = f" ({setup.note})" if setup.note else ""
        print(f"source {name}: scratch copies with {setup.describe()}{extra}")
    print(result.totals())
    if result.ok:
        print("every version of every output equals its SQL on PostgreSQL at its cut")
        return 0
    print("VIOLATION (smallest failing example found):")
    print(result.failure)
    print("The example as SQL (paste into psql on an empty copy of the source's schema):")
    print(result.failure_sql)
    return 1


def _scenario(args: argparse.Namespace) -> int:
    from txjoin.scenario.definition import find_scenarios, load_scenario

    if args.action == "list":
        found = find_scenarios(args.scenarios)
        if not found:
            print("no scenarios found (looked in --scenarios, $TXJOIN_SCENARIOS and ./scenarios)")
            return 1
        for name in sorted(found):
            sc = load_scenario(name, args.scenarios)
            print(f"{name:<16} {sc.description}")
        return 0
    from txjoin.scenario.run import run_scenario

    if not args.name:
        raise TxJoinError("name the scenario to run: txjoin scenario run NAME (see 'txjoin scenario list')")
    sc = load_scenario(args.name, args.scenarios)
    home = Path(args.home)

    def status(line: str) -> None:
        if not args.json and progress_wanted():
            print(f"  {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    if not args.json:
        print(f"running scenario {sc.name}: {sc.description}", file=sys.stderr)
    report = run_scenario(
        sc,
        spark_factory=lambda spec: spark_for(spec, args.master, args.conf, short_lived=True),
        options=option_pairs(args.option),
        home=home,
        txs=args.txs,
        seconds=args.seconds,
        clients=args.clients,
        dsn=args.dsn,
        status=status,
    )
    if args.plot:
        from txjoin.scenario.plot import plot_report

        drawn = plot_report(report, Path(args.plot))
        print(f"plot of every version, naive baseline and txjoin: {drawn}", file=sys.stderr)
    if args.json:
        print(report.to_json())
    else:
        print(report.render())
        print(_how_to_read(report.outputs))
    return 0 if report.ok else 1


def _how_to_read(outputs: dict[str, str]) -> str:
    name, path = sorted(outputs.items())[0]
    duckdb = f"SELECT * FROM delta_scan('{path}');"  # noqa: S608 (shown to the user, not run)
    return f"""
Read the output tables (every version is consistent; versions carry their cut in the commit metadata):
  Python:  from deltalake import DeltaTable; DeltaTable("{path}").to_pandas()
  Polars:  import polars as pl; pl.read_delta("{path}")
  DuckDB:  {duckdb}   -- after INSTALL delta; LOAD delta;
  Spark:   spark.read.format("delta").load("{path}")   # with the delta-spark package
  txjoin:  txjoin show SPEC {name}   /   txjoin verify SPEC"""


def add_commands(sub: Any) -> None:
    """Register the testing subcommands on the ``txjoin`` parser."""
    chk = sub.add_parser(
        "check", help="property-based regression suite on scratch copies of a spec's sources"
    )
    chk.add_argument("spec", help="pipeline spec file (TOML)")
    chk.add_argument(
        "--examples", type=int, default=25, help="random workloads to run (default: %(default)s)"
    )
    chk.add_argument("--seed", type=int, default=None, help="derandomize: the same examples every run")
    chk.add_argument("--no-shrink", action="store_true", help="report the first failure as found")
    chk.add_argument(
        "--home", default=".txjoin", help="where the scratch PostgreSQL runs (default: %(default)s)"
    )
    chk.add_argument(
        "--no-before-images",
        action="store_true",
        help="break the join maintenance on purpose (no before-image propagation) to see the suite catch it",
    )
    chk.set_defaults(func=_check)

    scn = sub.add_parser("scenario", help="list or run the consistency scenarios")
    scn.add_argument("action", choices=["list", "run"])
    scn.add_argument("name", nargs="?", help="scenario to run (see 'txjoin scenario list')")
    scn.add_argument("--txs", type=int, default=None, help="transactions to commit (default: the scenario's)")
    scn.add_argument("--seconds", type=float, default=None, help="run the workload this long instead")
    scn.add_argument("--clients", type=int, default=None, help="concurrent clients (default: the scenario's)")
    scn.add_argument(
        "--dsn",
        default=None,
        help="a PostgreSQL server to use instead of the embedded one (the role needs CREATEDB and "
        "REPLICATION; the scenario creates its own databases)",
    )
    scn.add_argument("--json", action="store_true", help="print the report as one JSON object")
    scn.add_argument(
        "--plot", metavar="FILE.png", help="draw every Delta version of txjoin and the naive baseline"
    )
    scn.add_argument(
        "--home", default=".txjoin", help="where databases and Delta tables go (default: %(default)s)"
    )
    scn.add_argument("--scenarios", default=None, help="folder of scenarios (default: ./scenarios)")
    scn.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a pipeline option of the scenario's spec, e.g. distributed_rows=0 (repeatable)",
    )
    add_spark_options(scn)
    scn.set_defaults(func=_scenario)
