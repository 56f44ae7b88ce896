"""The Delta seam on real Delta tables (delta-rs, on disk): replacing partitions.

A batch can touch tens of thousands of partitions (a busy source, a slow
batch); delta-rs overflowed its stack on an IN list of 57,971 keys and killed
the process. These tests replace that many and check the table's content.

The store keeps the tables it opened and brings them up to date rather than
reopening them; the next tests check that it never answers from a stale one.
The last ones have the store compact small files and read every version, and
check the Parquet settings its files are written with.
"""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
from decimal import Decimal
from math import nan
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from txjoin.cut import Cut
from txjoin.sink.delta import DICTIONARY_PAGE_BYTES, DeltaRsStore
from txjoin.sink.keys import (
    IS_TRUE_TERMS,
    MAX_PREDICATE_TERMS,
    KeySet,
    NoLiteral,
    Span,
    TooLong,
    file_pieces,
    files_to_read,
    int_runs,
    partition_predicate,
    range_column,
    range_is_cheaper,
    range_pieces,
    span,
    sql_literal,
)


def _commit(store: DeltaRsStore, path: Path, rows: pa.Table, parts: list[list[Any]] | None, batch: int) -> int:
    return store.replace_partitions(
        path, rows, key=["id"], partition_cols=["id"], partitions=parts,
        cut={"s": Cut(batch)}, batch=batch, app_id="test",
    )  # fmt: skip


