"""The ledger's invariant: money is neither created nor destroyed."""

from __future__ import annotations

from typing import Any

INITIAL_TOTAL = 50 * 1000


def check(output: str, rows: list[dict[str, Any]]) -> str | None:
    """None if ``rows`` (one version of ``output``) keep the invariant, else what is wrong."""
    if output == "total":
        total = rows[0]["total"] if rows else None
        if total != INITIAL_TOTAL:
            return f"total is {total}, not {INITIAL_TOTAL}"
    if output == "balances":
        total = sum(r["balance"] for r in rows)
        if total != INITIAL_TOTAL or len(rows) != 50:
            return f"{len(rows)} accounts hold {total}, not 50 accounts holding {INITIAL_TOTAL}"
    return None


def metric(output: str, rows: list[dict[str, Any]]) -> float | None:
    """What ``txjoin scenario run ledger --plot`` draws per version: the money in the ledger."""
    if output == "total":
        return float(rows[0]["total"]) if rows else None
    if output == "balances":
        return float(sum(r["balance"] for r in rows))
    return None
