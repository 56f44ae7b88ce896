"""The captured tables as a source's catalog describes them.

:func:`describe` reads, per table, its columns (type, ``format_type()``,
NOT NULL), primary key, kind, replica identity and constraints, in one pass
over the catalog, and refuses what txjoin cannot capture (a missing table, a
view, no primary key). Every stage derives its own view from :class:`Table`:
capture's checks, the planner's ``TableInfo``, the replica store's
``TableSpec``, the join stage's typed columns and ``txjoin check``'s
generator and scratch copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from txjoin.errors import ConfigError, SourceError
from txjoin.pg.connect import connect, describe_dsn
from txjoin.pg.names import QualifiedName
from txjoin.pg.types import ColumnType

__all__ = [
    "NONDETERMINISTIC",
    "Column",
    "ForeignKey",
    "Table",
    "column_from_json",
    "column_to_json",
    "describe",
    "describe_source",
    "domain_bases",
    "resolve_domain",
]


#: How a column's collation is named when it takes values whose bytes differ as equal.
NONDETERMINISTIC = "nondeterministic "


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    #: ``format_type()``: 'numeric(8,2)', 'integer[]' ('' when not read from a catalog).
    formatted: str = ""
    not_null: bool = False
    #: The collation deciding this text column's order: 'C', 'POSIX', an ICU
    #: locale ('en-US') or a libc one ('en_US.utf8'); the database's for
    #: 'default'; 'nondeterministic <locale>' for one that takes different bytes as equal.
    #: '' for types without collation.
    collation: str = ""
    #: An enum's labels in their declared order (``pg_enum.enumsortorder``); () for other types.
    enum_labels: tuple[str, ...] = ()
    #: A domain's CHECK constraints ('CHECK ((VALUE >= 0))'); () for other types.
    domain_checks: tuple[str, ...] = ()
    #: The collation is the database's default, not one the column declares: PostgreSQL then
    #: lets another column's declared collation decide a comparison of both.
    collation_is_default: bool = False


def column_to_json(c: Column) -> dict[str, Any]:
    """A column as JSON (the replica store's view, a resync's manifest)."""
    return {
        "name": c.name,
        "type_oid": c.type.oid,
        "type_name": c.type.name,
        "typmod": c.type.typmod,
        "formatted": c.formatted,
        "not_null": c.not_null,
        "collation": c.collation,
        "enum_labels": list(c.enum_labels),
        "domain_checks": list(c.domain_checks),
        "collation_is_default": c.collation_is_default,
    }


def column_from_json(d: Mapping[str, Any]) -> Column:
    return Column(
        str(d["name"]),
        ColumnType(int(d["type_oid"]), str(d["type_name"]), int(d["typmod"])),
        formatted=str(d.get("formatted", "")),
        not_null=bool(d.get("not_null", False)),
        collation=str(d.get("collation", "")),
        enum_labels=tuple(d.get("enum_labels", ())),
        domain_checks=tuple(d.get("domain_checks", ())),
        collation_is_default=bool(d.get("collation_is_default", False)),
    )


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    table: QualifiedName
    ref_columns: tuple[str, ...]
    #: ``pg_get_constraintdef()``: 'FOREIGN KEY (a) REFERENCES t(id) ON DELETE CASCADE'.
    definition: str = ""
    name: str = ""


@dataclass(frozen=True)
class Table:
    """One table of one source."""

    name: QualifiedName
    source: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    oid: int = 0
    #: ``pg_class.relkind``: 'r' (table) or 'p' (partitioned table).
    kind: str = "r"
    #: ``pg_class.relreplident``: 'd' (default), 'f' (full), 'i' (index), 'n' (nothing).
    replica_identity: str = "d"
    #: Primary key, unique and check constraints, as CREATE TABLE would list them.
    constraints: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    #: The database's default collation ('C', an ICU or libc locale; '' when not read from a
    #: catalog): text computed from no text column (casts, constants, ->>) orders under it.
    #: A database keeps it for life, so it is no part of the table's schema.
    default_collation: str = field(default="", compare=False)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def types(self) -> dict[str, ColumnType]:
        return {c.name: c.type for c in self.columns}


def _true(v: Any) -> bool:
    # Also under a raw-text typecaster ('t'/'f').
    return v is True or v in ("t", "true")


_CLASS_SQL = """
SELECT c.oid, c.relreplident, c.relkind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
_COLUMNS_SQL = """
SELECT a.attname, a.atttypid, ty.typname, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       CASE WHEN a.attcollation = 0 THEN '' WHEN co.collname = 'default' THEN %s
            WHEN co.collname IN ('C', 'POSIX', 'ucs_basic') THEN 'C'
            ELSE CASE WHEN (to_jsonb(co) ->> 'collisdeterministic') = 'false' THEN %s ELSE '' END
                 || CASE WHEN co.collprovider = 'i'
                         THEN coalesce(to_jsonb(co) ->> 'colliculocale', to_jsonb(co) ->> 'colllocale',
                                       co.collname)
                         ELSE coalesce(nullif(co.collcollate, ''), co.collname) END END,
       CASE WHEN ty.typtype = 'e' THEN (SELECT string_agg(e.enumlabel, E'\\x1f' ORDER BY e.enumsortorder)
                                        FROM pg_enum e WHERE e.enumtypid = ty.oid) END,
       CASE WHEN ty.typtype = 'd' THEN (SELECT string_agg(pg_get_constraintdef(dc.oid), E'\\x1f')
                    FROM pg_constraint dc WHERE dc.contypid = ty.oid AND dc.contype = 'c') END,
       coalesce(co.collname = 'default', false)
FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum
"""
_PRIMARY_KEY_SQL = """
SELECT a.attname FROM pg_index i
JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.ord
"""
# One row per constraint column, so no array value crosses the wire.
_CONSTRAINTS_SQL = """
SELECT c.conname, c.contype, pg_get_constraintdef(c.oid), fn.nspname, fc.relname, k.i, a.attname, fa.attname
FROM pg_constraint c
LEFT JOIN pg_class fc ON fc.oid = c.confrelid
LEFT JOIN pg_namespace fn ON fn.oid = fc.relnamespace
LEFT JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(n, i) ON c.contype = 'f'
LEFT JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
LEFT JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[k.i]
WHERE c.conrelid = %s AND c.contype IN ('p', 'u', 'c', 'f')
ORDER BY c.contype, c.conname, k.i
"""


