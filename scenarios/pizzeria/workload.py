"""The pizzeria's waiters (seed 003).

Each transaction is one of: place an order, then edit it right away in a
second transaction (the fast-change case of seed 003's lookup join, which
missed the edit); move a client to another table; change a pizza's price;
seat a new client (a client row and a table assignment in one transaction).
"""

from __future__ import annotations

import random

from txjoin.scenario.workload import Client, Tx

ORDER = (
    "INSERT INTO orders (table_assignment_id, order_time, pizzas) "
    "SELECT id, now(), %s FROM table_assignment ORDER BY random() LIMIT 1 RETURNING id"
)
EDIT = "UPDATE orders SET pizzas = pizzas || %s WHERE id = %s"
MOVE = (
    "UPDATE table_assignment SET table_id = %s "
    "WHERE id = (SELECT id FROM table_assignment ORDER BY random() LIMIT 1)"
)
PRICE = "UPDATE pizzas SET price = greatest(1, price + %s) WHERE id = %s"
NEW_CLIENT = "INSERT INTO clients (name) VALUES (%s) RETURNING id"
SEAT = "INSERT INTO table_assignment (client_id, table_id, in_time) VALUES (%s, %s, now())"


def transactions(client: Client, rng: random.Random) -> list[Tx]:
    kind = rng.choices(["order", "move", "price", "seat"], weights=[6, 2, 1, 1])[0]
    if kind == "order":
        pizzas = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
        place = Tx("shop", [(ORDER, (pizzas,))])
        # The waiter corrects the order as soon as it is placed.
        edit = Tx("shop", [(EDIT, ([rng.randint(1, 4)], place.ref(0)))])
        return [place, edit]
    if kind == "move":
        return [Tx("shop", [(MOVE, (rng.randint(1, 4),))])]
    if kind == "price":
        return [Tx("shop", [(PRICE, (rng.choice([-1, 1, 2]), rng.randint(1, 4)))])]
    guest = f"guest {client.id}-{rng.randint(1, 10**6)}"
    return [Tx("shop", [(NEW_CLIENT, (guest,)), (SEAT, (Tx.REF0, rng.randint(1, 4)))])]
