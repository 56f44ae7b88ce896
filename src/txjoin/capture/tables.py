"""A captured table as capture sees it: its topic, columns and value converters.

Built from pgoutput's Relation message while streaming, or from the catalog
for the snapshot; either way rows become Debezium JSON values here.
"""

from __future__ import annotations

from typing import Any

from txjoin.capture.pgoutput import UNCHANGED_TOAST
from txjoin.capture.writer import ChangelogWriter
from txjoin.debezium.values import UNAVAILABLE, converter
from txjoin.pg.catalog import Column
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = ["CapturedTable"]


class CapturedTable:
    """A captured relation: topic, column names and value converters."""

    __slots__ = ("columns", "convs", "key_idx", "name", "names", "oid", "pk_idx", "topic")

    def __init__(
        self,
        oid: int,
        name: QualifiedName,
        topic: str,
        columns: list[ColumnType],
        names: list[str],
        key_idx: list[int],
        pk_idx: list[int],
    ) -> None:
        self.oid = oid
        self.name = name
        self.topic = topic
        self.columns = columns
        self.names = names
        self.convs = [converter(c) for c in columns]
        # Replica identity columns (what a 'K' old tuple carries; under FULL
        # that is every column) and the primary key (what identifies a row).
        self.key_idx = key_idx
        self.pk_idx = pk_idx

    def row(self, values: tuple[Any, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n, conv, v in zip(self.names, self.convs, values, strict=True):
            if v is None:
                out[n] = None
            elif v is UNCHANGED_TOAST:
                out[n] = UNAVAILABLE
            else:
                out[n] = conv(v)
        return out

    def key_row(self, values: tuple[Any, ...]) -> dict[str, Any]:
        # A 'K' old tuple carries every column, non-key ones as NULL; Debezium
        # shows only the identity columns.
        return {
            self.names[i]: self.convs[i](values[i]) if values[i] is not None else None for i in self.key_idx
        }

    def record_schema(self, writer: ChangelogWriter, lsn: int) -> None:
        """Record this table's columns beside the changelog (when they changed)."""
        writer.record_schema(
            self.topic,
            lsn=lsn,
            relation_oid=self.oid,
            columns=[Column(n, c) for n, c in zip(self.names, self.columns, strict=True)],
            primary_key=[self.names[i] for i in self.pk_idx],
        )
