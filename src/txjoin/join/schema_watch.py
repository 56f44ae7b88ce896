"""The join stage's watch on source schema changes and resyncs, per micro-batch.

Before a batch touches the replicas, :meth:`SchemaWatch.check`:

1. drops the changes a resync supersedes: a table being resynced at LSN S
   (``txjoin resync``, :mod:`txjoin.capture.resync`) takes its rows from the
   resync's copy, so its changes committed at or before S are not applied
   (nor read with columns they may no longer have);
2. compares, per table, the columns each transaction was written with
   (capture's schema records, :class:`~txjoin.changelog.schemas.SchemaHistory`)
   with the replica's view (:mod:`txjoin.join.evolve`): absorbed changes
   update the view, a breaking one refuses the batch with one line naming
   table, column, old -> new and the resync command.

Outputs that read a table with a resync under way are left at their last
version until the resync's copy arrives; that batch rebuilds them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from txjoin.changelog.schemas import SchemaHistory
from txjoin.changelog.snapshots import resync_manifests
from txjoin.debezium.lsn import format_lsn
from txjoin.debezium.topics import table_topic
from txjoin.errors import SchemaChangeError
from txjoin.join.evolve import diff, resync_command
from txjoin.pg.catalog import Column
from txjoin.pg.names import QualifiedName, parse_table_name

__all__ = ["Pending", "SchemaWatch"]

log = logging.getLogger(__name__)

_CHANGES = ("c", "r", "u", "d", "t")


@dataclass(frozen=True)
class Pending:
    """A resync written by ``txjoin resync`` and not yet applied."""

    table: QualifiedName
    lsn: int
    ref: str


class SchemaWatch:
    """Schema records and resyncs of one pipeline's changelog."""

    def __init__(self, changelog: Path, sources: list[str], spec_path: str) -> None:
        self.changelog = Path(changelog)
        self.sources = sources
        self.spec_path = spec_path
        self.history = SchemaHistory(changelog)
        self._resyncs: dict[Path, tuple[str, str, int]] = {}  # committed resyncs read so far

    def pending(self, applied: list[str]) -> dict[QualifiedName, Pending]:
        """Resyncs not applied yet (the latest per table)."""
        out: dict[QualifiedName, Pending] = {}
        for source in self.sources:
            for ref, table, lsn in resync_manifests(self.changelog, source, self._resyncs):
                if ref in applied:
                    continue
                name = parse_table_name(table)
                if name not in out or out[name].lsn < lsn:
                    out[name] = Pending(name, lsn, ref)
        return out

    def superseded(self, rows: pd.DataFrame, bounds: Mapping[QualifiedName, int]) -> pd.DataFrame:
        """``rows`` without the changes of a resynced table committed at or before its resync."""
        if not len(rows) or not bounds:
            return rows
        drop = pd.Series(False, index=rows.index)
        for table, lsn in bounds.items():
            drop |= (rows["table"] == str(table)) & (rows["commit_lsn"] <= lsn) & rows["op"].isin(_CHANGES)
        if drop.any():
            log.info("dropped %d changes superseded by resyncs", int(drop.sum()))
        return rows.loc[~drop]

    def check(
        self,
        rows: pd.DataFrame,
        views: Mapping[QualifiedName, tuple[Column, ...]],
        sources: Mapping[QualifiedName, str],
        readers: Mapping[QualifiedName, Mapping[str, list[str]]],
        keys: Mapping[QualifiedName, tuple[str, ...]],
    ) -> dict[QualifiedName, tuple[Column, ...]]:
        """The replica views the batch's changes need (only the changed ones); raise on a breaking change.

        ``readers``: per table, column -> the outputs that read it.
        """
        out: dict[QualifiedName, tuple[Column, ...]] = {}
        if not len(rows):
            return out
        changes = rows.loc[rows["op"].isin(_CHANGES)]
        for table_text, group in changes.groupby("table", sort=False):
            name = parse_table_name(str(table_text))
            if name not in views:
                continue
            view = views[name]
            topic = table_topic(sources[name], name)
            seen: set[int] = set()
            lsns = sorted(int(x) for x in group["commit_lsn"].unique().tolist())
            for lsn, version in zip(lsns, self.history.at_each(topic, lsns), strict=True):
                if version is None or version[0] in seen:
                    continue
                seen.add(version[0])
                if [(c.name, c.type) for c in view] == list(version[1]):
                    continue
                read = set(readers.get(name, {})) | set(keys[name])
                d = diff(name, view, version[1], read)
                if d.breaking:
                    ch = d.breaking[0]
                    xid = int(group.loc[group["commit_lsn"] == lsn, "xid"].iloc[0])
                    outputs = sorted(readers.get(name, {}).get(ch.column, [])) or ["(the primary key)"]
                    raise SchemaChangeError(
                        f"{name}: {ch.line()} at the source (LSN {format_lsn(version[0])}, first in "
                        f"transaction {xid}); read by {', '.join(outputs)}. Nothing past the last good cut "
                        f"was committed. Run `{resync_command(self.spec_path, name)}`, then txjoin run again",
                        table=str(name),
                        column=ch.column,
                        old=ch.old,
                        new=ch.new,
                        xid=xid,
                    )
                if d.view != view:
                    for ch in (c for c in d.absorbed if c.kind != "added"):
                        log.warning(
                            "%s: %s at the source; no output reads it as changed: continuing", name, ch.line()
                        )
                    view = d.view
                    out[name] = view
        return out
