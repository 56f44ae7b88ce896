"""A pipeline's outputs, planned over its sources' tables.

:func:`plan_outputs` reads every source's catalog once
(:func:`txjoin.pg.catalog.describe`) and plans every output over the planner's
view of those tables (:func:`table_info`). The pipeline, ``txjoin verify``
and ``txjoin check`` all start here; the replica store's view of the tables
(:meth:`Planned.replica_tables`) follows from the same plans.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from txjoin.changelog.snapshots import read_manifest
from txjoin.debezium.topics import table_topic
from txjoin.errors import SchemaChangeError, UnsupportedQuery
from txjoin.join.evolve import resync_command, view_of
from txjoin.join.plan import OutputPlan, TableInfo, plan_output
from txjoin.join.replica import TableSpec, read_meta
from txjoin.join.schema_watch import SchemaWatch
from txjoin.pg.catalog import Column, Table, column_from_json, describe_source
from txjoin.pg.names import QualifiedName
from txjoin.spec import PipelineSpec

__all__ = ["Planned", "describe_sources", "plan_outputs", "plan_pipeline", "table_info"]


def table_info(table: Table) -> TableInfo:
    """The planner's view of a table: names, key and the type labels its rules read."""
    return TableInfo(
        table.name,
        table.source,
        table.column_names,
        table.primary_key,
        types={c.name: f"enum:{c.type.name}" if c.enum_labels else c.type.label for c in table.columns},
        collations={c.name: c.collation for c in table.columns if c.collation},
        enums={c.name: c.enum_labels for c in table.columns if c.enum_labels},
        default_collation=table.default_collation,
        default_collated=frozenset(c.name for c in table.columns if c.collation_is_default),
    )


def describe_sources(spec: PipelineSpec) -> dict[QualifiedName, Table]:
    """Every captured table of ``spec``, from its source's catalog."""
    tables: dict[QualifiedName, Table] = {}
    for s in spec.sources.values():
        tables.update(describe_source(s.dsn, s.name, s.tables))
    return tables


@dataclass(frozen=True)
class Planned:
    """The tables (as the catalog describes them) and the plan of every output."""

    tables: Mapping[QualifiedName, Table]
    plans: Mapping[str, OutputPlan]
    _used: dict[QualifiedName, set[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def sources_of(self, output: str) -> set[str]:
        """The sources an output reads."""
        return {self.tables[t].source for t in self.plans[output].tables}

    def used_by_table(self) -> dict[QualifiedName, set[str]]:
        """Per table, the columns some output's SQL reads."""
        return {t: self.used_columns(t) for t in self.tables}

    def used_columns(self, table: QualifiedName) -> set[str]:
        """Columns of ``table`` some output's SQL reads."""
        if not self._used:
            for p in self.plans.values():
                for alias, cols in p.used_columns.items():
                    self._used.setdefault(p.aliases[alias].name, set()).update(cols)
        return self._used.get(table, set())

    def replica_tables(self) -> list[TableSpec]:
        """The replica store's view: each table's key and the columns lookups need."""
        indexed: dict[QualifiedName, set[str]] = {t: set() for t in self.tables}
        arrays: dict[QualifiedName, set[str]] = {t: set() for t in self.tables}
        for p in self.plans.values():
            for t, cols in p.index_columns().items():
                indexed[t] |= cols
            for t, cols in p.array_columns().items():
                arrays[t] |= cols
        out = []
        for t, table in self.tables.items():
            pk = table.primary_key
            # A one-column primary key is the store's own key: no extra index.
            idx = indexed[t] - set(pk[:1]) if len(pk) == 1 else indexed[t]
            columns = tuple((c.name, c.type) for c in table.columns)
            out.append(TableSpec(t, pk, columns, frozenset(idx), frozenset(arrays[t])))
        return out


def plan_outputs(
    spec: PipelineSpec,
    tables: Mapping[QualifiedName, Table] | None = None,
    *,
    outputs: Iterable[str] | None = None,
) -> Planned:
    """Plan the ``outputs`` of ``spec`` (default: all); ``tables`` defaults to the sources' catalogs."""
    if tables is None:
        tables = describe_sources(spec)
    infos = {t: table_info(table) for t, table in tables.items()}
    names = list(spec.outputs) if outputs is None else list(outputs)
    plans = {n: plan_output(n, spec.outputs[n].sql, spec.outputs[n].key, infos) for n in names}
    return Planned(dict(tables), plans)


def plan_pipeline(spec: PipelineSpec, tables: Mapping[QualifiedName, Table] | None = None) -> Planned:
    """Plan ``spec``'s outputs over the tables as its replica store holds them.

    A table whose columns changed at the source since its replica was built
    is planned with the replica's columns (the changelog still holds changes
    written with them); an output that reads a column only the source has
    is refused with the command that resyncs the table.
    """
    if tables is None:
        tables = describe_sources(spec)
    meta = read_meta(spec.replicas, "schemas", "resynced")
    stored = dict(meta.get("schemas") or {})
    # A resync not applied yet: its table is planned with the copy's columns (the outputs
    # reading it wait for the copy; the table's older changes are skipped).
    watch = SchemaWatch(spec.changelog, sorted(spec.sources), str(spec.path or "SPEC"))
    for name, pending in watch.pending(list(meta.get("resynced") or [])).items():
        resync = read_manifest(spec.changelog, pending.ref).resync
        if resync is not None:
            stored[str(name)] = resync["columns"]
    viewed: dict[QualifiedName, Table] = {}
    hidden: dict[QualifiedName, list[str]] = {}
    for name, table in tables.items():
        cols = stored.get(str(name))
        columns = None if cols is None else [column_from_json(c) for c in cols]
        if columns is None:
            # No batch yet: the columns of the snapshot (capture's first record), which
            # the catalog no longer shows if the table changed since.
            versions = watch.history.versions(table_topic(table.source, name))
            if versions:
                catalog = {(c.name, c.type): c for c in table.columns}
                columns = [catalog.get((n, t), Column(n, t)) for n, t in versions[0][1]]
        view, hidden[name] = view_of(table, columns)
        viewed[name] = view
    try:
        return plan_outputs(spec, viewed)
    except UnsupportedQuery as e:
        output = str(e.details.get("output", ""))
        sql = spec.outputs[output].sql if output in spec.outputs else ""
        for name, cols in hidden.items():
            for col in cols:
                if re.search(rf"(?<![\w$]){re.escape(col)}(?![\w$])", sql, re.IGNORECASE):
                    new = tables[name].column(col).formatted or tables[name].column(col).type.label
                    raise SchemaChangeError(
                        f"output {output!r} reads {name}.{col} ({new}), which the pipeline's replica of "
                        f"{name} does not hold: the column was added or changed at the source after the "
                        f"replica was built. Run `{resync_command(str(spec.path or 'SPEC'), name)}` "
                        "(it copies the table again and rebuilds the outputs that read it), then txjoin run",
                        table=str(name),
                        column=col,
                        output=output,
                    ) from None
        raise
