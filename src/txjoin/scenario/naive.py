"""The naive baseline: change events applied one by one as they arrive.

This is what a stream processor does when it joins change streams table by
table: each table's topic is consumed on its own (so topics lag each other,
as separate Kafka consumers do), every event is applied to a copy of the
tables at once, ignoring transaction boundaries, and the output is
published after each delivery as a Delta version. The scenario report
counts the versions that are *torn*: equal to the SQL at no commit of the
source.

The copies live in a scratch PostgreSQL database, and each version is the
output's own SQL run there, so the only difference from txjoin is the one
that matters: transaction boundaries.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pyarrow as pa

from txjoin.changelog import ChangelogReader, read_table
from txjoin.debezium.envelope import parse_tx_id
from txjoin.debezium.topics import table_topic, transaction_topic
from txjoin.debezium.values import UNAVAILABLE, from_debezium
from txjoin.errors import TxJoinError
from txjoin.pg.catalog import Table
from txjoin.pg.names import QualifiedName, quote_ident
from txjoin.verify.replay import read_transactions, snapshot_rows

__all__ = ["NaiveBaseline", "NaiveVersion"]

log = logging.getLogger(__name__)

OFFSETS_KEY = "txjoin.naive.offsets"


@dataclass
class NaiveVersion:
    output: str
    version: int
    #: topic -> records applied
    offsets: dict[str, int]


@dataclass
class NaiveBaseline:
    changelog: Path
    #: source -> captured tables
    tables: Mapping[str, list[QualifiedName]]
    #: output -> SQL
    outputs: Mapping[str, str]
    dsn: str  # an empty scratch database
    delta_root: Path
    tick: float = 0.1
    per_delivery: int = 20
    offsets: dict[str, int] = field(default_factory=dict)
    versions: list[NaiveVersion] = field(default_factory=list)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._drain = threading.Event()
        self._thread = threading.Thread(target=self._run, name="naive-baseline", daemon=True)
        self._tables: list[Table] = []
        self._conn: Any = None

    def paths(self) -> dict[str, Path]:
        return {name: self.delta_root / name for name in self.outputs}

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout: float = 300) -> None:
        """Consume what is left, then stop."""
        self._drain.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(10)
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    # -- the loop -------------------------------------------------------------------
    def _setup(self) -> None:
        self._conn = psycopg2.connect(self.dsn)
        self._conn.autocommit = True
        with self._conn.cursor() as cur:
            for source, names in self.tables.items():
                for name in names:
                    t = read_table(self.changelog, table_topic(source, name), source, name)
                    self._tables.append(t)
                    defs = []
                    for c in t.columns:
                        cur.execute("SELECT format_type(%s, %s)", (c.type.oid, c.type.typmod))
                        defs.append(f"{quote_ident(c.name)} {cur.fetchone()[0]}")
                    keys = ", ".join(quote_ident(k) for k in t.primary_key)
                    if name.schema != "public":
                        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(name.schema)}")
                    cur.execute(f"CREATE TABLE {name.quoted} ({', '.join(defs)}, PRIMARY KEY ({keys}))")
                    self._load_snapshot(cur, t)

    def _load_snapshot(self, cur: Any, t: Table) -> None:
        """The source's columnar snapshot rows of ``t`` (its topics start after them)."""
        reader = ChangelogReader(self.changelog)
        for end in read_transactions(reader, t.source):
            if end.manifest is None:
                continue
            for row in snapshot_rows(self.changelog, end.manifest, t.source, str(t.name)):
                cols = list(row)
                names = ", ".join(quote_ident(c) for c in cols)
                marks = ", ".join(["%s"] * len(cols))
                cur.execute(
                    f"INSERT INTO {t.name.quoted} ({names}) VALUES ({marks})",  # noqa: S608
                    [self._value(t, c, row[c]) for c in cols],
                )

    def _run(self) -> None:
        try:
            self._setup()
            reader = ChangelogReader(self.changelog)
            turn = 0
            idle_rounds = 0
            while not self._stop.is_set():
                t = self._tables[turn % len(self._tables)]
                turn += 1
                applied = self._deliver(reader, t)
                if applied:
                    idle_rounds = 0
                    self._publish()
                else:
                    idle_rounds += 1
                    if self._drain.is_set() and idle_rounds >= 2 * len(self._tables):
                        return
                self._stop.wait(self.tick)
        except BaseException as e:
            self.error = e
        finally:
            if self._conn is not None:
                self._conn.close()

    def _deliver(self, reader: ChangelogReader, t: Table) -> int:
        topic = table_topic(t.source, t.name)
        start = self.offsets.get(topic, 0)
        n = 0
        with self._conn.cursor() as cur:
            for offset, raw in reader.read(topic, start):
                v = json.loads(raw)
                if v is not None:
                    self._apply(cur, t, v)
                self.offsets[topic] = offset + 1
                n += 1
                if n >= self.per_delivery:
                    break
        return n

    def _apply(self, cur: Any, t: Table, v: dict[str, Any]) -> None:
        op = v["op"]
        q = t.name.quoted
        if op == "t":
            cur.execute(f"TRUNCATE {q}")
            return
        if op == "d":
            before = v["before"]
            where = " AND ".join(f"{quote_ident(k)} = %s" for k in t.primary_key)
            key = [self._value(t, k, before[k]) for k in t.primary_key]
            cur.execute(f"DELETE FROM {q} WHERE {where}", key)  # noqa: S608
            return
        after = {c: x for c, x in v["after"].items() if x != UNAVAILABLE}
        cols = list(after)
        names = ", ".join(quote_ident(c) for c in cols)
        marks = ", ".join(["%s"] * len(cols))
        keys = ", ".join(quote_ident(k) for k in t.primary_key)
        updates = ", ".join(
            f"{quote_ident(c)} = excluded.{quote_ident(c)}" for c in cols if c not in t.primary_key
        )
        conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        cur.execute(
            f"INSERT INTO {q} ({names}) VALUES ({marks}) ON CONFLICT ({keys}) {conflict}",  # noqa: S608
            [self._value(t, c, after[c]) for c in cols],
        )

    @staticmethod
    def _value(t: Table, col: str, v: Any) -> Any:
        ctype = t.column(col).type
        x = from_debezium(v, ctype)
        if isinstance(x, bytes):
            return psycopg2.Binary(x)
        if isinstance(x, dict | list) and ctype.name in ("json", "jsonb"):
            return psycopg2.extras.Json(x)
        return x

    def _publish(self) -> None:
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        for name, sql in self.outputs.items():
            with self._conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql)
                rows = [dict(r) for r in cur.fetchall()]
            path = self.delta_root / name
            table = _arrow(rows, [d.name for d in cur.description])
            props = CommitProperties(custom_metadata={OFFSETS_KEY: json.dumps(self.offsets, sort_keys=True)})
            try:
                if DeltaTable.is_deltatable(str(path)):
                    write_deltalake(
                        str(path), table, mode="overwrite", schema_mode="overwrite", commit_properties=props
                    )
                else:
                    write_deltalake(str(path), table, mode="append", commit_properties=props)
            except Exception as e:
                raise TxJoinError(f"naive baseline: could not write {path}: {e}") from e
            self.versions.append(NaiveVersion(name, int(DeltaTable(str(path)).version()), dict(self.offsets)))


