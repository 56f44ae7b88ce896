"""Crash points for the crash tests.

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
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point"]

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
