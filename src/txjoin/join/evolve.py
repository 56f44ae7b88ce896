"""Source schema changes, as the join stage meets them in the changelog.

The replica store keeps its own view of each table's columns (the store's
``schemas`` metadata): the columns it holds values for, with their types.
Capture records a table's columns whenever pgoutput's Relation message
changes them (:mod:`txjoin.changelog.schemas`); a transaction that commits
after that record was written with the new columns. :func:`diff` compares the
two and sorts what changed:

- absorbed: a column no output reads was added, dropped, renamed or retyped
  (it leaves the view; an output that later reads it needs a resync), or a
  read column changed to a type whose values and computations are the same
  (:func:`same_values`: ``varchar(n)`` to a longer ``varchar`` or ``text``);
- breaking: any other change to a column an output reads, or to the primary
  key. The batch is refused before anything is committed, naming
  ``txjoin resync SPEC --table T``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from txjoin.pg.catalog import Column, Table
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = [
    "Change",
    "Diff",
    "diff",
    "resync_command",
    "same_values",
    "shown",
    "view_of",
]


def shown(t: ColumnType) -> str:
    """A type as a user writes it: 'integer'-style names are PostgreSQL's typnames ('int4')."""
    if t.name in ("varchar", "bpchar") and t.typmod >= 4:
        return f"{t.name}({t.typmod - 4})"
    if t.name == "_varchar" and t.typmod >= 4:
        return f"varchar({t.typmod - 4})[]"
    return t.label if not t.is_array else t.element.label + "[]"


def same_values(old: ColumnType, new: ColumnType) -> bool:
    """Whether every value of ``old`` is the same value of ``new``, computed the same way."""
    if (old.oid, old.typmod) == (new.oid, new.typmod):
        return True
    if old.name == "varchar" and new.name == "text":
        return True
    if old.name == new.name == "varchar":
        return new.typmod < 0 or (old.typmod >= 0 and new.typmod >= old.typmod)
    return False


@dataclass(frozen=True)
class Change:
    """One column's change: ``kind`` is 'added', 'dropped', 'renamed' or 'type'."""

    table: QualifiedName
    kind: str
    column: str
    old: str
    new: str

    def line(self) -> str:
        if self.kind == "type":
            return f"column {self.column} changed type {self.old} -> {self.new}"
        if self.kind == "renamed":
            return f"column {self.old} was renamed -> {self.new}"
        if self.kind == "dropped":
            return f"column {self.column} ({self.old}) was dropped -> (none)"
        return f"column {self.column} ({self.new}) was added"


@dataclass(frozen=True)
class Diff:
    """What changed between the replica's view of a table and the source's columns."""

    absorbed: tuple[Change, ...]
    breaking: tuple[Change, ...]
    #: The replica's view after absorbing (only meaningful without breaking changes).
    view: tuple[Column, ...]


def diff(
    table: QualifiedName,
    view: Sequence[Column],
    source: Sequence[tuple[str, ColumnType]],
    read: Iterable[str],
) -> Diff:
    """Compare the replica's ``view`` of ``table`` with the ``source``'s columns now.

    ``read``: the columns outputs read, plus the primary key.
    """
    read = set(read)
    new = dict(source)
    old_names = [c.name for c in view]
    new_names = [n for n, _ in source]
    absorbed: list[Change] = []
    breaking: list[Change] = []
    kept: list[Column] = []
    gone = [n for n in old_names if n not in new]
    added = [n for n in new_names if n not in set(old_names)]
    renamed: dict[str, str] = {}
    if len(old_names) == len(new_names):  # same place, same type, new name: a rename
        for i, n in enumerate(old_names):
            m = new_names[i]
            if n in gone and m in added and view[i].type == new[m]:
                renamed[n] = m
    for c in view:
        name = c.name
        if name in new and same_values(c.type, new[name]):
            kept.append(replace(c, type=new[name]) if c.type != new[name] else c)
            if c.type != new[name]:
                absorbed.append(Change(table, "type", name, shown(c.type), shown(new[name])))
            continue
        if name in renamed:
            change = Change(table, "renamed", name, name, renamed[name])
        elif name in new:
            change = Change(table, "type", name, shown(c.type), shown(new[name]))
        else:
            change = Change(table, "dropped", name, shown(c.type), "")
        (breaking if name in read else absorbed).append(change)
    for n in added:
        if n not in renamed.values():
            absorbed.append(Change(table, "added", n, "", shown(new[n])))
    return Diff(tuple(absorbed), tuple(breaking), tuple(kept))


def view_of(table: Table, columns: Sequence[Column] | None) -> tuple[Table, list[str]]:
    """``table`` as the replica holds it (``columns``: the store's view; None: the catalog's),
    and the catalog's columns the view hides or types differently."""
    if columns is None:
        return table, []
    catalog = {c.name: c for c in table.columns}
    hidden = [n for n, c in catalog.items() if all(v.name != n or v.type != c.type for v in columns)]
    return replace(table, columns=tuple(columns)), hidden


def resync_command(spec_path: str, table: QualifiedName | str) -> str:
    return f"txjoin resync {spec_path} --table {table}"
