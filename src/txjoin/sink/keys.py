"""Which rows a batch replaces: SQL predicates over an output's partition keys, and which files they reach.

Pure functions over Python values and delta-rs's file statistics, used by
:mod:`txjoin.sink.delta`. Keys compare as PostgreSQL's ``=`` does: -0.0 and 0.0
are one key, and so are two NaNs.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from txjoin.pg.names import quote_ident

__all__ = [
    "MAX_PREDICATE_TERMS",
    "OVERWRITE_BYTE_SHARE",
    "RANGE_PIECE_BYTES",
    "RANGE_STREAM_BYTES",
    "TERM_BYTES",
    "KeySet",
    "NoLiteral",
    "Span",
    "TooLong",
    "equals",
    "file_pieces",
    "files_to_read",
    "hashable",
    "in_predicates",
    "is_nan",
    "lossy_statistics",
    "overwrite_predicate",
    "partition_predicate",
    "range_column",
    "range_is_cheaper",
    "range_pieces",
    "span",
    "sql_literal",
]


class NoLiteral(Exception):
    """A partition value with no SQL literal form (bytes, arrays): rewrite the table instead."""


def sql_literal(v: Any, typ: pa.DataType | None = None) -> str:
    """A DataFusion SQL literal for a partition value (as Python gives it) of a column of type ``typ``
    (needed for numerics: their precision and scale)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):  # repr's nan and inf are column names to DataFusion
        return f"CAST('{'NaN' if math.isnan(v) else 'Infinity' if v > 0 else '-Infinity'}' AS DOUBLE)"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, Decimal):
        # Of the column's own type: a bare 123456789012.000001 is a double to DataFusion.
        if not v.is_finite() or typ is None or not pa.types.is_decimal(typ) or not _fits(v, typ.scale):
            raise NoLiteral(f"numeric {v}")  # a CAST would round it to another key
        return f"CAST('{v:f}' AS DECIMAL({typ.precision},{typ.scale}))"
    if isinstance(v, dt.datetime):
        # Delta's timestamps are microseconds; CAST(... AS TIMESTAMP) is nanoseconds, which delta-rs's
        # kernel refuses to compare with them.
        if v.tzinfo is not None:
            utc = v.astimezone(dt.UTC).isoformat()
            return f"""arrow_cast('{utc}', 'Timestamp(Microsecond, Some("UTC"))')"""
        return f"arrow_cast('{v.isoformat()}', 'Timestamp(Microsecond, None)')"
    if isinstance(v, dt.date):
        return f"CAST('{v.isoformat()}' AS DATE)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    raise NoLiteral(type(v).__name__)


def _fits(v: Decimal, scale: int) -> bool:
    """Whether ``v`` has no digit past ``scale`` (exactly: not in Python's 28-digit context)."""
    with localcontext(prec=100):
        try:
            return round(v, scale) == v
        except InvalidOperation:  # more than 100 digits: no column holds it
            return False


def lossy_statistics(typ: pa.DataType) -> bool:
    """Whether delta-rs's file statistics of a column of type ``typ`` may lie about its values: it
    reads a numeric's through a double, exact to 15 digits (123456789012.123456 read as
    123456789012.12346, and its file skipped under ``k = 123456789012.123456``; bench/NOTES.md,
    "Fixed: outputs keyed by timestamps and long numerics")."""
    return bool(pa.types.is_decimal(typ) and typ.precision > 15)


_MS = dt.timedelta(milliseconds=1)


def _widen(values: list[Any], by: dt.timedelta) -> list[Any]:
    out = []
    for v in values:
        try:
            out.append(None if v is None else v + by)
        except OverflowError:  # past year 1 or 9999: no bound
            out.append(None)
    return out


def _bounds(files: pa.Table, col: str) -> tuple[list[Any], list[Any]]:
    """Per file (delta-rs's add actions), the lowest and highest ``col`` it may hold (None: unknown).

    delta-rs keeps a timestamp's statistics in milliseconds (a file of 00:00:00.999999 says
    00:00:00.999), so they are widened by one; a numeric's past 15 digits are not used at all.
    """
    lows, highs = _stat(files, f"min.{col}"), _stat(files, f"max.{col}")
    name = f"min.{col}" if f"min.{col}" in files.column_names else f"max.{col}"
    if name not in files.column_names:
        return lows, highs
    typ = files.schema.field(name).type
    if lossy_statistics(typ):
        return [None] * files.num_rows, [None] * files.num_rows
    if pa.types.is_timestamp(typ):
        return _widen(lows, -_MS), _widen(highs, _MS)
    return lows, highs


