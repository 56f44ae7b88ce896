"""Every Delta version of every output against the oracle at its cut.

The contract: each version equals its SQL on the sources at the version's cut,
and cuts never go back. :func:`check_versions` checks both for whole output
histories (``txjoin check``, the scenarios, the property tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from txjoin.cut import Cut
from txjoin.join.plan import OutputPlan
from txjoin.sink.delta import DeltaRsStore, DeltaStore
from txjoin.spec import PipelineSpec
from txjoin.verify.compare import compare_rows
from txjoin.verify.oracle import Oracle

__all__ = ["Violation", "check_versions"]


@dataclass
class Violation:
    output: str
    version: int
    cut: dict[str, Cut]
    detail: str

    def __str__(self) -> str:
        cut = ", ".join(f"{s} xid {c.xid}" for s, c in sorted(self.cut.items()))
        return f"{self.output} version {self.version} (cut {cut}): {self.detail}"


def check_versions(
    plans: Mapping[str, OutputPlan], spec: PipelineSpec, oracle: Oracle, delta: DeltaStore | None = None
) -> tuple[dict[str, int], list[Violation]]:
    """Compare every Delta version of every output with the oracle at its cut."""
    delta = delta or DeltaRsStore()
    versions: dict[str, int] = {}
    violations: list[Violation] = []
    for name, plan in plans.items():
        path = spec.outputs[name].path
        if not delta.exists(path):
            violations.append(Violation(name, -1, {}, f"no Delta table at {path}"))
            continue
        last: dict[str, int] = {}
        history = delta.history(path)
        versions[name] = len(history)
        for commit in history:
            cut = commit.cut
            for s, c in cut.items():
                if c.lsn < last.get(s, -1):
                    violations.append(
                        Violation(name, commit.version, cut, f"the cut of source {s} went back")
                    )
                last[s] = c.lsn
            if not oracle.known(name, cut):
                violations.append(
                    Violation(name, commit.version, cut, "its cut names a transaction never committed")
                )
                continue
            got = delta.read(path, commit.version).to_pylist()
            diff = compare_rows(
                got,
                oracle.expected(name, cut),
                plan.columns,
                json_columns=plan.json_columns,
                unordered_columns=plan.unordered_columns,
            )
            if diff:
                violations.append(
                    Violation(
                        name, commit.version, cut, "differs from the SQL on PostgreSQL:\n" + diff.describe()
                    )
                )
    return versions, violations