def _table(ids: list[int | None], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def _content(store: DeltaRsStore, path: Path) -> dict[int | None, str]:
    t = store.read(path).to_pylist()
    ids = [r["id"] for r in t]
    assert len(ids) == len(set(ids)), "a key appears twice"
    return {r["id"]: r["v"] for r in t}


def test_int_runs_split_consecutive_keys() -> None:
    assert int_runs([7, 1, 2, 3, 9, 10, 5, 3]) == ([5, 7, 9, 10], [(1, 3)])
    assert int_runs([]) == ([], [])


def test_predicate_compresses_runs_and_refuses_past_the_limit() -> None:
    pred, terms = partition_predicate(["id"], [[i] for i in range(100_000)] + [[None]])
    assert pred == '("id" >= 0 AND "id" <= 99999) OR "id" IS NULL'
    assert terms == 3
    assert partition_predicate(["id"], [[1], [5], [9], [10], [11]]) == (
        '"id" IN (1, 5) OR ("id" >= 9 AND "id" <= 11)',
        4,
    )
    assert partition_predicate(["a", "b"], [[1, None], [2, "x"]]) == (
        '("a" = 1 AND "b" IS NULL) OR ("a" = 2 AND "b" = \'x\')',
        4,
    )
    # Long predicates too, where IS TRUE plans faster.
    pred, terms = partition_predicate(["id"], [[2 * i] for i in range(IS_TRUE_TERMS)])
    assert (terms, pred[:9], pred[-9:]) == (IS_TRUE_TERMS, '("id" IN ', ") IS TRUE")
    assert not partition_predicate(["id"], [[2 * i] for i in range(IS_TRUE_TERMS - 1)])[0].endswith("IS TRUE")
    with pytest.raises(TooLong):
        partition_predicate(["id"], [[2 * i] for i in range(MAX_PREDICATE_TERMS + 1)])
    with pytest.raises(TooLong):
        partition_predicate(["k"], [[f"s{i}"] for i in range(MAX_PREDICATE_TERMS + 1)])


def test_floats_compare_as_postgresql_does() -> None:
    """NaN is one key (isnan: nan would be a column's name); -0.0 and 0.0 are one key."""
    inf = float("inf")
    assert sql_literal(inf) == "CAST('Infinity' AS DOUBLE)"
    assert sql_literal(-inf) == "CAST('-Infinity' AS DOUBLE)"
    assert sql_literal(nan) == "CAST('NaN' AS DOUBLE)"
    with pytest.raises(NoLiteral):
        sql_literal(Decimal("NaN"))
    # Floating-point keys are matched under IS TRUE: Parquet's statistics leave NaN out.
    assert partition_predicate(["k"], [[nan], [1.5], [None]]) == (
        '("k" IN (1.5) OR isnan("k") OR "k" IS NULL) IS TRUE',
        3,
    )
    assert partition_predicate(["k"], [[nan]]) == ('(isnan("k")) IS TRUE', 1)
    assert partition_predicate(["a", "b"], [[1, nan], [2, -0.0]]) == (
        '(("a" = 1 AND isnan("b")) OR ("a" = 2 AND "b" IN (0.0, -0.0))) IS TRUE',
        4,
    )
    assert partition_predicate(["a", "b"], [[1, None]]) == ('("a" = 1 AND "b" IS NULL)', 2)
    assert not range_is_cheaper(_files((10, 0, 5)), "id", [[nan], [1.0]], 4_000)  # NaN has no place in a range


def test_numerics_and_timestamps_have_literals_of_the_columns_type() -> None:
    """A bare 123456789012.000001 is a double to DataFusion, and CAST(... AS TIMESTAMP) nanoseconds,
    which delta-rs's kernel refuses to compare with Delta's microseconds."""
    d38 = pa.decimal128(38, 6)
    assert sql_literal(Decimal("123456789012.000001"), d38) == "CAST('123456789012.000001' AS DECIMAL(38,6))"
    assert sql_literal(Decimal("1E+2"), pa.decimal128(10, 0)) == "CAST('100' AS DECIMAL(10,0))"
    with pytest.raises(NoLiteral):
        sql_literal(Decimal("1.5"))  # no type, no literal: the sink rewrites instead
    with pytest.raises(NoLiteral):
        sql_literal(Decimal("1.0000005"), d38)  # CAST would round it to 1.000001
    with pytest.raises(NoLiteral):
        sql_literal(Decimal("1E+200"), d38)
    assert sql_literal(Decimal("1.50000000"), d38) == "CAST('1.50000000' AS DECIMAL(38,6))"
    naive = dt.datetime(2024, 1, 1, 0, 0, 0, 999999)
    assert sql_literal(naive) == "arrow_cast('2024-01-01T00:00:00.999999', 'Timestamp(Microsecond, None)')"
    amsterdam = dt.datetime(2024, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert sql_literal(amsterdam) == (
        """arrow_cast('2024-01-01T00:00:00+00:00', 'Timestamp(Microsecond, Some("UTC"))')"""
    )
    assert partition_predicate(["k"], [[Decimal("1.5")], [None]], [d38]) == (
        "\"k\" IN (CAST('1.5' AS DECIMAL(38,6))) OR \"k\" IS NULL",
        2,
    )


def test_statistics_that_delta_rs_rounds_are_widened_or_ignored() -> None:
    """Timestamps' statistics are milliseconds (a file of .000002 says .000); numerics past 15 digits
    go through a double (123456789012.000001 says 123456789012.000000)."""
    at = dt.datetime(2024, 1, 1)
    files = pa.table({
        "path": ["a", "b"],
        "min.t": pa.array([at, at + dt.timedelta(seconds=1)], pa.timestamp("us")),
        "max.t": pa.array([at, at + dt.timedelta(seconds=1)], pa.timestamp("us")),
        "min.n": pa.array([Decimal("123456789012.000000"), Decimal(5)], pa.decimal128(38, 6)),
        "max.n": pa.array([Decimal("123456789012.000000"), Decimal(5)], pa.decimal128(38, 6)),
        "min.m": pa.array([Decimal("1.5"), Decimal(5)], pa.decimal128(15, 2)),
        "max.m": pa.array([Decimal("1.5"), Decimal(5)], pa.decimal128(15, 2)),
    })  # fmt: skip
    micro = at + dt.timedelta(microseconds=2)
    assert files_to_read(files, "t", (micro, micro), nulls=False, nan=False) == ["a"]
    big = Decimal("123456789012.000001")
    assert files_to_read(files, "n", (big, big), nulls=False, nan=False) == ["a", "b"]
    assert files_to_read(files, "m", (Decimal(5), Decimal(6)), nulls=False, nan=False) == ["b"]


def test_a_table_written_with_a_long_numerics_statistics_stops_using_them(tmp_path: Path) -> None:
    """A table whose files have statistics of a numeric key past 15 digits (written before the sink
    left them out): delta-rs's overwrite skipped the file holding the replaced key by them, keeping
    its old row beside the new one. Once the table's STATS_COLUMNS leave the key out, delta-rs reads
    no file's statistics of it, old files' included."""
    from deltalake import DeltaTable, write_deltalake

    path, d38, x = tmp_path / "out", pa.decimal128(38, 6), Decimal("123456789012.123456")
    write_deltalake(str(path), pa.table({"id": pa.array([x], d38), "v": ["old"]}))
    write_deltalake(str(path), pa.table({"id": pa.array([Decimal(1)], d38), "v": ["one"]}), mode="append")
    store = DeltaRsStore()
    _commit(store, path, pa.table({"id": pa.array([x], d38), "v": ["new"]}), [[x]], 1)
    assert sorted((r["id"], r["v"]) for r in store.read(path).to_pylist()) == [(Decimal(1), "one"), (x, "new")]
    files = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    assert "min.id" not in files.column_names
    assert "min.v" in files.column_names  # the other columns keep theirs


@pytest.mark.parametrize("change", ["schema back and forth", "table replaced by another writer"])
def test_a_tables_properties_are_checked_at_every_write(tmp_path: Path, change: str) -> None:
    """The store remembered a table as settled for its process: a schema that came back after another,
    or a table another writer replaced, kept statistics of a numeric key past 15 digits, and a replaced
    key kept its old row beside the new one."""
    from deltalake import write_deltalake

    path, d38, big = tmp_path / "out", pa.decimal128(38, 6), Decimal("123456789012.000001")

    def b(rows: dict[Decimal, str]) -> pa.Table:  # the key a long numeric
        return pa.table({"id": pa.array(list(rows), d38), "v": list(rows.values())})

    store = DeltaRsStore()
    _commit(store, path, b({big: "b0", Decimal(5): "b0"}), None, 0)
    _commit(store, path, b({Decimal(5): "b1"}), [[Decimal(5)]], 1)
    if change == "schema back and forth":  # the output's SQL changed its columns, then changed back
        c = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([Decimal(1)], d38)})
        _commit(store, path, c, None, 2)
        _commit(store, path, b({big: "b4", Decimal(5): "b4"}), None, 4)
    else:  # a backup restored, or the table rewritten by a tool that sets no properties
        shutil.rmtree(path)
        write_deltalake(str(path), b({big: "b4", Decimal(5): "b4"}))
    _commit(store, path, b({Decimal(1): "b5"}), [[Decimal(1)]], 5)  # another file
    _commit(store, path, b({big: "b6"}), [[big]], 6)
    got = sorted((r["id"], r["v"]) for r in store.read(path).to_pylist())
    assert got == [(Decimal(1), "b5"), (Decimal(5), "b4"), (big, "b6")]