def is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def equals(col: str, v: Any, typ: pa.DataType | None = None) -> str:
    """``col`` (of type ``typ``) equal to the non-NULL ``v`` as PostgreSQL's ``=`` means it."""
    if is_nan(v):
        return f"isnan({col})"  # DataFusion's NaN = NaN is false
    if isinstance(v, float) and v == 0:
        return f"{col} IN (0.0, -0.0)"  # file statistics tell the zeros apart
    return f"{col} = {sql_literal(v, typ)}"


#: delta-rs parses and plans an overwrite predicate recursively: an IN list of
#: 57,971 keys overflowed a thread's 8 MiB stack and killed the process
#: (bench.e2e, measured). Above this many terms the batch rewrites a key range
#: instead (:meth:`DeltaRsStore._rewrite_range`).
MAX_PREDICATE_TERMS = 4000


class TooLong(Exception):
    """The partition predicate would exceed :data:`MAX_PREDICATE_TERMS`."""


def int_runs(values: Sequence[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Sorted distinct ``values`` as (singletons, runs of >= 3 consecutive integers)."""
    vs = sorted(set(values))
    singles: list[int] = []
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append((vs[i], vs[j]))
        else:
            singles.extend(vs[i : j + 1])
        i = j + 1
    return singles, runs


#: From this many terms an overwrite predicate is written as ``(...) IS TRUE``, which delta-rs
#: plans in about 25 us a term against 40 us, but which costs about 10 ms more for a few terms,
#: and 0.002-0.012 s more on bench.join's uniform batches of 200 (bench/NOTES.md, "Fixed: NaN
#: and infinite float keys"); at 500 it saved 0.1-0.16 s.
IS_TRUE_TERMS = 500


def overwrite_predicate(predicate: str, terms: int, values: Sequence[Any]) -> str:
    """``predicate`` as delta-rs should overwrite by, for keys ``values`` (NULLs included).

    delta-rs keeps a rewritten file's rows where the predicate is not true, and skips row groups
    whose Parquet statistics say none is. Those statistics leave NaN out, so a row group of -2.0
    and NaN was dropped whole under ``k = -2.0``. ``(P) IS TRUE`` turns that skipping off (not the
    choice of files); it is used for floating-point keys, and for long predicates, where it is
    also faster.
    """
    if terms >= IS_TRUE_TERMS or any(isinstance(v, float) for v in values):
        return f"({predicate}) IS TRUE"
    return predicate


def partition_predicate(
    cols: Sequence[str],
    partitions: Sequence[Sequence[Any]],
    types: Sequence[pa.DataType | None] | None = None,
) -> tuple[str, int]:
    """A predicate selecting exactly ``partitions`` (values of ``cols``, of ``types``), and how many
    comparisons it makes (delta-rs's cost grows with them); raises :class:`TooLong` past the limit."""
    typs = list(types) if types is not None else [None] * len(cols)
    if len(cols) == 1:
        col = quote_ident(cols[0])
        present = [p[0] for p in partitions if p[0] is not None]
        terms: list[str] = []
        count = 0
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            # Keys inserted together are consecutive: a run costs two comparisons, not n values.
            singles, runs = int_runs(present)
            count = len(singles) + 2 * len(runs)
            if count > MAX_PREDICATE_TERMS:
                raise TooLong
            if singles:
                terms.append(f"{col} IN ({', '.join(map(str, singles))})")
            terms += [f"({col} >= {a} AND {col} <= {b})" for a, b in runs]
        elif present:
            listed = [v for v in present if not is_nan(v)]
            nan = len(listed) < len(present)
            if any(isinstance(v, float) and v == 0 for v in present):
                # delta-rs's overwrite keeps a file of 0.0 under IN (-0.0, ...) (bench/NOTES.md):
                # list both zeros, equal to SQL.
                listed += [0.0, -0.0]
            count = len(listed) + nan
            if count > MAX_PREDICATE_TERMS:
                raise TooLong
            if listed:
                terms.append(f"{col} IN ({', '.join(sql_literal(v, typs[0]) for v in listed)})")
            if nan:
                terms.append(equals(col, math.nan))
        if len(present) < len(partitions):
            terms.append(f"{col} IS NULL")  # NULL IN (...) is never true
            count += 1
        return overwrite_predicate(" OR ".join(terms), count, present), count
    if len(partitions) * len(cols) > MAX_PREDICATE_TERMS:
        raise TooLong
    ors = []
    for p in partitions:
        ands = " AND ".join(
            f"{quote_ident(c)} IS NULL" if v is None else equals(quote_ident(c), v, t)
            for c, v, t in zip(cols, p, typs, strict=True)
        )
        ors.append(f"({ands})")
    n = len(partitions) * len(cols)
    return overwrite_predicate(" OR ".join(ors), n, [v for p in partitions for v in p]), n


#: What a term of an overwrite predicate costs, in Parquet bytes rewritten by key range: delta-rs
#: spends about 40 us planning each term (4,000 terms: 0.2 s, whatever the table's size), and the
#: key-range rewrite about 0.26 us a row of 9.4 bytes (bench/NOTES.md, "Measured: a long overwrite
#: predicate"). In bytes, not rows, so that wide rows make the range rewrite dearer, not larger.
#: Under IS TRUE a term costs about 25 us, but 700 here chose the predicate for bench.join's recent
#: batches at 0.06 s, against 0.035 s by range: the choice stays at 1,400.
TERM_BYTES = 1_400
#: What a byte rewritten by delta-rs's own overwrite costs, against one rewritten by key range
#: (0.12 against 0.26 us a row: the range rewrite reads its rows into Python first).
OVERWRITE_BYTE_SHARE = 0.5


def _stat(files: pa.Table, name: str) -> list[Any]:
    """A column of delta-rs's flattened add actions (``min.<col>``, ...); all None if absent."""
    return files.column(name).to_pylist() if name in files.column_names else [None] * files.num_rows


def range_is_cheaper(files: pa.Table, col: str, partitions: Sequence[Sequence[Any]], terms: int) -> bool:
    """Whether rewriting the key range ``partitions`` span costs less than overwriting them by predicate.

    Both are copy-on-write of the files they reach; the predicate's planning also grows with its
    terms. Estimated from ``files``' key statistics (delta-rs's add actions, flattened): the range
    rewrite reads every file overlapping the range, the overwrite every file whose own range holds
    a key. A file without statistics counts as reached by both. Since the files an overwrite
    reaches are among those the range overlaps, a range rewrite chosen here reads files of at most
    ``TERM_BYTES * terms / (1 - OVERWRITE_BYTE_SHARE)`` bytes (11.2 MB at the 4,000-term limit).
    """
    try:
        present = sorted(p[0] for p in partitions if p[0] is not None)
    except TypeError:  # mixed types: nothing to compare with the statistics
        return False
    if any(is_nan(v) for v in present):  # unordered; a file holding NaN has no statistics
        return False
    if not present or files.num_rows == 0:
        return False
    sizes = [n or 0 for n in files.column("size_bytes").to_pylist()]
    lows, highs = _bounds(files, col)
    lo, hi = present[0], present[-1]
    spanned = reached = 0
    for n, a, b in zip(sizes, lows, highs, strict=True):
        try:
            if a is None or b is None:
                overlaps = holds = True
            else:
                overlaps = not (b < lo or a > hi)
                i = bisect.bisect_left(present, a)
                holds = i < len(present) and present[i] <= b
        except TypeError:  # statistics of another type than the keys (time zones)
            overlaps = holds = True
        spanned += n if overlaps else 0
        reached += n if holds else 0
    return spanned <= OVERWRITE_BYTE_SHARE * reached + TERM_BYTES * terms


def files_to_read(
    files: pa.Table, col: str, bounds: tuple[Any, Any] | None, nulls: bool, nan: bool
) -> list[str]:
    """The files (``path`` of delta-rs's add actions) that may hold a key in ``bounds`` (inclusive),
    a NULL key (``nulls``) or a NaN key (``nan``).

    A file whose statistics are missing may hold anything. delta-rs writes none for a float column
    holding NaN, and no maximum for one holding infinity (JSON has neither), and its own pyarrow
    dataset then prunes such a file as if it held no rows, so the sink chooses here instead.
    """
    paths: list[str] = files.column("path").to_pylist()
    if nan:  # NaN sorts nowhere: read every file rather than trust the statistics
        return paths
    lows, highs = _bounds(files, col)
    counts = _stat(files, f"null_count.{col}")
    chosen = []
    for p, a, b, n in zip(paths, lows, highs, counts, strict=True):
        if a is None or b is None or (nulls and (n is None or n > 0)):
            chosen.append(p)
            continue
        if bounds is None:
            continue
        try:
            if not (b < bounds[0] or a > bounds[1]):
                chosen.append(p)
        except TypeError:  # statistics of another type than the keys (time zones)
            chosen.append(p)
    return chosen


#: A key-range rewrite that would read more Parquet than this streams its range in pieces of
#: ``RANGE_PIECE_BYTES``, one after the other, so that its memory does not grow with the table: a
#: batch of 5,000 scattered keys on 8M rows read the whole table at once, 2.4 GB above the process's
#: size (bench/NOTES.md, "Fixed: a large key-range rewrite read its whole range at once"). Above the
#: 11.2 MB that a range rewrite chosen by :func:`range_is_cheaper` reads, which stays one read.
RANGE_STREAM_BYTES = 32 << 20
#: The Parquet a piece of a streamed range rewrite reads. On 8M rows (64 files of 1.4 MB, 5,000
#: scattered keys, ``python -m bench.sink``), pieces of 2, 4, 8, 16 and 32 MB peaked at about 0.36,
#: 0.44, 0.7, 1.0 and 1.5 GB above the process, in 1.8-2.7 s, 2.0-4.0 s for the larger ones.
RANGE_PIECE_BYTES = 4 << 20


def range_pieces(files: pa.Table, col: str, lo: Any, hi: Any, budget: int) -> list[tuple[Any, list[str]]]:
    """The key range ``[lo, hi]`` cut into consecutive pieces that each read about ``budget`` bytes.

    Returns ``(start, paths)`` per piece, in key order: a piece holds the keys from its start up to
    the next piece's start (excluded), the last one up to ``hi`` (included), and ``paths`` are the
    files (delta-rs's add actions) that may hold one of them. Starts are ``lo`` and then minima of
    files, so a table of files in key order reads each file once; a file without statistics is read
    by every piece. One piece when the statistics cannot be compared with the keys.
    """
    paths: list[str] = files.column("path").to_pylist()
    sizes = [n or 0 for n in files.column("size_bytes").to_pylist()]
    lows, highs = _bounds(files, col)
    blind = [p for p, a, b in zip(paths, lows, highs, strict=True) if a is None or b is None]
    try:
        ranged = sorted(
            ((a, b, p, n) for p, n, a, b in zip(paths, sizes, lows, highs, strict=True)
             if a is not None and b is not None and not (b < lo or a > hi)),
            key=lambda f: f[0],
        )  # fmt: skip
        starts, taken = [lo], 0
        for a, _, _, n in ranged:
            if taken and taken + n > budget and type(a) is type(lo) and starts[-1] < a <= hi:
                starts.append(a)
                taken = 0
            taken += n
        pieces = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            reach = [p for a, b, p, _ in ranged if b >= start and (a <= hi if end is None else a < end)]
            pieces.append((start, reach + blind))
    except TypeError:  # statistics of another type than the keys (time zones)
        return [(lo, paths)]
    return pieces


_NAN = object()


def hashable(v: Any) -> Any:
    if is_nan(v):
        return _NAN  # one key, as in PostgreSQL; float('nan') != float('nan')
    if isinstance(v, list | tuple):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, hashable(x)) for k, x in v.items()))
    return v


