"""The SQL-on-PostgreSQL oracle: an output's SQL run by PostgreSQL itself.

Two ways to get the source's state for it, one way to run the SQL over copies
of tables (temporary tables, the SQL's table names pointed at them
with :func:`rewrite_tables`, everything rolled back):

- :func:`evaluate`, over tables replayed from the changelog
  (:class:`TableState`, ``txjoin verify``);
- :class:`Oracle`, recording the sources while a workload commits
  (``txjoin check``, the scenarios, the property tests).

Whoever drives the source commits through :meth:`Oracle.commit`, which holds
a lock from the COMMIT until the oracle has read the source, so what it
records is the state right after that commit, keyed by the transaction's
xid (the xid a Delta version's cut names).

- An output reading one source: its SQL runs on that source after each of
  its commits, and the rows are kept.
- An output reading several sources (one database each) cannot run as one
  query on any of them. The oracle keeps a snapshot of the output's tables
  of the committing source instead (one JSON document per table, from
  PostgreSQL's own ``row_to_json``), and :meth:`Oracle.expected` loads the
  snapshots named by a cut into temporary tables on a PostgreSQL connection
  and runs the SQL there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extras
import sqlglot
from sqlglot import exp

from txjoin.cut import Cut
from txjoin.debezium.values import from_debezium
from txjoin.errors import TxJoinError
from txjoin.join.plan import OutputPlan
from txjoin.pg.catalog import Table
from txjoin.pg.connect import exact_text
from txjoin.pg.names import QualifiedName, quote_ident
from txjoin.spec import PipelineSpec

__all__ = ["Oracle", "OracleOutput", "TableState", "evaluate", "oracle_for", "rewrite_tables", "temp_name"]

Row = dict[str, Any]


def temp_name(source: str, table: QualifiedName) -> str:
    """The temporary copy of ``source``'s ``table``."""
    return f"txjo__{source}__{table.schema}__{table.table}"


def rewrite_tables(sql: str, names: Mapping[QualifiedName, str]) -> str:
    """``sql`` with its tables pointed at ``names`` (keeping the names the SQL uses as aliases)."""
    tree = sqlglot.parse_one(sql, read="postgres")
    for t in tree.find_all(exp.Table):
        q = QualifiedName(t.db or "public", t.name)
        if q not in names:
            continue
        # Keep the name the SQL uses (as written, quoted or not), so `orders.id` still resolves.
        alias = t.args.get("alias") or exp.TableAlias(this=t.this.copy())
        t.set("db", None)
        t.set("catalog", None)
        t.set("this", exp.to_identifier(names[q], quoted=True))
        t.set("alias", alias)
    return tree.sql(dialect="postgres")


def _query(conn: Any, sql: str) -> list[Row]:
    with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(sql)
        return [dict(r) for r in cur.fetchall()]


def _create_temp(cur: Any, name: str, column_defs: Iterable[str]) -> str:
    tmp = quote_ident(name)
    cur.execute(f"CREATE TEMP TABLE {tmp} ({', '.join(column_defs)}) ON COMMIT DROP")
    return tmp


# -- over replayed tables -------------------------------------------------------------


@dataclass
class TableState:
    """One table (as capture recorded its columns) and its rows (Debezium JSON values)."""

    table: Table
    rows: list[Row] = field(default_factory=list)

    @property
    def name(self) -> QualifiedName:
        return self.table.name


def evaluate(conn: Any, sql: str, tables: Mapping[QualifiedName, TableState]) -> list[Row]:
    """``sql`` evaluated over ``tables`` on ``conn`` (in a transaction that is rolled back)."""
    try:
        with conn.cursor() as cur:
            names: dict[QualifiedName, str] = {}
            for state in tables.values():
                columns = state.table.columns
                types = []
                for c in columns:
                    cur.execute("SELECT format_type(%s, %s)", (c.type.oid, c.type.typmod))
                    types.append(cur.fetchone()[0])
                names[state.name] = temp_name(state.table.source, state.name)
                defs = [f"{quote_ident(c.name)} {t}" for c, t in zip(columns, types, strict=True)]
                tmp = _create_temp(cur, names[state.name], defs)
                if state.rows:
                    values = [
                        tuple(_pg_value(from_debezium(r.get(c.name), c.type)) for c in columns)
                        for r in state.rows
                    ]
                    cols = ", ".join(quote_ident(c.name) for c in columns)
                    psycopg2.extras.execute_values(cur, f"INSERT INTO {tmp} ({cols}) VALUES %s", values)  # noqa: S608
        return _query(conn, rewrite_tables(sql, names))
    finally:
        conn.rollback()


def _pg_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return psycopg2.Binary(v)
    return v


# -- recorded while a workload commits -------------------------------------------------


@dataclass(frozen=True)
class OracleOutput:
    name: str
    sql: str
    #: source name -> the tables of that source the SQL reads
    tables: Mapping[str, tuple[QualifiedName, ...]]

    @property
    def sources(self) -> set[str]:
        return set(self.tables)


@dataclass
class _Source:
    dsn: str
    conn: Any = None
    #: table -> column definitions ("name type") for temporary copies
    columns: dict[QualifiedName, list[str]] = field(default_factory=dict)


