"""Change batches: a micro-batch's released changes of one table, as Arrow.

A change batch has ``_op`` ('c', 'r', 'u', 'd', 't'), the change's position
``(_lsn, _ord)`` (commit LSN, position in the transaction), ``_xid``, then the
table's columns holding the row image's Debezium values: the after image,
or for a delete its key from the before image. :data:`TOAST` lists, per row,
the columns whose unchanged TOASTed value Debezium did not send.

:func:`parse_released` builds them from the released rows' JSON records with
pyarrow's JSON reader (vectorized, one call per table), falling back to one
``json.loads`` per record where the reader cannot type a value (a float
'NaN', a placeholder in a non-text column, a record wrapped differently).
"""

from __future__ import annotations

import atexit
import io
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from txjoin.debezium.arrow import from_values, value_type
from txjoin.debezium.record import parse_record
from txjoin.debezium.values import UNAVAILABLE
from txjoin.errors import ChangelogError, SchemaChangeError
from txjoin.pg.names import QualifiedName, parse_table_name
from txjoin.pg.types import ColumnType

__all__ = ["TOAST", "Change", "Touched", "batch_of", "parse_released", "resolve_toast", "touched_of"]

#: Column of a change batch: names of columns whose unchanged TOASTed value was not sent.
TOAST = "_toast"
_META = [("_op", pa.string()), ("_lsn", pa.int64()), ("_ord", pa.int64()), ("_xid", pa.int64())]

Row = dict[str, Any]


class TableSpec(Protocol):
    """What a change batch needs to know of its table (:class:`txjoin.join.replica.TableSpec`)."""

    @property
    def name(self) -> QualifiedName: ...

    @property
    def primary_key(self) -> tuple[str, ...]: ...

    @property
    def columns(self) -> tuple[tuple[str, ColumnType], ...]: ...

    @property
    def types(self) -> dict[str, ColumnType]: ...


@dataclass(frozen=True)
class Change:
    """One change as plain Python values (tests, and the per-record fallback)."""

    table: QualifiedName
    op: str
    commit_lsn: int
    total_order: int
    before: Row | None
    after: Row | None
    xid: int = 0


class Touched:
    """Primary keys a batch changes, per table (a truncated table: every row counts)."""

    def __init__(self) -> None:
        self._keys: dict[QualifiedName, list[pa.Table]] = {}
        self.truncated: set[QualifiedName] = set()

    def add(self, table: QualifiedName, keys: pa.Table) -> None:
        self._keys.setdefault(table, []).append(keys)

    def keys(self, table: QualifiedName) -> pa.Table | None:
        """Distinct keys of ``table`` (None if the batch has none)."""
        parts = self._keys.get(table)
        if not parts:
            return None
        t = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
        return t.group_by(t.column_names).aggregate([])

    def tables(self) -> set[QualifiedName]:
        return set(self._keys) | self.truncated

    def merge(self, other: Touched) -> None:
        for table, parts in other._keys.items():
            self._keys.setdefault(table, []).extend(parts)
        self.truncated |= other.truncated


def touched_of(
    batches: Mapping[QualifiedName, pa.Table], specs: Mapping[QualifiedName, TableSpec]
) -> Touched:
    """The keys the change batches touch (a delete's key from its before image), and truncated tables."""
    out = Touched()
    for table, batch in batches.items():
        is_truncate = pc.equal(batch.column("_op"), "t")
        if pc.any(is_truncate).as_py():
            out.truncated.add(table)
        keys = batch.filter(pc.invert(is_truncate)).select(list(specs[table].primary_key))
        if keys.num_rows:
            out.add(table, keys)
    return out


def _schema(spec: TableSpec) -> pa.Schema:
    return pa.schema([*_META, *[(n, value_type(t)) for n, t in spec.columns], (TOAST, pa.list_(pa.string()))])


def batch_of(spec: TableSpec, changes: Sequence[Change]) -> pa.Table:
    """A change batch from :class:`Change` objects (one Python step per change)."""
    types = spec.types
    cols: dict[str, list[Any]] = {n: [] for n, _ in spec.columns}
    meta: dict[str, list[Any]] = {"_op": [], "_lsn": [], "_ord": [], "_xid": []}
    toast: list[list[str] | None] = []
    for ch in changes:
        image = ch.before if ch.op == "d" else ch.after
        image = image or {}
        if ch.op == "d":
            image = {k: image.get(k) for k in spec.primary_key}
        missing = [c for c, v in image.items() if v == UNAVAILABLE]
        toast.append(missing or None)
        for n in cols:
            v = image.get(n)
            cols[n].append(None if v == UNAVAILABLE else v)
        for k, v in (("_op", ch.op), ("_lsn", ch.commit_lsn), ("_ord", ch.total_order), ("_xid", ch.xid)):
            meta[k].append(v)
    arrays = [pa.array(meta[k], t) for k, t in _META]
    arrays += [from_values(cols[n], types[n]) for n in cols]
    arrays.append(pa.array(toast, pa.list_(pa.string())))
    return pa.Table.from_arrays(arrays, schema=_schema(spec))