@dataclass(frozen=True)
class Span:
    """What a range rewrite on one key column replaces: a range, NaN, NULL."""

    bounds: tuple[Any, Any] | None  # the lowest and highest key that is neither NULL nor NaN
    nan: bool
    nulls: bool


def span(values: Sequence[Any], typ: pa.DataType | None = None) -> Span:
    """The span of one key column's ``values`` (of type ``typ``); raises :class:`NoLiteral` when its
    bounds have no SQL literal (bytes, arrays, a numeric NaN) or do not compare (mixed types)."""
    keys = [v for v in values if v is not None]
    present = [v for v in keys if not is_nan(v)]
    bounds = None
    if present:
        try:
            lo, hi = min(present), max(present)
        except (TypeError, ArithmeticError) as e:  # Decimal's NaN does not compare
            raise NoLiteral(str(e)) from e
        if isinstance(lo, float) and lo == 0:  # statistics order -0.0 below 0.0: span both
            lo = -0.0
        if isinstance(hi, float) and hi == 0:
            hi = 0.0
        for v in (lo, hi):
            sql_literal(v, typ)  # raises NoLiteral
        bounds = (lo, hi)
    return Span(bounds, len(present) < len(keys), len(keys) < len(values))


def in_predicates(typ: pa.DataType) -> bool:
    """Whether a column of type ``typ`` may appear in delta-rs's predicates: not arrays, structs or
    maps, not even under IS NULL ("Predicate references unknown column", delta-rs 1.6.6)."""
    return not pa.types.is_nested(typ)


