"""Zero-sum transfers, plus the occasional owner change.

Accounts are updated in id order so that concurrent transfers queue on row
locks instead of deadlocking.
"""

from __future__ import annotations

import random

from txjoin.scenario.workload import Client, Tx


def transactions(client: Client, rng: random.Random) -> list[Tx]:
    if rng.random() < 0.1:
        owner, account = rng.randint(1, 10), rng.randint(1, 50)
        return [Tx("bank", [("UPDATE accounts SET owner_id = %s WHERE id = %s", (owner, account))])]
    a, b = sorted(rng.sample(range(1, 51), 2))
    amount = rng.randint(1, 100) * rng.choice([1, -1])
    return [Tx("bank", [
        ("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a)),
        ("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b)),
    ])]  # fmt: skip
