"""Sign-ups, account moves and departures in the users database; color and
cheese choices in the preferences database. A new user's preferences are
set right after the sign-up commits, in the other database."""

from __future__ import annotations

import random

from txjoin.scenario.workload import Client, Tx

COLORS = ["blue", "red", "green", "yellow"]
CHEESES = ["cheddar", "brie", "gouda", "feta"]


UPSERT = {
    "color": "INSERT INTO user_favorite_color VALUES (%s, %s) "
    "ON CONFLICT (user_uid) DO UPDATE SET favorite_color = excluded.favorite_color",
    "cheese": "INSERT INTO user_favorite_cheese VALUES (%s, %s) "
    "ON CONFLICT (user_uid) DO UPDATE SET favorite_cheese = excluded.favorite_cheese",
}


def transactions(client: Client, rng: random.Random) -> list[Tx]:
    kind = rng.choices(["signup", "prefs", "move", "leave"], weights=[3, 5, 2, 1])[0]
    account = str(rng.randint(100, 104))
    uid = f"{account}-{rng.randint(1, 8)}"
    if kind == "signup":
        return [
            Tx(
                "accounts",
                [("INSERT INTO users VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (uid, account, uid))],
            ),
            Tx(
                "prefs",
                [
                    (UPSERT["color"], (uid, rng.choice(COLORS))),
                    (UPSERT["cheese"], (uid, rng.choice(CHEESES))),
                ],
            ),
        ]
    if kind == "prefs":
        which = rng.choice(["color", "cheese"])
        return [Tx("prefs", [(UPSERT[which], (uid, rng.choice(COLORS if which == "color" else CHEESES)))])]
    if kind == "move":
        return [Tx("accounts", [("UPDATE users SET account_id = %s WHERE uid = %s", (account, uid))])]
    return [
        Tx("accounts", [("DELETE FROM users WHERE uid = %s", (uid,))]),
        Tx("prefs", [
            ("DELETE FROM user_favorite_color WHERE user_uid = %s", (uid,)),
            ("DELETE FROM user_favorite_cheese WHERE user_uid = %s", (uid,)),
        ]),
    ]  # fmt: skip