def _fast(spec: TableSpec, values: pd.Series) -> pa.Table | None:
    """``after``/``before`` of plain Debezium records, read in one call; None if they do not type."""
    after = pa.struct([(n, value_type(t)) for n, t in spec.columns])
    before = pa.struct([(k, value_type(spec.types[k])) for k in spec.primary_key])
    schema = pa.schema([("op", pa.string()), ("before", before), ("after", after)])
    texts = values.tolist()
    data = "\n".join(texts).encode()
    # Blocks of about 1 MB parse on several threads; a block must hold the longest record.
    longest = max((len(t) for t in texts), default=0) * 4 + 2
    try:
        parsed = pajson.read_json(
            io.BytesIO(data),
            read_options=pajson.ReadOptions(block_size=max(1 << 20, longest)),
            parse_options=pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if parsed.num_rows != len(values) or parsed.column("op").null_count:
        return None  # wrapped records ({schema, payload}) and the like: the slow path knows them
    # One chunk per column once, here: its readers (_maybe_missing, _columns_fast) then copy nothing.
    return parsed.combine_chunks()


def _columns_fast(spec: TableSpec, parsed: pa.Table) -> tuple[list[pa.Array], list[list[str] | None]] | None:
    op = parsed.column("op").combine_chunks()
    is_delete = pc.equal(op, "d")
    after = parsed.column("after").combine_chunks()
    before = parsed.column("before").combine_chunks()
    arrays: list[pa.Array] = []
    toast_rows: dict[int, list[str]] = {}
    for n, _ in spec.columns:
        a = after.field(n)
        if n in spec.primary_key:
            a = pc.if_else(is_delete, before.field(n), a)
        if pa.types.is_string(a.type):
            unavailable = pc.equal(a, UNAVAILABLE)
            if pc.any(unavailable).as_py():
                for i in pc.indices_nonzero(unavailable).to_pylist():
                    toast_rows.setdefault(i, []).append(n)
                a = pc.if_else(unavailable, pa.scalar(None, a.type), a)
        arrays.append(a)
    toast: list[list[str] | None] = [toast_rows.get(i) for i in range(parsed.num_rows)]
    return arrays, toast


def _changes_slow(table: QualifiedName, rows: pd.DataFrame) -> list[Change]:
    out = []
    for op, lsn, order, value, xid in zip(
        rows["op"], rows["commit_lsn"], rows["total_order"], rows["value"], rows["xid"], strict=True
    ):
        rec = parse_record(value)
        out.append(
            Change(table, str(op), int(lsn), int(order), rec.get("before"), rec.get("after"), int(xid))
        )
    return out


_duck_lock = threading.Lock()
_duck_con: list[duckdb.DuckDBPyConnection] = []


def _duck() -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB for JSON work, shared (use under ``_duck_lock``).

    Closed at exit: a connection still held by Spark's callback thread then
    would make DuckDB's bindings report it as leaked.
    """
    if not _duck_con:
        _duck_con.append(duckdb.connect())
        atexit.register(_close_duck)
    return _duck_con[0]


def _close_duck() -> None:
    with _duck_lock:
        for con in _duck_con:
            con.close()
        _duck_con.clear()


_AFTER = "coalesce(json_keys(v, '$.after'), json_keys(v, '$.payload.after'))"
_HAS_AFTER = "coalesce(json_type(v, '$.after'), json_type(v, '$.payload.after')) = 'OBJECT'"


def _check_columns(spec: TableSpec, used: set[str], rows: pd.DataFrame) -> None:
    """Refuse records whose after image lacks a column an output reads (dropped or renamed at the source)."""
    if not len(rows) or not used:
        return
    records = pa.table({"v": pa.array(rows["value"].tolist(), pa.string())})
    with _duck_lock:
        con = _duck()
        con.register("_records", records)
        try:
            rel = con.sql(
                "SELECT i FROM (SELECT row_number() OVER () - 1 AS i, v FROM _records) "  # noqa: S608
                f"WHERE {_HAS_AFTER} AND NOT list_has_all({_AFTER}, $used) LIMIT 1",
                params={"used": sorted(used)},
            )
            assert rel is not None
            bad = rel.fetchall()
        finally:
            con.unregister("_records")
    if not bad:
        return
    i = int(bad[0][0])
    record = parse_record(rows["value"].iloc[i])
    missing = sorted(used - set(record.get("after") or {}))
    xid = int(rows["xid"].iloc[i])
    raise SchemaChangeError(
        f"transaction {xid} changes {spec.name} without column(s) {missing}, which an output "
        "reads: the column was dropped or renamed at the source. Nothing after the last good "
        "transaction was committed; restore the column or start a new pipeline",
        table=str(spec.name),
        xid=xid,
        columns=missing,
    )


def _maybe_missing(used: set[str], parsed: pa.Table) -> Any:
    """Positions of the parsed records whose after image may lack a column of ``used``; None: any.

    The fast parse reads a missing key as null, so a record with every used column set has them
    all: only the others need :func:`_check_columns`' second reading of the JSON. A record without
    an after image (a delete, a truncate) passes that check, so it is never among them.
    """
    after = parsed.column("after").combine_chunks()
    if not used <= {f.name for f in after.type}:
        return None
    mask = pa.repeat(pa.scalar(False), len(after))
    for c in used:
        mask = pc.or_(mask, pc.is_null(after.field(c)))
    return pc.indices_nonzero(pc.and_(mask, pc.is_valid(after))).to_numpy()


def parse_released(
    rows: pd.DataFrame, specs: Mapping[QualifiedName, TableSpec], used: Mapping[QualifiedName, set[str]]
) -> dict[QualifiedName, pa.Table]:
    """Change batches of the released rows, per replicated table (others are skipped)."""
    out: dict[QualifiedName, pa.Table] = {}
    if not len(rows):
        return out
    changes = rows.loc[rows["op"].isin(["c", "r", "u", "d", "t"])]
    for table_text, group in changes.groupby("table", sort=False):
        name = parse_table_name(str(table_text))
        spec = specs.get(name)
        if spec is None:
            continue  # captured but not used by any output
        parsed = _fast(spec, group["value"])
        cols = used.get(name, set())
        maybe = None if parsed is None else _maybe_missing(cols, parsed)
        _check_columns(spec, cols, group.loc[group["op"] != "t"] if maybe is None else group.iloc[maybe])
        columns = None if parsed is None else _columns_fast(spec, parsed)
        if columns is None:
            out[name] = batch_of(spec, _changes_slow(name, group))
            continue
        arrays, toast = columns
        meta = [
            pa.array(group["op"].tolist(), pa.string()),
            pa.array(group["commit_lsn"].to_numpy(), pa.int64()),
            pa.array(group["total_order"].to_numpy(), pa.int64()),
            pa.array(group["xid"].to_numpy(), pa.int64()),
        ]
        toast_col = pa.array(toast, pa.list_(pa.string()))
        out[name] = pa.Table.from_arrays([*meta, *arrays, toast_col], schema=_schema(spec))
    return out


def resolve_toast(
    table: QualifiedName,
    pk: Sequence[str],
    batch: pa.Table,
    previous: Mapping[tuple[Any, ...], Row],
) -> pa.Table:
    """Fill unchanged TOASTed values from the key's previous image: earlier in the batch, else stored.

    A primary-key change arrives as delete + create (the create at the next
    position of the same transaction): the create's unchanged values are the
    deleted row's. Rows are in position order.
    """
    rows = batch.to_pylist()
    latest: dict[tuple[Any, ...], Row | None] = {}
    deleted: dict[tuple[int, int], Row] = {}
    for r in rows:
        key = tuple(r[c] for c in pk)
        prev = latest[key] if key in latest else previous.get(key)
        if r["_op"] == "d":
            if prev is not None:
                deleted[(r["_xid"], r["_ord"])] = prev
            latest[key] = None
            continue
        for col in r[TOAST] or []:
            source = prev if prev is not None else deleted.get((r["_xid"], r["_ord"] - 1))
            if source is None:
                raise ChangelogError(
                    f"{table}: transaction {r['_xid']} updates key {list(key)} with an unchanged TOASTed "
                    "value, but the replica has no earlier row to take it from",
                    table=str(table),
                    xid=r["_xid"],
                )
            r[col] = source[col]
        r[TOAST] = None
        latest[key] = r
    return pa.Table.from_pylist(rows, schema=batch.schema)
