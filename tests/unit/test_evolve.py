"""Schema changes sorted into absorbed and breaking (txjoin.join.evolve), and the schema
records read back in LSN order (txjoin.changelog.schemas.SchemaHistory)."""

from __future__ import annotations

from pathlib import Path

from txjoin.changelog.schemas import SchemaHistory, SchemaLog
from txjoin.join.evolve import diff, same_values
from txjoin.pg.catalog import Column
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

T = QualifiedName("public", "t")
INT4 = ColumnType(23, "int4")
INT8 = ColumnType(20, "int8")
TEXT = ColumnType(25, "text")
NUM_10_2 = ColumnType(1700, "numeric", ((10 << 16) | 2) + 4)
NUM_12_3 = ColumnType(1700, "numeric", ((12 << 16) | 3) + 4)


def varchar(n: int) -> ColumnType:
    return ColumnType(1043, "varchar", n + 4)


VIEW = (Column("id", INT4), Column("v", NUM_10_2), Column("name", varchar(10)), Column("junk", INT4))
READ = {"id", "v", "name"}


def _source(**changes: ColumnType | None) -> list[tuple[str, ColumnType]]:
    out = []
    for c in VIEW:
        if c.name in changes:
            t = changes[c.name]
            if t is not None:
                out.append((c.name, t))
        else:
            out.append((c.name, c.type))
    return out


def test_unread_columns_are_absorbed_and_leave_the_view() -> None:
    d = diff(T, VIEW, [*_source(junk=TEXT), ("extra", INT4)], READ)
    assert not d.breaking
    assert [c.name for c in d.view] == ["id", "v", "name"]
    assert {(c.kind, c.column) for c in d.absorbed} == {("type", "junk"), ("added", "extra")}
    dropped = diff(T, VIEW, _source(junk=None), READ)
    assert not dropped.breaking
    assert [c.name for c in dropped.view] == ["id", "v", "name"]


def test_read_columns_break_with_old_and_new_named() -> None:
    d = diff(T, VIEW, _source(v=NUM_12_3), READ)
    assert [c.line() for c in d.breaking] == ["column v changed type numeric(10,2) -> numeric(12,3)"]
    d = diff(T, VIEW, _source(name=None), READ)
    assert [(c.kind, c.column) for c in d.breaking] == [("dropped", "name")]
    assert d.breaking[0].line() == "column name (varchar(10)) was dropped -> (none)"
    renamed = [("id", INT4), ("value", NUM_10_2), ("name", varchar(10)), ("junk", INT4)]
    d = diff(T, VIEW, renamed, READ)
    assert [c.line() for c in d.breaking] == ["column v was renamed -> value"]
    d = diff(T, VIEW, _source(id=INT8), READ)
    assert [(c.kind, c.column, c.new) for c in d.breaking] == [("type", "id", "int8")]


def test_only_types_that_keep_every_value_are_absorbed_on_read_columns() -> None:
    d = diff(T, VIEW, _source(name=varchar(40)), READ)
    assert not d.breaking
    assert d.view[2].type == varchar(40)
    assert not diff(T, VIEW, _source(name=TEXT), READ).breaking
    assert diff(T, VIEW, _source(name=varchar(5)), READ).breaking  # values may not fit
    assert same_values(varchar(10), ColumnType(1043, "varchar", -1))
    assert not same_values(INT4, INT8)  # Spark reads them as different types
    assert not same_values(NUM_10_2, NUM_12_3)


def test_schema_history_orders_records_by_lsn(tmp_path: Path) -> None:
    log = SchemaLog(tmp_path)
    new = [Column("id", INT4), Column("v", NUM_12_3)]
    old = [Column("id", INT4), Column("v", NUM_10_2)]
    log.record("s.public.t", lsn=100, relation_oid=1, columns=old, primary_key=["id"])
    log.record("s.public.t", lsn=500, relation_oid=1, columns=new, primary_key=["id"])
    # A capture restart re-reads an older transaction and records its columns again.
    log.record("s.public.t", lsn=300, relation_oid=1, columns=old, primary_key=["id"])
    history = SchemaHistory(tmp_path)
    at = history.at
    assert at("s.public.t", 100) is None  # written before the first record: unknown
    v = at("s.public.t", 400)
    assert v is not None
    assert v[1][1] == ("v", NUM_10_2)
    v = at("s.public.t", 501)
    assert v is not None
    assert v[1][1] == ("v", NUM_12_3)
    assert at("s.public.other", 501) is None
    # Many transactions at once (a batch): the version recorded last before each commit LSN.
    found = history.at_each("s.public.t", [99, 100, 101, 300, 301, 500, 501])
    assert [None if v is None else v[0] for v in found] == [None, None, 100, 100, 300, 300, 500]
    assert history.at_each("s.public.other", [1, 2]) == [None, None]
