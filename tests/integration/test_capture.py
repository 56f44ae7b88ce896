"""Capture against a real PostgreSQL: the changelog reproduces every table,
and the transaction topic lists every committed transaction once, in commit
order, with correct per-table counts (issue [1 of 5], acceptance 1)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.support.capture import (
    execute,
    make_config,
    running_capture,
    source_rows,
    wait_for_xids,
)
from tests.support.workload import Driver
from txjoin.changelog import ChangelogReader
from txjoin.changelog.snapshots import read_manifest
from txjoin.verify.replay import replay

pytestmark = pytest.mark.postgres

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL,
                       opened date, tags text[]);
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE orders (id bigint PRIMARY KEY, account_id int, amount double precision,
                     placed timestamptz, meta jsonb, items integer[], note varchar(40),
                     active boolean, at timestamp, code uuid, blob bytea, small smallint,
                     flag char(3));
CREATE TABLE links (a int, b int, weight real, PRIMARY KEY (a, b));
INSERT INTO accounts VALUES (0, 'seed', 10.50, '1999-12-31', '{a,"b c"}');
INSERT INTO orders (id, account_id, amount, note) VALUES (0, 0, 1.5, 'seed order');
"""
TABLES = ["public.accounts", "public.orders", "public.links"]
CONNS = 3


class Script:
    """A seeded random mix of statements over ``CONNS`` concurrent connections.

    Connection ``i`` only touches keys ``k`` with ``k % CONNS == i`` so that
    interleaved open transactions never wait on each other's row locks.
    """

    def __init__(self, driver: Driver, seed: int) -> None:
        self.d = driver
        self.rng = random.Random(seed)
        self.accounts: list[set[int]] = [set() for _ in range(CONNS)]
        self.orders: list[set[int]] = [set() for _ in range(CONNS)]
        self.links: list[set[tuple[int, int]]] = [set() for _ in range(CONNS)]
        self.saved: dict[int, tuple[set[int], set[int], set[tuple[int, int]]]] = {}
        self.next_id = [CONNS + i for i in range(CONNS)]

    def _new_id(self, i: int) -> int:
        v = self.next_id[i]
        self.next_id[i] += CONNS
        return v

    def _begin(self, i: int) -> None:
        if i not in self.saved:
            self.saved[i] = (set(self.accounts[i]), set(self.orders[i]), set(self.links[i]))

    def step(self, i: int) -> None:
        d, rng = self.d, self.rng
        self._begin(i)
        acc, ords, lnk = self.accounts[i], self.orders[i], self.links[i]
        action = rng.choice(
            [
                "ins_acc",
                "ins_ord",
                "ins_ord",
                "upd_acc",
                "upd_ord",
                "fk",
                "del_ord",
                "del_acc",
                "pk_acc",
                "ins_link",
                "pk_link",
                "multi",
            ]
        )
        if action == "ins_acc" or not acc:
            k = self._new_id(i)
            d.run(
                i,
                "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s)",
                (
                    k,
                    f"owner {k} 'q\"",
                    rng.randint(-(10**6), 10**6) / 100,
                    "2023-01-01",
                    ["x", 'y"z', None],
                ),
                table="public.accounts",
            )
            acc.add(k)
        elif action == "ins_ord" or (action in ("upd_ord", "del_ord", "fk") and not ords):
            k = self._new_id(i)
            d.run(
                i,
                "INSERT INTO orders VALUES (%s, %s, %s, now(), %s, %s, %s, %s, localtimestamp, "
                "gen_random_uuid(), %s, %s, %s)",
                (
                    k,
                    rng.choice(sorted(acc)),
                    rng.random() * 100,
                    json.dumps({"k": k, "nested": [1, {"x": None}]}),
                    [rng.randint(1, 4) for _ in range(rng.randint(0, 4))],
                    f"note\n{k}",
                    rng.random() < 0.5,
                    bytes(rng.randrange(256) for _ in range(rng.randint(0, 8))),
                    rng.randint(-300, 300),
                    "ab",
                ),
                table="public.orders",
            )
            ords.add(k)
        elif action == "upd_acc":
            k = rng.choice(sorted(acc))
            d.run(
                i,
                "UPDATE accounts SET balance = balance + %s, tags = array_append(tags, 't') WHERE id = %s",
                (rng.randint(1, 500), k),
                table="public.accounts",
            )
        elif action == "upd_ord":
            k = rng.choice(sorted(ords))
            d.run(
                i,
                "UPDATE orders SET amount = %s, note = NULL, active = NOT coalesce(active, false) "
                "WHERE id = %s",
                (rng.random(), k),
                table="public.orders",
            )
        elif action == "fk":
            k = rng.choice(sorted(ords))
            d.run(
                i,
                "UPDATE orders SET account_id = %s WHERE id = %s",
                (rng.choice(sorted(acc)), k),
                table="public.orders",
            )
        elif action == "del_ord":
            k = rng.choice(sorted(ords))
            d.run(i, "DELETE FROM orders WHERE id = %s", (k,), table="public.orders")
            ords.discard(k)
        elif action == "del_acc" and len(acc) > 1:
            k = rng.choice(sorted(acc))
            d.run(i, "DELETE FROM accounts WHERE id = %s", (k,), table="public.accounts")
            acc.discard(k)
        elif action == "pk_acc":
            k = rng.choice(sorted(acc))
            new = self._new_id(i)
            d.run(
                i,
                "UPDATE accounts SET id = %s WHERE id = %s",
                (new, k),
                table="public.accounts",
                pk_change=True,
            )
            acc.discard(k)
            acc.add(new)
        elif action == "ins_link" or (action == "pk_link" and not lnk):
            a, b = self._new_id(i), rng.randint(1, 5)
            d.run(
                i,
                "INSERT INTO links VALUES (%s, %s, %s)",
                (a, b, rng.random()),
                table="public.links",
            )
            lnk.add((a, b))
        elif action == "pk_link":
            a, b = rng.choice(sorted(lnk))
            new = self._new_id(i)
            d.run(
                i,
                "UPDATE links SET a = %s WHERE a = %s AND b = %s",
                (new, a, b),
                table="public.links",
                pk_change=True,
            )
            lnk.discard((a, b))
            lnk.add((new, b))
        else:  # several rows in one statement
            n = d.run(
                i,
                "UPDATE orders SET small = small + 1 WHERE id = ANY(%s)",
                (sorted(ords),),
                table="public.orders",
            )
            assert n == len(ords)
        roll = rng.random()
        if roll < 0.06:
            d.rollback(i)
            self.accounts[i], self.orders[i], self.links[i] = self.saved.pop(i)
        elif roll < 0.35:
            d.commit(i)
            self.saved.pop(i, None)

    def commit_all(self) -> None:
        self.d.commit_all()
        self.saved.clear()

    def truncate_links(self) -> None:
        self.commit_all()
        k = self._new_id(0)
        self.d.run(0, "INSERT INTO links VALUES (%s, 1, 1)", (k,), table="public.links")
        self.d.run(
            0,
            "UPDATE accounts SET owner = 'during truncate' WHERE id = ANY(%s)",
            (sorted(self.accounts[0]) or [0],),
            table="public.accounts",
        )
        self.d.run(0, "TRUNCATE links", table="public.links")
        self.d.run(0, "INSERT INTO links VALUES (%s, 2, 2)", (k,), table="public.links")
        self.d.commit(0)
        for s in self.links:
            s.clear()
        self.links[0].add((k, 2))


