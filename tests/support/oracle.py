"""The consistency oracle: the outputs' SQL on PostgreSQL after every commit.

The harness commits one transaction at a time and, before the next commit,
runs every output's SQL on the source, keyed by the committed xid. Each
Delta version records its cut (per source: commit LSN and xid of the last
transaction included); the version must equal the recorded result at that
xid, for every source of the output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras

from txjoin.join.plan import OutputPlan
from txjoin.pg.connect import exact_text
from txjoin.sink.delta import DeltaRsStore
from txjoin.verify.compare import compare_rows


class Oracle:
    def __init__(self, dsn: str, outputs: dict[str, str]) -> None:
        self.conn = exact_text(psycopg2.connect(dsn))
        self.conn.autocommit = True
        self.outputs = outputs
        #: output -> xid -> rows
        self.results: dict[str, dict[int, list[dict[str, Any]]]] = {o: {} for o in outputs}

    def query(self, output: str) -> list[dict[str, Any]]:
        with self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(self.outputs[output])
            return [dict(r) for r in cur.fetchall()]

    def record(self, xid: int) -> None:
        for o in self.outputs:
            self.results[o][xid] = self.query(o)

    def close(self) -> None:
        self.conn.close()


def check_every_version(
    plan: OutputPlan, path: Path, source: str, expected: dict[int, list[dict[str, Any]]]
) -> int:
    """Assert every version of the output at ``path`` equals ``expected`` at its cut.

    Returns the number of versions checked.
    """
    delta = DeltaRsStore()
    history = delta.history(path)
    assert history, f"output {plan.name} has no versions"
    last_lsn = -1
    for commit in history:
        cut = commit.cut[source]
        assert cut.lsn >= last_lsn, f"version {commit.version}: cut went backwards"
        last_lsn = cut.lsn
        want = expected.get(cut.xid)
        assert want is not None, f"version {commit.version}: cut xid {cut.xid} was never recorded"
        got = delta.read(path, commit.version).to_pylist()
        diff = compare_rows(
            got, want, plan.columns, json_columns=plan.json_columns, unordered_columns=plan.unordered_columns
        )
        assert not diff, (
            f"{plan.name} version {commit.version} (cut xid {cut.xid}) differs:\n{diff.describe()}"
        )
    return len(history)


def wait_until(
    cond: Callable[[], bool], timeout: float, what: str, check: Callable[[], None] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
