"""The ``txjoin`` command line.

Commands by what they work on: the sources (:mod:`.source`: ``db``,
``capture``, ``slots``), a pipeline (:mod:`.pipeline`: ``run``, ``verify``,
``show``) and its tests (:mod:`.testing`: ``check``, ``scenario``).

Errors reach the user as one line (``txjoin: error: ...``) with exit status 2;
``--debug`` shows the traceback. Passwords never appear: DSNs are printed as
``user@host:port/db``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from txjoin import __version__
from txjoin.cli import pipeline, source, testing
from txjoin.errors import TxJoinError
from txjoin.session import finish_class_archive

__all__ = ["build_parser", "command", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="txjoin",
        description="Joined Delta tables from PostgreSQL change streams, consistent at every version.",
    )
    p.add_argument("--version", action="version", version=f"txjoin {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    source.add_commands(sub)
    pipeline.add_commands(sub)
    testing.add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if args.debug else "txjoin: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.debug:
        for noisy in ("py4j", "pyspark"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        # py4j logs "There was an exception while executing the Python Proxy on the Python Side"
        # at ERROR beside the error txjoin reports itself in one line.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        rc: int = args.func(args)
        return rc
    except TxJoinError as e:
        if args.debug:
            raise
        print(f"txjoin: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("txjoin: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"txjoin: error: {type(e).__name__}: {text} (run with --debug for details)", file=sys.stderr)
        return 1


def command() -> None:
    """The ``txjoin`` executable: :func:`main`, then exit without tearing down the interpreter.

    Everything txjoin writes is committed explicitly before ``main`` returns; what teardown
    would add is Spark's callback threads still running and DuckDB's bindings reporting the
    objects those threads hold as leaks.
    """
    rc = main()
    finish_class_archive()  # os._exit skips atexit, where a session would write it
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
