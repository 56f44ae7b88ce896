"""Crash points for the crash tests, and deliberate faults for the mutation test.

``TXJOIN_FAULT=<point>[@<n>]`` kills the process with SIGKILL the ``n``-th
time (default: the first) it passes ``point``, exactly as a power cut or
the OOM killer would: no ``finally`` blocks, no flushes. Unset (always, in
production) it costs one dictionary lookup.

Points:

- ``after-replica-commit``: the micro-batch's replica changes and affected
  partitions are durable in the replica store; no output commit yet.
- ``after-output-commit``: one output's Delta commit for the batch is done,
  the others' are not.
- ``snapshot-chunk``: capture wrote one more Parquet chunk of the initial
  snapshot; its manifest is not written yet.
- ``load-file``: the join stage loaded one more snapshot file into the
  replicas, inside the batch's uncommitted transaction.
- ``staged-chunk``: the join stage applied one more chunk of a staged
  transaction, inside the batch's uncommitted transaction.
- ``full-files-written``: Spark wrote an output's full recompute into its
  table's directory; the Delta commit naming those files is not made yet.

Deliberate faults (``TXJOIN_MUTATION=<name>[,<name>...]``): each breaks one
guarantee the way a real bug would, so the mutation test can require that
``txjoin check`` catches it (tests/property/test_check_mutations.py). Never
set in production; unset, :func:`mutated` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["MUTATIONS", "crash_point", "mutated"]

#: name -> what it breaks.
MUTATIONS = {
    "no-before-images": "updates and deletes do not recompute the partition of the row's old values",
    "early-release": "a transaction is released without its last event (which is lost)",
    "binary-collation": "text ordering under the source's collation is accepted and done in byte order",
    "enum-alphabetical": "enum values order by their labels' text, not the enum's declared order",
    "numeric-scale": "numeric values lose their last decimal digit on the way to Spark",
    "jsonb-as-text": "json/jsonb values are embedded in built JSON as quoted strings",
    "partition-leaves": "a partitioned table's changes arrive under its leaves' names and are dropped",
    "double-commit": "a batch's output commit is applied again without the idempotence check (rows doubled)",
    "offset-reader-skips": "txjoin run's changelog reader (by offset) skips tables' segments",
}


def mutated(name: str) -> bool:
    """Whether ``TXJOIN_MUTATION`` names the deliberate fault ``name`` (tests only)."""
    value = os.environ.get("TXJOIN_MUTATION")
    return value is not None and name in value.split(",")


_passes: dict[str, int] = {}


def crash_point(point: str) -> None:
    """Die here if ``TXJOIN_FAULT`` names ``point`` and this is the chosen pass."""
    spec = os.environ.get("TXJOIN_FAULT")
    if not spec:
        return
    name, _, nth = spec.partition("@")
    if name != point:
        return
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
