"""Run an output's SQL on PostgreSQL over the source tables as they were at a cut.

A Delta version of an output records its cut: per source, the commit LSN of
the last transaction it includes. :func:`tables_at_cut` rebuilds each
source table at that LSN by replaying the changelog (strictly: a lost or
duplicated event is an error, see :mod:`txjoin.verify.replay`), and
:func:`txjoin.verify.oracle.evaluate` loads those rows into temporary tables
on a PostgreSQL connection and runs the output's SQL there, with its table
names pointed at the temporary tables. Nothing is written to the user's
schemas; the temporary tables disappear with the transaction.

:func:`verify_output` puts it together for ``txjoin verify``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.changelog import read_table
from txjoin.debezium.topics import table_topic
from txjoin.errors import ConfigError, SinkError
from txjoin.pg.connect import connect
from txjoin.pg.names import QualifiedName
from txjoin.sink.delta import DeltaRsStore, DeltaStore, OutputVersion
from txjoin.verify.compare import Difference, compare_rows
from txjoin.verify.oracle import TableState, evaluate
from txjoin.verify.replay import replay

__all__ = ["VerifyResult", "tables_at_cut", "verify_output"]


def tables_at_cut(
    changelog: Path, source: str, tables: Sequence[QualifiedName], lsn: int
) -> dict[QualifiedName, TableState]:
    """``tables`` of ``source`` as of commit LSN ``lsn``, replayed from the changelog."""
    result = replay(changelog, source, [str(t) for t in tables], until_lsn=lsn)
    out = {}
    for t in tables:
        table = read_table(changelog, table_topic(source, t), source, t)
        out[t] = TableState(table, list(result.tables[str(t)].values()))
    return out


@dataclass
class VerifyResult:
    output: str
    version: int
    commit: OutputVersion
    output_rows: int
    source_rows: int
    difference: Difference

    @property
    def ok(self) -> bool:
        return not self.difference


def verify_output(
    spec: Any,
    output: str,
    version: int | None = None,
    *,
    delta: DeltaStore | None = None,
) -> VerifyResult:
    """Compare one output at ``version`` (default: latest) with its SQL on PostgreSQL at the version's cut."""
    from txjoin.join.planned import plan_outputs

    if output not in spec.outputs:
        raise ConfigError(
            f"pipeline {spec.name!r} has no output {output!r}: outputs are {sorted(spec.outputs)}"
        )
    delta = delta or DeltaRsStore()
    out = spec.outputs[output]
    if not delta.exists(out.path):
        raise SinkError(f"output {output!r} has no Delta table at {out.path} yet: run the pipeline first")
    history = delta.history(out.path)
    commit = history[-1] if version is None else next((c for c in history if c.version == version), None)
    if commit is None:
        why = (
            f"the Delta log keeps versions for output_log_retention = {spec.options.output_log_retention!r}; "
            "raise it in [options] to keep more"
            if version is not None and version < history[0].version
            else "it has not been written yet"
        )
        raise SinkError(
            f"output {output!r} has no version {version}: versions are {history[0].version}.."
            f"{history[-1].version} ({why})"
        )
    if not commit.cut:
        raise SinkError(f"version {commit.version} of {out.path} has no txjoin cut in its commit metadata")
    planned = plan_outputs(spec, outputs=[output])
    plan = planned.plans[output]
    states: dict[QualifiedName, TableState] = {}
    for source_name, cut in commit.cut.items():
        tables = [t for t in plan.tables if planned.tables[t].source == source_name]
        states.update(tables_at_cut(spec.changelog, source_name, tables, cut.lsn))
    first = spec.sources[next(iter(commit.cut))]
    conn = connect(first.dsn)
    try:
        expected = evaluate(conn, out.sql, states)
    finally:
        conn.close()
    got = delta.read(out.path, commit.version).to_pylist()
    diff = compare_rows(
        got, expected, plan.columns, json_columns=plan.json_columns, unordered_columns=plan.unordered_columns
    )
    return VerifyResult(output, commit.version, commit, len(got), len(expected), diff)