def test_a_rewrite_refuses_rows_outside_the_partitions_it_replaces(tmp_path: Path) -> None:
    # Never from a correct join stage; committed, such a row would sit beside its key's old one.
    from txjoin.errors import SinkError

    path, store = tmp_path / "out", DeltaRsStore()
    _commit(store, path, _table([1, 2], "a"), None, 0)
    with pytest.raises(SinkError, match="1 of them outside the partitions it replaces"):
        _commit(store, path, _table([1], "x"), [[i] for i in range(-4000, 4002, 2)], 1)  # a key range
    assert _content(store, path) == {1: "a1", 2: "a2"}


def test_a_stats_columns_list_is_changed_only_when_it_keeps_a_lossy_column() -> None:
    """Each change of the table's properties is a version of its own: one is made only where delta-rs
    would otherwise keep statistics of a numeric past 15 digits."""
    from txjoin.sink.delta import _keeps_lossy, _stats_columns

    schema = pa.schema([("a`b", pa.decimal128(38, 6)), ("v", pa.string()), ("m", pa.decimal128(12, 2))])
    assert _stats_columns(schema) == "`v`,`m`"
    assert _stats_columns(pa.schema([("v", pa.string())])) is None
    assert _keeps_lossy(schema, None)  # Delta's default: the first 32 columns
    assert not _keeps_lossy(schema, "`v`,`m`")
    assert not _keeps_lossy(schema, "`v`")  # another schema's list: no lossy column in it
    assert _keeps_lossy(schema, "`a``b`,`v`")
    assert _keeps_lossy(pa.schema([("k", pa.decimal128(38, 6))]), "k,v")  # written unquoted by another tool
    assert _keeps_lossy(pa.schema([("k", pa.decimal128(38, 6))]), "`v`, k")  # quoted in part
    wide = pa.schema([*(pa.field(f"f{i}", pa.int64()) for i in range(40)), pa.field("m", pa.decimal128(30, 6))])
    assert not _keeps_lossy(wide, None)  # Delta's default: m, the 41st, has no statistics
    assert _keeps_lossy(wide, "`f0`,`m`")  # a list names it: it has
    assert not _keeps_lossy(pa.schema([("v", pa.string())]), None)


