"""20 row events per transaction; one transaction in ten renames a client."""

from __future__ import annotations

import random

from txjoin.scenario.workload import Client, Tx

ROWS = 20


def transactions(client: Client, rng: random.Random) -> list[Tx]:
    if rng.random() < 0.1:
        c = rng.randint(1, 1000)
        name = f"client {c} v{rng.randint(1, 99)}"
        return [Tx("shop", [("UPDATE clients SET name = %s WHERE id = %s", (name, c))])]
    return [Tx("shop", [(
        "INSERT INTO orders (client_id, amount, note) "
        "SELECT 1 + (random() * 999)::int, (random() * 100)::int, 'order ' || g "
        "FROM generate_series(1, %s) g",
        (ROWS,),
    )])]  # fmt: skip