def range_column(
    files: pa.Table, cols: Sequence[str], types: Sequence[pa.DataType], partitions: Sequence[Sequence[Any]]
) -> tuple[int, Span] | None:
    """The key column (of type ``types``) whose span over ``partitions`` reaches the fewest bytes of
    ``files`` (delta-rs's add actions), for a range rewrite; None when no column's span has a literal.

    Any column will do: every row of a replaced partition lies in the span of each of its columns.
    """
    sizes = dict(zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), strict=True))
    best: tuple[int, int, Span] | None = None
    for i, (col, typ) in enumerate(zip(cols, types, strict=True)):
        if not in_predicates(typ):
            continue
        try:
            s = span([p[i] for p in partitions], typ)
        except NoLiteral:
            continue
        cost = sum(sizes[f] or 0 for f in files_to_read(files, col, s.bounds, s.nulls, s.nan))
        if best is None or cost < best[0]:
            best = (cost, i, s)
    return None if best is None else best[1:]


def file_pieces(files: pa.Table, budget: int) -> list[list[str]]:
    """Every file of ``files`` (delta-rs's add actions), in pieces that each read about ``budget`` bytes."""
    pieces: list[list[str]] = []
    taken = budget
    for path, n in zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), strict=True):
        if taken + (n or 0) > budget and (not pieces or pieces[-1]):
            pieces.append([])
            taken = 0
        pieces[-1].append(path)
        taken += n or 0
    return pieces