def test_files_to_read_trusts_only_whole_statistics() -> None:
    files = pa.table({
        "path": ["a", "b", "c", "d", "e"],
        "min.k": pa.array([0.0, 10.0, None, 20.0, 30.0]),
        "max.k": pa.array([5.0, 15.0, None, None, 40.0]),  # c: NaN inside; d: infinity inside
        "null_count.k": [0, 0, 0, 0, 2],
    })  # fmt: skip
    assert files_to_read(files, "k", (1.0, 2.0), nulls=False, nan=False) == ["a", "c", "d"]
    assert files_to_read(files, "k", (12.0, 12.0), nulls=True, nan=False) == ["b", "c", "d", "e"]
    assert files_to_read(files, "k", None, nulls=False, nan=False) == ["c", "d"]
    assert files_to_read(files, "k", (100.0, 200.0), nulls=False, nan=True) == ["a", "b", "c", "d", "e"]
    assert files_to_read(files, "k", ("x", "y"), nulls=False, nan=False) == ["a", "b", "c", "d", "e"]
    assert files_to_read(files.select(["path"]), "k", (1.0, 2.0), nulls=False, nan=False) == ["a", "b", "c", "d", "e"]



def test_range_pieces_read_each_file_once_and_blind_files_always() -> None:
    files = pa.table({
        "path": ["a", "b", "c", "d", "e", "f"],
        "size_bytes": [10, 10, 10, 10, 10, 10],
        "min.k": pa.array([0, 100, 200, 300, None, 150], pa.int64()),  # e: no statistics
        "max.k": pa.array([99, 199, 299, 399, None, 160], pa.int64()),  # f: inside b's range
    })  # fmt: skip
    # A budget of two files: pieces start at lo, then at a file's minimum (files in key order: a b f c
    # d); b overlaps [150, 300), so that piece reads it too.
    assert range_pieces(files, "k", 50, 350, 20) == [
        (50, ["a", "b", "e"]), (150, ["b", "f", "c", "e"]), (300, ["d", "e"]),
    ]  # fmt: skip
    # One file each.
    assert range_pieces(files, "k", 50, 350, 10) == [
        (50, ["a", "e"]), (100, ["b", "e"]), (150, ["b", "f", "e"]), (200, ["c", "e"]), (300, ["d", "e"]),
    ]  # fmt: skip
    assert range_pieces(files, "k", 150, 160, 1) == [(150, ["b", "f", "e"])]  # no start past lo inside
    assert range_pieces(files, "k", 0, 399, 1 << 20) == [(0, ["a", "b", "f", "c", "d", "e"])]
    # Statistics that do not compare with the keys: one piece reading every file.
    assert range_pieces(files, "k", "x", "y", 10) == [("x", ["a", "b", "c", "d", "e", "f"])]

def test_a_span_is_one_columns_range_and_its_nan_and_null() -> None:
    assert span([3, None, 1]) == Span((1, 3), nan=False, nulls=True)
    assert span([0.0, nan, 2.5]) == Span((-0.0, 2.5), nan=True, nulls=False)  # both zeros in the range
    assert span([None]) == Span(None, nan=False, nulls=True)
    for values in ([b"a", b"b"], [Decimal("NaN"), Decimal(1)], [1, "a"], [[1], [2]]):
        with pytest.raises(NoLiteral):
            span(values)