class Oracle:
    def __init__(self, sources: Mapping[str, str], outputs: Iterable[OracleOutput]) -> None:
        self.outputs = {o.name: o for o in outputs}
        self.sources = {name: _Source(dsn) for name, dsn in sources.items()}
        self.lock = threading.Lock()
        #: output -> xid -> rows (single-source outputs)
        self.results: dict[str, dict[int, list[Row]]] = {o: {} for o in self.outputs}
        #: source -> xid -> table -> JSON array text (for multi-source outputs)
        self.snapshots: dict[str, dict[int, dict[QualifiedName, str]]] = {s: {} for s in self.sources}
        self._cache: dict[tuple[str, tuple[tuple[str, int], ...]], list[Row]] = {}
        for name, src in self.sources.items():
            src.conn = exact_text(psycopg2.connect(src.dsn))
            src.conn.autocommit = True
            for o in self.outputs.values():
                if len(o.sources) > 1 and name in o.tables:
                    for t in o.tables[name]:
                        src.columns[t] = self._columns(src.conn, t)

    @staticmethod
    def _columns(conn: Any, table: QualifiedName) -> list[str]:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (table.quoted,),
            )
            return [f"{quote_ident(n)} {t}" for n, t in cur.fetchall()]

    def close(self) -> None:
        for s in self.sources.values():
            if s.conn is not None:
                s.conn.close()

    # -- recording --------------------------------------------------------------
    @contextmanager
    def commit(self, source: str, xid: int) -> Iterator[None]:
        """Hold the oracle while the caller commits ``xid`` on ``source``; record after."""
        if not self.outputs:  # nothing to record: let clients commit concurrently
            yield
            return
        with self.lock:
            yield
            self.record(source, xid)

    def record(self, source: str, xid: int) -> None:
        """Record the state of ``source`` as of now under ``xid`` (hold ``lock`` if others commit)."""
        conn = self.sources[source].conn
        for o in self.outputs.values():
            if source not in o.sources:
                continue
            if len(o.sources) == 1:
                self.results[o.name][xid] = _query(conn, o.sql)
            else:
                snap = self.snapshots[source].setdefault(xid, {})
                with conn.cursor() as cur:
                    for t in o.tables[source]:
                        if t not in snap:
                            cur.execute(f"SELECT coalesce(json_agg(t), '[]')::text FROM {t.quoted} t")  # noqa: S608
                            snap[t] = cur.fetchone()[0]

    def current(self, output: str) -> list[Row]:
        """The output's SQL on the sources as they are now."""
        o = self.outputs[output]
        if len(o.sources) == 1:
            return _query(self.sources[next(iter(o.sources))].conn, o.sql)
        with self.lock:
            return self._evaluate(o, {s: self._snapshot_now(s, o) for s in o.sources})

    def _snapshot_now(self, source: str, o: OracleOutput) -> dict[QualifiedName, str]:
        out = {}
        with self.sources[source].conn.cursor() as cur:
            for t in o.tables[source]:
                cur.execute(f"SELECT coalesce(json_agg(t), '[]')::text FROM {t.quoted} t")  # noqa: S608
                out[t] = cur.fetchone()[0]
        return out

    # -- expectations -------------------------------------------------------------
    def known(self, output: str, cut: Mapping[str, Cut]) -> bool:
        o = self.outputs[output]
        if len(o.sources) == 1:
            return cut[next(iter(o.sources))].xid in self.results[output]
        return all(cut[s].xid in self.snapshots[s] for s in o.sources)

    def expected(self, output: str, cut: Mapping[str, Cut]) -> list[Row]:
        """The output's SQL on PostgreSQL at ``cut`` (per source: the xid of its last transaction)."""
        o = self.outputs[output]
        if len(o.sources) == 1:
            return self.results[output][cut[next(iter(o.sources))].xid]
        key = (output, tuple(sorted((s, cut[s].xid) for s in o.sources)))
        if key not in self._cache:
            snaps = {s: self.snapshots[s][cut[s].xid] for s in o.sources}
            self._cache[key] = self._evaluate(o, snaps)
        return self._cache[key]

    def _evaluate(self, o: OracleOutput, snaps: Mapping[str, Mapping[QualifiedName, str]]) -> list[Row]:
        first = next(iter(sorted(o.sources)))
        conn = exact_text(psycopg2.connect(self.sources[first].dsn))
        try:
            names: dict[QualifiedName, str] = {}
            with conn.cursor() as cur:
                for s, tables in snaps.items():
                    for t, doc in tables.items():
                        names[t] = temp_name(s, t)
                        tmp = _create_temp(cur, names[t], self.sources[s].columns[t])
                        cur.execute(
                            f"INSERT INTO {tmp} SELECT * FROM json_populate_recordset(NULL::{tmp}, %s::json)",  # noqa: S608
                            (doc,),
                        )
            rows = _query(conn, rewrite_tables(o.sql, names))
            conn.rollback()
            return rows
        except psycopg2.Error as e:
            raise TxJoinError(f"the oracle could not evaluate output {o.name!r} over snapshots: {e}") from e
        finally:
            conn.close()


def oracle_for(spec: PipelineSpec, plans: Mapping[str, OutputPlan]) -> Oracle:
    """An oracle recording every output of ``spec`` on its sources."""
    outputs = []
    for name, plan in plans.items():
        tables: dict[str, list[Any]] = {}
        for t in sorted(plan.tables):
            tables.setdefault(spec.source_of(t).name, []).append(t)
        outputs.append(OracleOutput(name, spec.outputs[name].sql, {s: tuple(ts) for s, ts in tables.items()}))
    return Oracle({s.name: s.dsn for s in spec.sources.values()}, outputs)
