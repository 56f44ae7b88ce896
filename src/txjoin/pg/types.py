"""PostgreSQL column types as the catalog and pgoutput describe them.

A type is ``(oid, pg_type.typname, atttypmod)``: the same three facts reach
txjoin from the catalog (``pg_attribute``), from pgoutput's Relation
messages and from the changelog's schema side files, so one class serves
all of them. Conversions of *values* live with the formats that carry them
(:mod:`txjoin.debezium.values`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ColumnType"]


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column's type: its oid, ``pg_type.typname`` and type modifier."""

    oid: int
    #: ``pg_type.typname``: 'int4', '_int4' (array of int4), 'numeric' ...
    name: str
    typmod: int = -1

    @property
    def is_array(self) -> bool:
        return self.name.startswith("_")

    @property
    def element(self) -> ColumnType:
        if not self.is_array:
            raise ValueError(f"{self.name} is not an array type")
        return ColumnType(0, self.name[1:], self.typmod)

    @property
    def numeric_precision_scale(self) -> tuple[int, int] | None:
        """``(precision, scale)`` of ``numeric(p, s)``; None when unconstrained."""
        if self.name != "numeric" or self.typmod < 4:
            return None
        m = self.typmod - 4
        precision = (m >> 16) & 0xFFFF
        scale = m & 0xFFFF
        if scale >= 0x8000:  # PostgreSQL 15 allows negative scales
            scale -= 0x10000
        return precision, scale

    @property
    def label(self) -> str:
        """The type name plus the modifiers that change how values are written
        ('numeric(10,2)', 'bpchar(3)', '_int4'): what the planner's type rules read."""
        if self.is_array:
            return "_" + self.element.label
        ps = self.numeric_precision_scale
        if ps is not None:
            return f"numeric({ps[0]},{ps[1]})"
        if self.name == "bpchar" and self.typmod >= 4:
            return f"bpchar({self.typmod - 4})"
        return self.name