def test_the_range_column_reaches_the_fewest_bytes() -> None:
    files = pa.table({
        "path": ["a", "b", "c"],
        "size_bytes": [10, 20, 40],
        "min.x": [0, 100, 200], "max.x": [99, 199, 299],
        "min.y": [0, 0, 0], "max.y": [9, 9, 9],  # every file holds every y
    })  # fmt: skip
    types = [pa.int64(), pa.int64()]
    assert range_column(files, ["y", "x"], types, [[1, 5], [2, 150]]) == (1, Span((5, 150), False, False))
    assert range_column(files, ["y", "x"], types, [[1, 5], [2, 250]]) == (0, Span((1, 2), False, False))
    # No literal in x (bytes), an array in y: no range.
    assert range_column(files, ["y", "x"], types, [[1, b"k"]]) == (0, Span((1, 1), False, False))
    assert range_column(files, ["y", "x"], [pa.list_(pa.int64()), pa.binary()], [[None, b"k"]]) is None


def test_file_pieces_take_every_file_once() -> None:
    files = pa.table({"path": list("abcde"), "size_bytes": [5, 5, 12, None, 3]})
    assert file_pieces(files, 10) == [["a", "b"], ["c"], ["d", "e"]]
    assert file_pieces(files, 1) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert file_pieces(files.slice(0, 0), 10) == []


@pytest.mark.parametrize(
    "types",
    [(pa.int64(), pa.float64(), pa.string()), (pa.int64(), pa.list_(pa.float64()), pa.string())],
    ids=["arrow", "python"],
)
def test_a_key_set_finds_whole_keys_as_postgresql_compares_them(types: tuple[pa.DataType, ...]) -> None:
    nested = pa.types.is_nested(types[1])
    f = (lambda v: None if v is None else [v]) if nested else (lambda v: v)
    keys = [[1, f(0.0), "a"], [2, f(nan), None], [None, f(1.5), "b"], [1, f(1.5), "b"]]
    rows = pa.table({
        "k": pa.array([1, 1, 2, 2, None, None, 1, 1, 2], pa.int64()),
        "f": pa.array([f(-0.0), f(0.0), f(nan), f(nan), f(1.5), f(1.5), f(1.5), f(0.0), f(0.0)], types[1]),
        "s": pa.array(["a", "b", None, "x", "b", None, "b", None, None], pa.string()),
    })  # fmt: skip
    found = KeySet(["k", "f", "s"], keys, types).holds(rows).to_pylist()
    # Each column's value is some key's, but (1, 0.0, "b") and (2, 0.0, NULL) are no key.
    assert found == [True, False, True, False, True, False, True, False, False]


def _files(*files: tuple[int, int | None, int | None]) -> pa.Table:
    """Add actions as delta-rs flattens them: size, and the key's min and max, per file."""
    sizes, lows, highs = zip(*files, strict=True)
    return pa.table({"size_bytes": sizes, "min.id": pa.array(lows, pa.int64()), "max.id": pa.array(highs, pa.int64())})


def test_the_key_range_is_rewritten_when_a_predicate_would_cost_more() -> None:
    """A predicate term costs delta-rs about as much as rewriting TERM_BYTES of Parquet by range."""
    mb = 1 << 20
    big = _files(*[(2 * mb, i * 200_000, (i + 1) * 200_000 - 1) for i in range(5)])  # 10 MB, sorted keys
    small = _files((mb, 0, 99_999))
    scattered = [[k] for k in range(0, 1_000_000, 5_000)]  # 200 keys, one in every 5,000
    assert not range_is_cheaper(big, "id", scattered, 200)  # both rewrite 10 MB; 200 terms are cheap
    assert range_is_cheaper(small, "id", [[k] for k in range(0, 100_000, 50)], 2_000)  # 2,000 terms are not
    assert not range_is_cheaper(small, "id", [[k] for k in range(0, 100_000, 1_000)], 100)
    assert range_is_cheaper(big, "id", [[2_000_000], [2_000_005]], 2)  # past every file: nothing to read
    assert not range_is_cheaper(big, "id", [[10], [600_000]], 2)  # the range spans 4 files, the keys 2
    assert not range_is_cheaper(big, "id", [[None]], 1)  # only the NULL partition: its predicate
    assert not range_is_cheaper(big, "id", [[1], ["a"]], 2)  # keys that do not compare
    # No statistics for the key: every file counts as reached by both ways.
    bare = pa.table({"size_bytes": [100_000, 180_000]})
    assert range_is_cheaper(bare, "id", [[1], [5]], 100)
    assert not range_is_cheaper(bare, "id", [[1], [5]], 99)


