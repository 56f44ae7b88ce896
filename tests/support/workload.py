"""A single-threaded driver of several concurrent transactions.

Statements of different connections interleave (so transactions really are
concurrent on the server), but the driver issues commits one at a time, so
the commit order is known exactly. Each transaction records its xid and the
number of change events capture must emit per table (rowcount; a primary-key
update counts twice, as Debezium emits delete + create; a truncate once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg2

from tests.support.capture import current_xid


@dataclass
class TxRecord:
    xid: int
    counts: dict[str, int] = field(default_factory=dict)
    committed: bool = False


class Driver:
    def __init__(self, dsn: str, connections: int) -> None:
        self.conns = [psycopg2.connect(dsn) for _ in range(connections)]
        self.open: dict[int, TxRecord] = {}
        self.committed: list[TxRecord] = []
        self.rolled_back: list[TxRecord] = []

    def close(self) -> None:
        for c in self.conns:
            c.close()

    def _tx(self, i: int) -> TxRecord:
        tx = self.open.get(i)
        if tx is None:
            with self.conns[i].cursor() as cur:
                tx = TxRecord(current_xid(cur))
            self.open[i] = tx
        return tx

    def run(self, i: int, sql: str, args: Any = None, *, table: str, pk_change: bool = False) -> int:
        """Execute ``sql`` on connection ``i`` inside its open transaction."""
        tx = self._tx(i)
        with self.conns[i].cursor() as cur:
            cur.execute(sql, args)
            n = 1 if sql.lstrip().upper().startswith("TRUNCATE") else max(cur.rowcount, 0)
        if n:
            tx.counts[table] = tx.counts.get(table, 0) + n * (2 if pk_change else 1)
        return n

    def commit(self, i: int) -> TxRecord | None:
        tx = self.open.pop(i, None)
        self.conns[i].commit()
        if tx is not None:
            tx.committed = True
            if any(tx.counts.values()):
                self.committed.append(tx)
        return tx

    def rollback(self, i: int) -> None:
        tx = self.open.pop(i, None)
        self.conns[i].rollback()
        if tx is not None:
            self.rolled_back.append(tx)

    def commit_all(self) -> None:
        for i in list(self.open):
            self.commit(i)
