"""Hypothesis strategies for the join property test (issue [3 of 5]).

A *case* is a random schema of three to five tables linked by foreign keys,
one output SQL over all of them, initial rows, and a workload of concurrent
transactions with the points where micro-batches are triggered.

The tables form a tree around ``t0``, the table every output row comes from.
Each link adds one table ``far`` to a table ``near`` already in the tree,
either many-to-one (``near.ref_t<far> -> far.id``) or one-to-many
(``far.ref_t<near> -> near.id``), joined INNER or LEFT, with or without a
declared FOREIGN KEY (``ON UPDATE CASCADE ON DELETE SET NULL``: cascades put
more events of more tables into one transaction).

Every table has ``id int PRIMARY KEY``, ``v int`` and ``g int`` (a small
domain, for GROUP BY), plus its reference columns. Values come from small
domains so that joins match, keys collide and groups merge often.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hypothesis import strategies as st

IDS = st.integers(1, 6)
VALUES = st.one_of(st.none(), st.integers(-5, 5))
GROUPS = st.one_of(st.none(), st.integers(0, 2))

Kind = Literal["plain", "by_anchor", "by_group", "global"]


@dataclass(frozen=True)
class Link:
    near: int
    far: int
    #: True: far.ref_t<near> -> near.id (one near row, many far rows).
    down: bool
    outer: bool
    declared: bool

    @property
    def holder(self) -> int:
        """The table holding the reference column."""
        return self.far if self.down else self.near

    @property
    def target(self) -> int:
        """The table the reference points to."""
        return self.near if self.down else self.far

    @property
    def column(self) -> str:
        return f"ref_t{self.target}"

    def on(self) -> str:
        if self.down:
            return f"t{self.far}.ref_t{self.near} = t{self.near}.id"
        return f"t{self.far}.id = t{self.near}.ref_t{self.far}"


@dataclass(frozen=True)
class Schema:
    n: int
    links: tuple[Link, ...]  # links[i - 1] adds table i
    kind: Kind
    ordered_agg: bool
    json_of: int  # table whose rows the json_agg column lists
    where: str  # "" or a one-table filter
    full_identity: tuple[bool, ...]  # REPLICA IDENTITY FULL per table

    @property
    def tables(self) -> list[str]:
        return [f"t{i}" for i in range(self.n)]

    def refs(self, t: int) -> list[Link]:
        """Links whose reference column lives in table ``t``."""
        return [link for link in self.links if link.holder == t]

    def ref_columns(self, t: int) -> list[str]:
        return [link.column for link in self.refs(t)]

    def ddl(self) -> str:
        out = []
        for t in range(self.n):
            refs = "".join(f", {c} int" for c in self.ref_columns(t))
            out.append(f"CREATE TABLE t{t} (id int PRIMARY KEY, v int, g int{refs});")
            if self.full_identity[t]:
                out.append(f"ALTER TABLE t{t} REPLICA IDENTITY FULL;")
        for link in self.links:
            if link.declared:
                out.append(
                    f"ALTER TABLE t{link.holder} ADD FOREIGN KEY ({link.column}) REFERENCES t{link.target} (id) "
                    "ON UPDATE CASCADE ON DELETE SET NULL;"
                )
        return "\n".join(out)

    def from_clause(self) -> str:
        joins = "".join(
            f" {'LEFT ' if link.outer else ''}JOIN t{link.far} ON {link.on()}" for link in self.links
        )
        where = f" WHERE {self.where}" if self.where else ""
        return f"FROM t0{joins}{where}"

    def sql(self, *, with_json: bool = True) -> str:
        others = range(1, self.n)
        j = self.json_of
        order = f" ORDER BY t{j}.id" if self.ordered_agg else ""
        json_col = f"json_agg(json_build_object('id', t{j}.id, 'v', t{j}.v){order}) AS j{j}"
        if self.kind == "plain":
            cols = ["t0.id AS k0", *(f"t{link.far}.id AS k{link.far}" for link in self.down_links())]
            cols += [f"t{i}.v AS v{i}" for i in range(self.n)] + [f"t{i}.g AS g{i}" for i in others]
            return f"SELECT {', '.join(cols)} {self.from_clause()}"
        aggs = [f"count(t{i}.id) AS n{i}" for i in others] + [f"sum(t{i}.v) AS s{i}" for i in others]
        if self.kind == "by_anchor":
            cols = ["t0.id AS k0", "t0.v AS v0", *aggs, *([json_col] if with_json else [])]
            return f"SELECT {', '.join(cols)} {self.from_clause()} GROUP BY t0.id, t0.v"
        if self.kind == "by_group":
            cols = ["t0.g AS g0", "count(*) AS n", *aggs, *([json_col] if with_json else [])]
            return f"SELECT {', '.join(cols)} {self.from_clause()} GROUP BY t0.g"
        return f"SELECT 1 AS one, count(*) AS n, {', '.join(aggs)} {self.from_clause()}"

    def down_links(self) -> list[Link]:
        """Links that can multiply rows: their table's id is part of a plain output's key."""
        return [link for link in self.links if link.down]

    def key(self) -> list[str]:
        if self.kind == "plain":
            return ["k0", *(f"k{link.far}" for link in self.down_links())]
        return {"by_anchor": ["k0"], "by_group": ["g0"], "global": ["one"]}[self.kind]


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    n = draw(st.integers(3, 5))
    links = []
    for far in range(1, n):
        links.append(
            Link(
                near=draw(st.integers(0, far - 1)),
                far=far,
                down=draw(st.booleans()),
                outer=draw(st.booleans()),
                declared=draw(st.booleans()),
            )
        )
    kind: Kind = draw(st.sampled_from(["plain", "plain", "by_anchor", "by_anchor", "by_group", "global"]))
    where = draw(
        st.sampled_from(["", "", "", "t0.v IS DISTINCT FROM 0", f"t{draw(st.integers(1, n - 1))}.g <> 1"])
    )
    return Schema(
        n=n,
        links=tuple(links),
        kind=kind,
        ordered_agg=draw(st.booleans()),
        json_of=draw(st.integers(1, n - 1)),
        where=where,
        full_identity=tuple(draw(st.booleans()) for _ in range(n)),
    )


# -- rows and operations --------------------------------------------------------

Op = tuple[Any, ...]


@st.composite
def rows(draw: st.DrawFn, schema: Schema, t: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": draw(IDS), "v": draw(VALUES), "g": draw(GROUPS)}
    for c in schema.ref_columns(t):
        row[c] = draw(st.one_of(st.none(), IDS))
    return row


@st.composite
def operations(draw: st.DrawFn, schema: Schema) -> Op:
    t = draw(st.integers(0, schema.n - 1))
    kinds = ["insert", "insert", "update_v", "update_g", "delete", "move_pk"]
    if schema.ref_columns(t):
        kinds += ["update_ref", "update_ref"]
    kind = draw(st.sampled_from(kinds))
    if kind == "insert":
        return ("insert", t, draw(rows(schema, t)))
    if kind == "update_v":
        return ("update_v", t, draw(IDS), draw(VALUES))
    if kind == "update_g":
        return ("update_g", t, draw(IDS), draw(GROUPS))
    if kind == "update_ref":
        return (
            "update_ref",
            t,
            draw(IDS),
            draw(st.sampled_from(schema.ref_columns(t))),
            draw(st.none() | IDS),
        )
    if kind == "delete":
        return ("delete", t, draw(IDS))
    return ("move_pk", t, draw(IDS), draw(IDS))


@dataclass(frozen=True)
class TxPlan:
    ops: tuple[Op, ...]
    rollback: bool = False


@dataclass(frozen=True)
class Case:
    schema: Schema
    initial: tuple[tuple[int, dict[str, Any]], ...]
    transactions: tuple[TxPlan, ...]
    #: Connections running transactions at once.
    connections: int
    #: Which open transaction takes the next step (modulo the open ones).
    schedule: tuple[int, ...]
    #: Commit counts after which a micro-batch is triggered (then one at the end).
    triggers: frozenset[int] = field(default_factory=frozenset)


@st.composite
def cases(draw: st.DrawFn, max_transactions: int = 10) -> Case:
    schema = draw(schemas())
    initial = []
    for t in range(schema.n):
        for row in draw(st.lists(rows(schema, t), max_size=5)):
            initial.append((t, row))
    txs = draw(
        st.lists(
            st.builds(
                TxPlan,
                ops=st.lists(operations(schema), min_size=1, max_size=4).map(tuple),
                rollback=st.sampled_from([False, False, False, False, True]),
            ),
            min_size=1,
            max_size=max_transactions,
        )
    )
    n_steps = sum(len(tx.ops) + 1 for tx in txs)
    return Case(
        schema=schema,
        initial=tuple(initial),
        transactions=tuple(txs),
        connections=draw(st.integers(1, 3)),
        schedule=tuple(draw(st.lists(st.integers(0, 2), max_size=n_steps))),
        triggers=frozenset(draw(st.sets(st.integers(0, len(txs)), max_size=3))),
    )


# -- SQL for operations -----------------------------------------------------------


def _ref_expr(schema: Schema, t: int, column: str) -> str:
    link = next(link for link in schema.refs(t) if link.column == column)
    if link.declared:
        # A missing target becomes NULL instead of a foreign-key violation.
        return f"(SELECT id FROM t{link.target} WHERE id = %s)"
    return "%s"


def op_sql(schema: Schema, op: Op) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters for one operation."""
    kind, t = op[0], op[1]
    if kind == "insert":
        row = op[2]
        cols = list(row)
        exprs = [_ref_expr(schema, t, c) if c.startswith("ref_") else "%s" for c in cols]
        return (
            f"INSERT INTO t{t} ({', '.join(cols)}) VALUES ({', '.join(exprs)}) ON CONFLICT (id) DO NOTHING",
            tuple(row.values()),
        )
    if kind == "update_v":
        return f"UPDATE t{t} SET v = %s WHERE id = %s", (op[3], op[2])
    if kind == "update_g":
        return f"UPDATE t{t} SET g = %s WHERE id = %s", (op[3], op[2])
    if kind == "update_ref":
        return f"UPDATE t{t} SET {op[3]} = {_ref_expr(schema, t, op[3])} WHERE id = %s", (op[4], op[2])
    if kind == "delete":
        return f"DELETE FROM t{t} WHERE id = %s", (op[2],)
    if kind == "move_pk":
        return (
            f"UPDATE t{t} SET id = %s WHERE id = %s AND NOT EXISTS (SELECT 1 FROM t{t} WHERE id = %s)",
            (op[3], op[2], op[3]),
        )
    raise AssertionError(f"unknown operation {op!r}")