@pytest.mark.parametrize("spread", ["scattered", "consecutive"])
def test_replace_tens_of_thousands_of_partitions(tmp_path: Path, spread: str) -> None:
    store = DeltaRsStore()
    path = tmp_path / "out"
    n = 120_000
    _commit(store, path, _table([*range(n), None], "a"), None, 0)
    # Scattered: every third key (no runs: the range rewrite); consecutive: runs.
    touched = list(range(0, n, 3)) if spread == "scattered" else list(range(50_000, 110_000))
    deleted = set(touched[::10])
    new = [i for i in touched if i not in deleted]
    parts: list[list[Any]] = [[i] for i in touched] + [[None]]
    version = _commit(store, path, _table([*new, None], "b"), parts, 1)
    assert version == 1
    got = _content(store, path)
    kept = set(range(n)) - set(touched)
    expected: dict[int | None, str] = {i: f"a{i}" for i in kept}
    expected.update({i: f"b{i}" for i in new})
    expected[None] = "bNone"
    assert got == expected
    assert max(store.history(path), key=lambda c: c.version).cut == {"s": Cut(1)}


@pytest.mark.parametrize("shape", ["two columns", "bytes"])
def test_replace_tens_of_thousands_of_keys_without_a_predicate(tmp_path: Path, shape: str) -> None:
    """Past the predicate's limit, a two-column key rewrites a range of one column; a key without SQL
    literals (bytes) rewrites the table. Either keeps whole keys, not columns: (i, 1) replaced, (i, 0)
    kept."""
    store = DeltaRsStore(file_bytes=64 << 10)
    path = tmp_path / "out"
    n = 60_000
    cols = ["id", "part"] if shape == "two columns" else ["id"]

    def key(i: int, p: int) -> tuple[Any, ...]:
        return (i, p) if shape == "two columns" else (f"{i}/{p}".encode(),)

    def rows(keys: list[tuple[Any, ...]], tag: str) -> pa.Table:
        arrays = {c: [k[j] for k in keys] for j, c in enumerate(cols)}
        return pa.table({**arrays, "v": [f"{tag}{k}" for k in keys]})

    first = [key(i, p) for i in range(n) for p in (0, 1)]
    touched = [key(i, 1) for i in range(0, n, 3)]  # 20,000 keys, one column's values shared with kept keys
    new = touched[::2]
    for batch, (keys, parts, tag) in enumerate([(first, None, "a"), (new, touched, "b")]):
        store.replace_partitions(
            path, rows(keys, tag), key=cols, partition_cols=cols,
            partitions=None if parts is None else [list(k) for k in parts],
            cut={"s": Cut(batch)}, batch=batch, app_id="test",
        )  # fmt: skip
    got = {tuple(r[c] for c in cols): r["v"] for r in store.read(path).to_pylist()}
    gone = set(touched)
    expected = {k: f"a{k}" for k in first if k not in gone} | {k: f"b{k}" for k in new}
    assert got == expected
    assert len(store.history(path)) >= 2


def test_a_store_sees_commits_made_elsewhere(tmp_path: Path) -> None:
    """Two stores on one table (the pipeline's and a reader's): each sees the other's commits."""
    path = tmp_path / "out"
    mine, other = DeltaRsStore(), DeltaRsStore()
    _commit(mine, path, _table([1, 2], "a"), None, 0)
    assert _content(other, path) == {1: "a1", 2: "a2"}
    assert _commit(other, path, _table([2], "b"), [[2]], 1) == 1
    assert _content(mine, path) == {1: "a1", 2: "b2"}
    assert mine.committed_batch(path, "test") == 1
    assert _commit(mine, path, _table([3], "c"), [[3]], 2) == 2
    assert _content(other, path) == {1: "a1", 2: "b2", 3: "c3"}
    assert [v.version for v in other.history(path)] == [0, 1, 2]


