"""Pipeline commands of the CLI: ``run``, ``verify``, ``show``, ``check`` and ``scenario``.

``run`` starts capture for every source (in threads of this process) and the
Spark pipeline, prints progress, and stops cleanly on Ctrl-C or SIGTERM: the
query finishes its micro-batch, capture flushes and acknowledges what is
durable. ``--once`` catches up from the changelog and exits (no capture).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from txjoin.errors import TxJoinError
from txjoin.runner import CaptureThreads

__all__ = ["add_commands"]

log = logging.getLogger("txjoin")


def _spark(spec: Any) -> Any:
    from txjoin.session import spark_session

    return spark_session(f"txjoin-{spec.name}", cores=spec.options.spark_cores)


def _run(args: argparse.Namespace) -> int:
    from txjoin.pipeline import BatchStats, Pipeline
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("stopping after the current micro-batch (signal %d); press Ctrl-C again to abort", signum)
        stop.set()

    def on_batch(b: BatchStats) -> None:
        if b.commits and not args.quiet:
            outs = ", ".join(f"{o}@v{v}" for o, v in sorted(b.commits.items()))
            log.info(
                "batch %d: %d transactions, %d events -> %s (%.2f s)",
                b.batch,
                b.transactions,
                b.events,
                outs,
                b.seconds,
            )

    if args.once:
        spark = _spark(spec)
        pipeline = Pipeline(spec, spark, on_batch=on_batch)
        pipeline.run_available()
        _summary(pipeline)
        return 0
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    captures = None if args.no_capture else CaptureThreads(spec)
    if captures is not None:
        captures.start()
    try:
        spark = _spark(spec)
        pipeline = Pipeline(spec, spark, on_batch=on_batch)
        pipeline.start()
        log.info(
            "pipeline %s running: outputs %s; Ctrl-C stops it", spec.name, ", ".join(sorted(spec.outputs))
        )
        while not stop.wait(0.5):
            pipeline.check()
            if captures is not None:
                captures.check()
        pipeline.stop()
    finally:
        if captures is not None:
            captures.stop()
    _summary(pipeline)
    return 0


def _summary(pipeline: Any) -> None:
    spec = pipeline.spec
    print(f"pipeline {spec.name}: {len(pipeline.history)} micro-batches this run")
    for name, out in sorted(spec.outputs.items()):
        print(f"  {name}: {out.path}")


def _verify(args: argparse.Namespace) -> int:
    from txjoin.spec import load_spec
    from txjoin.verify.at_cut import verify_output

    spec = load_spec(args.spec)
    names = [args.output] if args.output else sorted(spec.outputs)
    failed = 0
    for name in names:
        r = verify_output(spec, name, args.version)
        cut = ", ".join(
            f"{s} lsn {_lsn(c.lsn)} xid {c.xid} ({_count(c.transactions)} transactions)"
            for s, c in sorted(r.commit.cut.items())
        )
        if r.ok:
            print(
                f"{name} version {r.version} (cut: {cut}): {r.output_rows} rows, "
                "equal to the SQL on PostgreSQL at the cut"
            )
        else:
            failed += 1
            print(f"{name} version {r.version} (cut: {cut}): DIFFERS from the SQL on PostgreSQL")
            print(r.difference.describe(limit=args.limit))
    return 1 if failed else 0


def _lsn(v: int) -> str:
    from txjoin.debezium.lsn import format_lsn

    return format_lsn(v)


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _show(args: argparse.Namespace) -> int:
    from txjoin.delta_sink import DeltaRsStore
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    if args.output not in spec.outputs:
        raise TxJoinError(
            f"pipeline {spec.name!r} has no output {args.output!r}: outputs are {sorted(spec.outputs)}"
        )
    path = spec.outputs[args.output].path
    store = DeltaRsStore()
    if not store.exists(path):
        raise TxJoinError(f"output {args.output!r} has no Delta table at {path} yet: run the pipeline first")
    history = store.history(path)
    version = history[-1].version if args.version is None else args.version
    commit = next((c for c in history if c.version == version), None)
    if commit is None:
        raise TxJoinError(
            f"{path} has no version {version}: versions are {history[0].version}..{history[-1].version}"
        )
    table = store.read(path, version)
    print(f"{args.output} version {version} of {history[-1].version} at {path}")
    for s, c in sorted(commit.cut.items()):
        print(
            f"  cut {s}: lsn {_lsn(c.lsn)}, xid {c.xid}, {_count(c.transactions)} transactions"
        )
    rows = table.to_pylist()
    print(f"  {len(rows)} rows" + (f" (first {args.limit})" if len(rows) > args.limit else ""))
    cols = table.column_names
    print("  " + " | ".join(cols))
    for r in rows[: args.limit]:
        print("  " + " | ".join("NULL" if r[c] is None else str(r[c]) for c in cols))
    return 0


def _check(args: argparse.Namespace) -> int:
    import dataclasses

    from txjoin.check.suite import check_spec
    from txjoin.pg.embedded import EmbeddedPostgres
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    if args.no_before_images:
        # Deliberately broken maintenance: shows the suite catches it.
        spec = dataclasses.replace(
            spec, options=dataclasses.replace(spec.options, propagate_before_images=False)
        )
    server = EmbeddedPostgres(Path(args.home) / "check-pg")
    if not server.status().running:
        server.start()
    admin = server.dsn()

    def create(name: str) -> str:
        import psycopg2

        from txjoin.pg.names import quote_ident

        conn = psycopg2.connect(admin)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {quote_ident(name)}")
        conn.close()
        return server.dsn(name)

    def drop(name: str) -> None:
        import psycopg2

        from txjoin.pg.names import quote_ident

        conn = psycopg2.connect(admin)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                (name,),
            )
            cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        conn.close()

    def on_example(n: int, r: Any) -> None:
        print(
            f"  example {n}: {r.committed} transactions, versions {dict(r.versions)}, "
            f"{'ok' if r.ok else str(len(r.violations)) + ' violations'}",
            file=sys.stderr,
            flush=True,
        )

    print(f"checking pipeline {spec.name}: {args.examples} random workloads on scratch copies of its sources")
    result = check_spec(
        spec,
        _spark(spec),
        create_database=create,
        drop_database=drop,
        examples=args.examples,
        shrink=not args.no_shrink,
        seed=args.seed,
        on_example=on_example,
    )
    print(
        f"{result.examples} examples, {result.committed} transactions committed "
        f"({result.rolled_back} rolled back), {result.versions} Delta versions checked"
    )
    if result.ok:
        print("every version of every output equals its SQL on PostgreSQL at its cut")
        return 0
    print("VIOLATION (smallest failing example found):")
    print(result.failure)
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
    from txjoin.session import spark_session

    if not args.name:
        raise TxJoinError("name the scenario to run: txjoin scenario run NAME (see 'txjoin scenario list')")
    sc = load_scenario(args.name, args.scenarios)
    home = Path(args.home)

    def status(line: str) -> None:
        if not args.json and (sys.stderr.isatty() or os.environ.get("TXJOIN_PROGRESS") == "1"):
            print(f"  {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    if not args.json:
        print(f"running scenario {sc.name}: {sc.description}", file=sys.stderr)
    report = run_scenario(
        sc,
        spark_factory=lambda spec: spark_session(f"txjoin-{sc.name}", cores=spec.options.spark_cores),
        home=home,
        txs=args.txs,
        seconds=args.seconds,
        clients=args.clients,
        dsn=args.dsn,
        status=status,
    )
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
    """Register the pipeline subcommands on the ``txjoin`` parser."""
    run = sub.add_parser("run", help="run a pipeline spec: capture + Spark, until Ctrl-C or SIGTERM")
    run.add_argument("spec", help="pipeline spec file (TOML)")
    run.add_argument("--no-capture", action="store_true", help="capture runs elsewhere; only run Spark")
    run.add_argument(
        "--once", action="store_true", help="catch up from the changelog, then exit (no capture)"
    )
    run.add_argument("--quiet", action="store_true", help="no per-batch lines")
    run.set_defaults(func=_run)

    ver = sub.add_parser(
        "verify", help="compare an output version with its SQL on PostgreSQL at the version's cut"
    )
    ver.add_argument("spec", help="pipeline spec file (TOML)")
    ver.add_argument("--output", help="one output (default: all)")
    ver.add_argument("--version", type=int, default=None, help="Delta version (default: latest)")
    ver.add_argument("--limit", type=int, default=20, help="differing rows to print (default: %(default)s)")
    ver.set_defaults(func=_verify)

    show = sub.add_parser("show", help="print an output's rows and cut at a version")
    show.add_argument("spec", help="pipeline spec file (TOML)")
    show.add_argument("output", help="output name")
    show.add_argument("--version", type=int, default=None, help="Delta version (default: latest)")
    show.add_argument("--limit", type=int, default=20, help="rows to print (default: %(default)s)")
    show.set_defaults(func=_show)

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
        "--home", default=".txjoin", help="where databases and Delta tables go (default: %(default)s)"
    )
    scn.add_argument("--scenarios", default=None, help="folder of scenarios (default: ./scenarios)")
    scn.set_defaults(func=_scenario)