def test_changelog_replays_every_table_and_lists_transactions_in_commit_order(
    pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, SCHEMA)
    changelog = tmp_path / "changelog"
    config = make_config(pg_db, changelog, TABLES, prefix="shop")
    driver = Driver(pg_db, CONNS)
    try:
        with running_capture(config) as ct:
            script = Script(driver, seed=20261123)
            rng = random.Random(7)
            for n in range(240):
                script.step(rng.randrange(CONNS))
                if n == 150:
                    script.truncate_links()
            script.commit_all()
            # A rolled-back transaction right at the end, too.
            driver.run(1, "INSERT INTO links VALUES (-1, -1, 0)", table="public.links")
            driver.rollback(1)
            wait_for_xids(changelog, "shop", {t.xid for t in driver.committed}, ct)
    finally:
        driver.close()

    result = replay(changelog, "shop", TABLES)
    for table in TABLES:
        expected = source_rows(pg_db, table)
        got = result.tables[table]
        assert got == expected, f"replay of {table} differs from PostgreSQL"

    # The transaction topic: the snapshot unit, then every committed
    # transaction once, in commit order, with per-table counts.
    ends = result.transactions
    snapshot, streamed = ends[0], ends[1:]
    # The snapshot is columnar: its END names a manifest and counts no topic events.
    assert snapshot.manifest is not None
    assert snapshot.event_count == 0
    rows = read_manifest(changelog, snapshot.manifest).rows
    assert {t: n for t, n in rows.items() if n} == {"public.accounts": 1, "public.orders": 1}
    assert [e.xid for e in streamed] == [t.xid for t in driver.committed]
    assert len(driver.committed) > 40
    for end, tx in zip(streamed, driver.committed, strict=True):
        assert end.counts == tx.counts, f"xid {tx.xid}"
        assert end.event_count == sum(tx.counts.values())
        for table, n in tx.counts.items():
            assert result.applied.get((tx.xid, table)) == n
    assert [e.end_lsn for e in streamed] == sorted(e.end_lsn for e in streamed)
    assert not result.duplicates

    # Rolled-back transactions leave no trace in any topic.
    rolled = {t.xid for t in driver.rolled_back}
    assert rolled
    reader = ChangelogReader(changelog)
    for topic in reader.topics():
        for _, raw in reader.read(topic):
            v = json.loads(raw)
            if "source" in v:
                assert v["source"]["txId"] not in rolled
            elif "id" in v:
                assert int(v["id"].split(":")[0]) not in rolled