def test_a_table_removed_and_made_again_is_read_afresh(tmp_path: Path) -> None:
    """The same path, the same version numbers, another table: nothing of the old one is used."""
    path = tmp_path / "out"
    store = DeltaRsStore()
    _commit(store, path, _table([1, 2], "a"), None, 0)
    _commit(store, path, _table([2], "b"), [[2]], 1)
    assert _content(store, path) == {1: "a1", 2: "b2"}
    shutil.rmtree(path)
    assert store.committed_batch(path, "test") is None
    writer = DeltaRsStore()
    _commit(writer, path, _table([7], "x"), None, 5)
    _commit(writer, path, _table([8], "y"), [[8]], 6)
    assert _content(store, path) == {7: "x7", 8: "y8"}
    assert store.committed_batch(path, "test") == 6
    assert [v.batch for v in store.history(path)] == [5, 6]


def test_threads_each_use_their_own_table_object(tmp_path: Path) -> None:
    """A reader thread and the committing thread share one store (delta-rs objects are not shared)."""
    path = tmp_path / "out"
    store = DeltaRsStore()
    _commit(store, path, _table(list(range(100)), "a"), None, 0)
    failures: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                assert len(_content(store, path)) == 100
        except BaseException as e:  # reported below, in the test's thread
            failures.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for b in range(1, 11):
            _commit(store, path, _table([b], f"v{b}-"), [[b]], b)
    finally:
        stop.set()
        reader.join()
    assert failures == []
    assert _content(store, path)[10] == "v10-10"


def test_compaction_keeps_every_version_whole(tmp_path: Path) -> None:
    """Small files are compacted in a commit of their own: it changes no row, carries the cut
    and batch of the version before it, and batches after it replace partitions as before."""
    path = tmp_path / "out"
    store = DeltaRsStore(compact_after=3)
    model: dict[int | None, str] = {i: f"a{i}" for i in range(20)}
    _commit(store, path, _table(list(range(20)), "a"), None, 0)
    after: dict[int, dict[int | None, str]] = {0: dict(model)}
    for b in range(1, 10):
        # New keys add a small file each; every third batch also edits and deletes old keys.
        changed = [100 * b, 100 * b + 1] + ([b, 100 * (b - 1)] if b % 3 == 0 else [])
        gone = [b + 10, 100 * (b - 2) + 1] if b % 3 == 0 else []
        for i in changed:
            model[i] = f"b{b}-{i}"
        for i in gone:
            model.pop(i, None)
        parts: list[list[Any]] = [[i] for i in changed + gone]
        _commit(store, path, _table([*changed], f"b{b}-"), parts, b)
        after[b] = dict(model)
        assert _content(store, path) == model, f"after batch {b}"
    history = store.history(path)
    assert [v.operation for v in history].count("OPTIMIZE") >= 2, [v.operation for v in history]
    for v in history:
        assert v.batch is not None, v
        assert v.cut == {"s": Cut(v.batch)}, v
        got = {r["id"]: r["v"] for r in store.read(path, v.version).to_pylist()}
        assert got == after[v.batch], f"version {v.version} ({v.operation}, batch {v.batch})"
    assert store.committed_batch(path, "test") == 9
    assert len(store._current(path).file_uris()) < 3, "the last compaction left the small files"


def _dictionary_pages(store: DeltaRsStore, path: Path) -> dict[str, int]:
    """Per column, the largest dictionary page (compressed bytes) in the table's current files."""
    largest: dict[str, int] = {}
    for uri in store._current(path).file_uris():
        md = pq.read_metadata(uri.removeprefix("file://"))
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                if col.has_dictionary_page:
                    size = col.data_page_offset - col.dictionary_page_offset
                    largest[col.path_in_schema] = max(largest.get(col.path_in_schema, 0), size)
    return largest


