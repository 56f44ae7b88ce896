"""What a scenario's ``workload.py`` returns, and the clients that run it.

A scenario module defines ``transactions(client, rng) -> list[Tx]``: one
step of one client, as a short list of transactions run in order (a waiter
places an order, then edits it). A statement's parameters may refer to what
an earlier statement returned (``RETURNING id``): ``Tx.REF0`` is the first
value the transaction's first statement returned, ``tx.ref(i)`` the first
value statement ``i`` of an earlier transaction ``tx`` returned.

:class:`Clients` runs several clients in threads, each on its own
connections, committing through the oracle so every commit is recorded.
A transaction that fails (deadlock, serialization, constraint) is rolled
back and counted; its follow-ups are skipped.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg2

from txjoin.verify.oracle import Oracle

__all__ = ["Client", "Clients", "Committed", "Ref", "Tx"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ref:
    """The first value a statement returned: of an earlier transaction, or of this one (``tx`` None)."""

    tx: Tx | None
    statement: int


class Tx:
    """One transaction on one source: statements with their parameters."""

    REF0: ClassVar[Ref] = Ref(None, 0)

    def __init__(self, source: str, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        self.source = source
        self.statements = [(sql, tuple(args)) for sql, args in statements]
        self.results: dict[int, Any] = {}

    def ref(self, statement: int) -> Ref:
        return Ref(self, statement)

    def resolve(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out = []
        for a in args:
            if isinstance(a, Ref):
                owner = self if a.tx is None else a.tx
                if a.statement not in owner.results:
                    raise LookupError(f"statement {a.statement} returned nothing to refer to")
                a = owner.results[a.statement]
            out.append(a)
        return tuple(out)


@dataclass
class Client:
    """One concurrent client (a waiter, a teller...)."""

    id: int
    #: Free for the scenario's own bookkeeping.
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Committed:
    source: str
    xid: int
    #: time.time() right after COMMIT returned
    at: float


class Clients:
    """Run ``step`` on ``n`` clients until ``txs`` transactions committed or ``seconds`` passed."""

    def __init__(
        self,
        dsns: dict[str, str],
        step: Callable[[Client, random.Random], list[Tx]],
        oracle: Oracle,
        *,
        n: int,
        txs: int | None,
        seconds: float | None,
        rate: float | None = None,
        seed: int = 1,
    ) -> None:
        self.dsns = dsns
        self.step = step
        self.oracle = oracle
        self.n = n
        self.txs = txs
        self.seconds = seconds
        self.seed = seed
        #: Transactions per second over all clients (None: as fast as they go).
        self.rate = rate
        self.committed: list[Committed] = []
        self.aborted = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.started = 0.0
        self.finished = 0.0

    def _done(self) -> bool:
        if self._stop.is_set():
            return True
        if self.txs is not None and len(self.committed) >= self.txs:
            return True
        return self.seconds is not None and time.time() - self.started >= self.seconds

    def _run(self, client: Client) -> None:
        rng = random.Random(self.seed * 1000 + client.id)
        conns = {s: psycopg2.connect(dsn) for s, dsn in self.dsns.items()}
        pace = self.n / self.rate if self.rate else 0.0
        due = time.monotonic() + rng.random() * pace
        try:
            while not self._done():
                if pace:
                    # Think time: each client keeps its share of the rate.
                    self._stop.wait(max(0.0, due - time.monotonic()))
                    due += pace * rng.uniform(0.5, 1.5)
                for tx in self.step(client, rng):
                    if not self._one(conns[tx.source], tx):
                        break  # its follow-ups depend on it
        except BaseException as e:
            self.errors.append(e)
            self._stop.set()
        finally:
            for c in conns.values():
                c.close()

    def _one(self, conn: Any, tx: Tx) -> bool:
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT (txid_current() % 4294967296)::bigint")
                xid = int(cur.fetchone()[0])
                for i, (sql, args) in enumerate(tx.statements):
                    cur.execute(sql, tx.resolve(args))
                    if cur.description is not None:
                        row = cur.fetchone()
                        if row is not None:
                            tx.results[i] = row[0]
            with self.oracle.commit(tx.source, xid):
                conn.commit()
                at = time.time()
            with self._lock:
                self.committed.append(Committed(tx.source, xid, at))
            return True
        except (
            psycopg2.errors.DeadlockDetected,
            psycopg2.errors.SerializationFailure,
            psycopg2.IntegrityError,
            LookupError,
        ) as e:
            log.debug("transaction rolled back: %s", str(e).strip())
            conn.rollback()
            with self._lock:
                self.aborted += 1
            return False

    def run(self) -> None:
        self.started = time.time()
        threads = [threading.Thread(target=self._run, args=(Client(i),), daemon=True) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.finished = time.time()
        for e in self.errors:
            raise e

    def stop(self) -> None:
        self._stop.set()