# The database's default collation (ICU locale, builtin locale or libc LC_COLLATE), across
# versions (PostgreSQL 17 renamed daticulocale and colliculocale to datlocale and colllocale, and
# added the builtin provider, whose C.UTF-8 maps case by Unicode: not C).
_DB_COLLATION_SQL = """
SELECT CASE WHEN to_jsonb(d) ->> 'datlocprovider' = 'i'
            THEN coalesce(to_jsonb(d) ->> 'daticulocale', to_jsonb(d) ->> 'datlocale')
            WHEN to_jsonb(d) ->> 'datlocprovider' = 'b'
            THEN CASE WHEN to_jsonb(d) ->> 'datlocale' = 'C' THEN 'C'
                      ELSE 'builtin ' || coalesce(to_jsonb(d) ->> 'datlocale', '') END
            WHEN d.datcollate IN ('C', 'POSIX') THEN 'C' ELSE d.datcollate END
FROM pg_database d WHERE d.datname = current_database()
"""


# Every domain's base type (through domains over domains) and the type modifier it declares.
_DOMAINS_SQL = """
WITH RECURSIVE d(oid, base, typmod) AS (
    SELECT oid, typbasetype, typtypmod FROM pg_type WHERE typtype = 'd'
    UNION ALL
    SELECT d.oid, t.typbasetype, CASE WHEN d.typmod = -1 THEN t.typtypmod ELSE d.typmod END
    FROM d JOIN pg_type t ON t.oid = d.base WHERE t.typtype = 'd'
)
SELECT d.oid, d.base, t.typname, d.typmod FROM d JOIN pg_type t ON t.oid = d.base WHERE t.typtype <> 'd'
"""