def _arrow(rows: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    """Rows from psycopg2 as Arrow; JSON values as text, as the txjoin outputs hold them."""
    data: dict[str, list[Any]] = {c: [] for c in columns}
    for r in rows:
        for c in columns:
            v = r[c]
            data[c].append(json.dumps(v) if isinstance(v, dict | list) else v)
    arrays = {}
    for c, values in data.items():
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[c] = pa.array([None if v is None else str(v) for v in values], pa.string())
        if pa.types.is_null(arrays[c].type):
            arrays[c] = arrays[c].cast(pa.string())
    return pa.table(arrays)


def applied_transactions(changelog: Path, offsets: Mapping[str, int], source: str) -> tuple[int, int, bool]:
    """For ``source``: (floor, ceiling, whole) in commit order.

    ``floor``: how many transactions, in commit order, are applied in full
    with all before them; ``ceiling``: the position of the last transaction
    with any applied event; ``whole``: the applied events are exactly the
    first ``floor`` transactions (a state the source really had).
    """
    reader = ChangelogReader(changelog)
    order: list[tuple[int, int]] = []  # (xid, events)
    for _, raw in reader.read(transaction_topic(source)):
        v = json.loads(raw)
        if v.get("status") == "END":
            xid, _ = parse_tx_id(v["id"])
            order.append((xid, int(v["event_count"])))
    applied: dict[int, int] = {}
    for topic, upto in offsets.items():
        if not topic.startswith(source + "."):
            continue
        for offset, raw in reader.read(topic):
            if offset >= upto:
                break
            v = json.loads(raw)
            if v is not None:
                xid = int(v["source"]["txId"])
                applied[xid] = applied.get(xid, 0) + 1
    floor = 0
    while floor < len(order) and applied.get(order[floor][0], 0) == order[floor][1]:
        floor += 1
    position = {xid: i for i, (xid, _) in enumerate(order)}
    ceiling = max((position[x] + 1 for x in applied if x in position), default=0)
    whole = ceiling == floor and all(x in position and position[x] < floor for x in applied)
    return floor, ceiling, whole
