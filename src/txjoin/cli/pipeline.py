"""Pipeline commands: ``run``, ``resync``, ``verify`` and ``show``.

``run`` starts capture for every source (in threads of this process) and the
Spark pipeline, prints progress, and stops cleanly on Ctrl-C or SIGTERM: the
query finishes its micro-batch, capture flushes and acknowledges what is
durable. ``--once`` catches up from the changelog and exits (no capture).
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from txjoin.cli.common import Progress, add_spark_options, install_stop_signals, spark_for
from txjoin.cli.progress import load_status
from txjoin.debezium.lsn import format_lsn
from txjoin.errors import TxJoinError
from txjoin.runner import CaptureProcesses

__all__ = ["add_commands"]

log = logging.getLogger("txjoin")


def _run(args: argparse.Namespace) -> int:
    from txjoin.pipeline import BatchStats, Pipeline
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    stop = threading.Event()

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

    running: dict[str, Any] = {}

    def status() -> str:
        return load_status(running.get("captures"), running.get("pipeline"), running.get("spark"))

    def loaded() -> bool:
        p = running.get("pipeline")
        return p is not None and bool(p.history) and not status()

    if args.once:
        running["spark"] = spark = spark_for(spec, args.master, args.conf)
        running["pipeline"] = once = Pipeline(spec, spark, on_batch=on_batch)
        try:
            with Progress(status, quiet=args.quiet, done=loaded):
                once.run_available()
        finally:
            once.close()
        _summary(once)
        return 0
    install_stop_signals(stop, "stopping after the current micro-batch")
    captures = None if args.no_capture else CaptureProcesses(spec)
    running["captures"] = captures
    progress = Progress(status, quiet=args.quiet, done=loaded).__enter__()
    pipeline: Any = None
    try:
        if captures is not None:
            captures.start()
        running["spark"] = spark = spark_for(spec, args.master, args.conf)
        # PySpark's SparkContext replaces the SIGINT handler with one that raises at once.
        install_stop_signals(stop, "stopping after the current micro-batch")
        running["pipeline"] = pipeline = Pipeline(spec, spark, on_batch=on_batch)
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
        progress.__exit__()
        if pipeline is not None:
            pipeline.close()
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
            f"{s} lsn {format_lsn(c.lsn)} xid {c.xid} ({_count(c.transactions)} transactions)"
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


def _resync(args: argparse.Namespace) -> int:
    from txjoin.capture.resync import resync_table
    from txjoin.changelog.snapshots import ResyncDir
    from txjoin.pg.names import parse_table_name
    from txjoin.spec import load_spec

    spec = load_spec(args.spec)
    table = parse_table_name(args.table)
    owners = [s for s in spec.sources.values() if table in s.tables]
    if not owners:
        raise TxJoinError(
            f"no source of pipeline {spec.name!r} captures {table}: captured tables are "
            f"{sorted(str(t) for s in spec.sources.values() for t in s.tables)}",
            table=str(table),
        )
    source = owners[0]
    done = resync_table(
        source.capture_config(spec.changelog),
        table,
        ResyncDir(spec.changelog, source.name),
        lock_timeout=args.lock_timeout,
    )
    readers = [n for n, o in sorted(spec.outputs.items()) if str(table.table) in o.sql]
    print(
        f"resync of {table} (source {source.name}): {done.rows} rows copied at LSN {format_lsn(done.lsn)} "
        f"in {done.seconds:.1f} s. `txjoin run {args.spec}` applies it: the outputs that read "
        f"{table}{' (' + ', '.join(readers) + ')' if readers else ''} are rebuilt at one cut"
    )
    return 0


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _show(args: argparse.Namespace) -> int:
    from txjoin.sink.delta import DeltaRsStore
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
            f"  cut {s}: lsn {format_lsn(c.lsn)}, xid {c.xid}, {_count(c.transactions)} transactions"
        )
    rows = table.to_pylist()
    print(f"  {len(rows)} rows" + (f" (first {args.limit})" if len(rows) > args.limit else ""))
    cols = table.column_names
    print("  " + " | ".join(cols))
    for r in rows[: args.limit]:
        print("  " + " | ".join("NULL" if r[c] is None else str(r[c]) for c in cols))
    return 0


def add_commands(sub: Any) -> None:
    """Register the pipeline subcommands on the ``txjoin`` parser."""
    run = sub.add_parser("run", help="run a pipeline spec: capture + Spark, until Ctrl-C or SIGTERM")
    run.add_argument("spec", help="pipeline spec file (TOML)")
    run.add_argument("--no-capture", action="store_true", help="capture runs elsewhere; only run Spark")
    run.add_argument(
        "--once", action="store_true", help="catch up from the changelog, then exit (no capture)"
    )
    run.add_argument("--quiet", action="store_true", help="no per-batch lines")
    add_spark_options(run)
    run.set_defaults(func=_run)

    res = sub.add_parser(
        "resync",
        help="copy one table again (after a schema change an output reads) and rebuild its outputs",
    )
    res.add_argument("spec", help="pipeline spec file (TOML)")
    res.add_argument("--table", required=True, help="the table to copy again: schema.table")
    res.add_argument(
        "--lock-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the table's SHARE lock (writers wait while it is copied; "
        "default: %(default)s)",
    )
    res.set_defaults(func=_resync)

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