def test_files_keep_dictionaries_small_whatever_wrote_them(tmp_path: Path) -> None:
    """Columns of unique values fall back to plain encoding past DICTIONARY_PAGE_BYTES
    in every write: the first one, a partition overwrite, a compaction, a key-range rewrite.
    A column of three values stays dictionary-encoded. (delta-rs's default lets a dictionary
    reach 1 MiB, which made rewriting 1M output rows about twice as slow.)"""
    path = tmp_path / "out"
    store = DeltaRsStore(compact_after=2)
    n = 200_000

    def rows(ids: range, tag: str) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": [f"{tag}-a-fairly-long-unique-string-{i}" for i in ids],
                "region": [("EU", "US", "APAC")[i % 3] for i in ids],
            }
        )

    def commit(ids: range, batch: int, whole: bool = False) -> dict[str, int]:
        store.replace_partitions(
            path, rows(ids, f"b{batch}"), key=["id"], partition_cols=["id"],
            partitions=None if whole else [[i] for i in ids], cut={"s": Cut(batch)}, batch=batch, app_id="test",
        )  # fmt: skip
        return _dictionary_pages(store, path)

    largest = [commit(range(n), 0, whole=True)]
    # New keys: a small file each (under half of file_bytes), which the store compacts.
    largest += [commit(range(n + 15_000 * b, n + 15_000 * (b + 1)), b + 1) for b in range(2)]
    largest.append(commit(range(0, n, 2), 3))  # too many keys for a predicate: the range rewrite
    assert "OPTIMIZE" in [v.operation for v in store.history(path)]
    for batch, pages in enumerate(largest):
        # Well under the 1 MiB the unique column's dictionary reaches by default.
        assert max(pages.get("v", 0), pages.get("id", 0)) <= DICTIONARY_PAGE_BYTES + 4096, (batch, pages)
        assert "region" in pages, (batch, "the three-value column lost its dictionary")
    got = {r["id"]: r["v"] for r in store.read(path).to_pylist()}
    assert len(got) == n + 30_000
    assert got[2] == "b3-a-fairly-long-unique-string-2"
    assert got[3] == "b0-a-fairly-long-unique-string-3"
    assert got[n + 15_000] == f"b2-a-fairly-long-unique-string-{n + 15_000}"


def test_the_log_keeps_the_retention_window_not_every_version(tmp_path: Path) -> None:
    """delta-rs lists the whole log at every commit: an output committing every few seconds for
    months must not keep Delta's default 30 days of it. Expired entries go at each checkpoint
    (every 100 commits); the latest version and the window's versions stay readable."""
    path = tmp_path / "out"
    store = DeltaRsStore(log_retention="interval 1 seconds")
    model = {i: f"a{i}" for i in range(5)}
    _commit(store, path, _table(list(range(5)), "a"), None, 0)
    for b in range(1, 251):
        _commit(store, path, _table([b % 5], f"b{b}-"), [[b % 5]], b)
        model[b % 5] = f"b{b}-{b % 5}"
        if b % 100 == 99:
            time.sleep(1.1)  # the next checkpoint finds the entries before it expired
    logs = [p for p in (path / "_delta_log").iterdir() if p.suffix == ".json"]
    assert len(logs) <= 60, f"{len(logs)} commits kept in the log after 251 commits"
    assert _content(store, path) == model
    kept = store.history(path)
    assert (kept[-1].version, kept[-1].batch) == (250, 250)
    assert [v.version for v in kept] == list(range(kept[0].version, 251))
    assert store.read(path, kept[0].version).num_rows == 5


def test_a_table_made_before_takes_the_retention_in_a_commit_that_keeps_its_cut(tmp_path: Path) -> None:
    """A table written under another retention (an older txjoin: Delta's 30 days) is set to the
    store's at its first write, by a commit that changes no row and carries the cut and batch of
    the version before it, so every version still equals the SQL at its cut."""
    path = tmp_path / "out"
    _commit(DeltaRsStore(log_retention="interval 30 days"), path, _table([1, 2], "a"), None, 0)
    store = DeltaRsStore(log_retention="interval 2 hours")
    _commit(store, path, _table([2], "b"), [[2]], 1)
    _commit(store, path, _table([3], "c"), [[3]], 2)
    history = store.history(path)
    assert [(v.operation, v.batch, v.cut) for v in history] == [
        ("WRITE", 0, {"s": Cut(0)}),
        ("SET TBLPROPERTIES", 0, {"s": Cut(0)}),
        ("WRITE", 1, {"s": Cut(1)}),
        ("WRITE", 2, {"s": Cut(2)}),
    ]
    assert store.read(path, 1).to_pylist() == store.read(path, 0).to_pylist()
    assert store._current(path).metadata().configuration["delta.logRetentionDuration"] == "interval 2 hours"
    assert store.committed_batch(path, "test") == 2