def _one_zero(a: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    return pc.add(a, 0.0) if pa.types.is_floating(a.type) else a  # index_in tells -0.0 from 0.0


def _pair(codes: Any, more: Any, n: int) -> Any:
    """One code per pair of codes (``more`` below ``n``); NULL where either is."""
    return pc.add(pc.multiply(pc.cast(codes, pa.int64()), n), pc.cast(more, pa.int64()))


class KeySet:
    """Keys (one value per column of ``cols``) to find rows by, in Arrow's compute where it can.

    Keys compare as PostgreSQL's ``=`` does (one zero, one NaN), and NULL finds NULL: a partition
    of NULLs is one partition, as in GROUP BY. Each column's values are coded by their place among
    the keys' values in that column, and a row's codes are folded pair by pair into the code of its
    key prefix among the keys' prefixes: memory grows with the keys, not the rows. Types Arrow cannot
    look up (lists, structs) are compared in Python.
    """

    def __init__(
        self, cols: Sequence[str], keys: Sequence[Sequence[Any]], types: Sequence[pa.DataType]
    ) -> None:
        self.cols = list(cols)
        self._keys = keys
        self._values: list[pa.Array] = []  # per column, the keys' distinct values
        self._prefixes: list[pa.Array] = []  # per column after the first, the keys' distinct prefix codes
        self._set: set[Any] | None = None
        try:
            arrays = [_one_zero(pa.array([k[i] for k in keys], t)) for i, t in enumerate(types)]
            self._values = [pc.unique(a) for a in arrays]
            self._codes(arrays, learn=True)
        except (pa.ArrowException, TypeError, ValueError):  # a type Arrow cannot look up: Python's path
            self._values = []

    def _codes(self, arrays: Sequence[Any], learn: bool = False) -> Any:
        """Each row's code among the keys; NULL when its key is not one of them."""
        code = pc.index_in(arrays[0], value_set=self._values[0], skip_nulls=False)
        for i, a in enumerate(arrays[1:], 1):
            values = self._values[i]
            code = _pair(code, pc.index_in(a, value_set=values, skip_nulls=False), len(values))
            if learn:
                self._prefixes.append(pc.unique(code))
            code = pc.index_in(code, value_set=self._prefixes[i - 1])
        return code

    def holds(self, rows: pa.Table) -> pa.Array | pa.ChunkedArray:
        """For each of ``rows``, whether its key (its columns ``cols``) is one of the keys."""
        if self._values:
            try:
                return pc.is_valid(self._codes([_one_zero(rows.column(c)) for c in self.cols]))
            except (pa.ArrowException, TypeError, ValueError):  # rows of another type: Python's path
                pass
        if self._set is None:
            self._set = {hashable(tuple(k)) for k in self._keys}
        found, keys = self._set, rows.select(self.cols).to_pylist()
        return pa.array([hashable(tuple(r.values())) in found for r in keys], pa.bool_())