def domain_bases(cur: Any) -> dict[int, ColumnType]:
    """Domain oid -> its base type: a domain's values are its base type's values,
    written, compared and converted alike (CHECK constraints only restrict them)."""
    cur.execute(_DOMAINS_SQL)
    return {int(oid): ColumnType(int(base), name, int(mod)) for oid, base, name, mod in cur.fetchall()}


def resolve_domain(t: ColumnType, bases: dict[int, ColumnType]) -> ColumnType:
    """``t``, or its base type when ``t`` is a domain (the column's own modifier wins)."""
    base = bases.get(t.oid)
    if base is None:
        return t
    return ColumnType(base.oid, base.name, t.typmod if t.typmod != -1 else base.typmod)


def _constraints(cur: Any, oid: int) -> tuple[tuple[str, ...], tuple[ForeignKey, ...]]:
    cur.execute(_CONSTRAINTS_SQL, (oid,))
    plain: list[str] = []
    fks: dict[str, tuple[str, QualifiedName, list[str], list[str]]] = {}  # by constraint name
    for name, kind, definition, fschema, ftable, _i, col, fcol in cur.fetchall():
        if kind != "f":
            plain.append(definition)
            continue
        fk = fks.setdefault(name, (definition, QualifiedName(fschema, ftable), [], []))
        fk[2].append(col)
        fk[3].append(fcol)
    foreign = tuple(ForeignKey(tuple(c), ref, tuple(rc), d, n) for n, (d, ref, c, rc) in fks.items())
    return tuple(plain), foreign


def describe(
    conn: Any, tables: Iterable[QualifiedName], *, source: str = "", where: str = "the source"
) -> dict[QualifiedName, Table]:
    """``tables`` as ``conn``'s catalog describes them (in its current transaction).

    Raises :class:`SourceError` for a table that does not exist or has no
    primary key, :class:`ConfigError` for a relation that is not a table.
    """
    out: dict[QualifiedName, Table] = {}
    with conn.cursor() as cur:
        cur.execute(_DB_COLLATION_SQL)
        row = cur.fetchone()
        default_collation = str(row[0]) if row is not None and row[0] is not None else "C"
        bases = domain_bases(cur)
        for t in tables:
            cur.execute(_CLASS_SQL, (t.schema, t.table))
            row = cur.fetchone()
            if row is None:
                raise SourceError(
                    f"table {t} does not exist on {where}: create it, or remove it from the source's tables",
                    table=str(t),
                )
            oid, ident, kind = int(row[0]), str(row[1]), str(row[2])
            if kind not in ("r", "p"):
                raise ConfigError(
                    f"{t} on {where} is not a table (relkind {kind!r}); only tables can be captured",
                    table=str(t),
                )
            cur.execute(_COLUMNS_SQL, (default_collation, NONDETERMINISTIC, oid))
            columns = tuple(
                Column(
                    n,
                    resolve_domain(ColumnType(int(toid), tname, int(mod)), bases),
                    formatted,
                    _true(nn),
                    str(coll or ""),
                    tuple(labels.split("\x1f")) if labels else (),
                    tuple(checks.split("\x1f")) if checks else (),
                    _true(is_default),
                )
                for n, toid, tname, mod, formatted, nn, coll, labels, checks, is_default in cur.fetchall()
            )
            cur.execute(_PRIMARY_KEY_SQL, (oid,))
            pk = tuple(r[0] for r in cur.fetchall())
            if not pk:
                raise SourceError(
                    f"table {t} on {where} has no primary key. txjoin keys replica rows and join "
                    f"results by primary key, so it cannot capture this table: add one, e.g. "
                    f"ALTER TABLE {t.quoted} ADD PRIMARY KEY (id);",
                    table=str(t),
                )
            constraints, foreign_keys = _constraints(cur, oid)
            out[t] = Table(
                t, source, columns, pk, oid, kind, ident, constraints, foreign_keys, default_collation
            )
    return out


def describe_source(dsn: str, source: str, tables: Sequence[QualifiedName]) -> dict[QualifiedName, Table]:
    """:func:`describe` on a connection of its own to ``dsn``."""
    conn = connect(dsn)
    try:
        out = describe(conn, tables, source=source, where=describe_dsn(dsn))
        conn.rollback()
    finally:
        conn.close()
    return out
