"""Large transactions: passed through as they arrive, counted by intervals.

A transaction that buffers more than ``stage_events`` events is *staged*:
its events leave the operator's state at once, released as staged rows
(``tx_seq`` -1) that the join stage keeps in its replica store without
applying them, and only a summary stays here: per table, the set of
``data_collection_order`` positions seen, as intervals (a table's events of
one transaction are numbered 1..n, so in-order delivery is one interval, and
duplicates merge into it). The transaction is complete when its END is
accepted and each table's positions are exactly 1..count; it is then released
in commit order as one commit row (``op`` 'C'), and the join stage applies
the staged events at once. Memory stays bounded whatever the size.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["STAGED", "complete", "merge", "sizes", "tables_beyond"]

#: Intervals of positions seen per (xid, table) of staged transactions.
STAGED = {"xid": "int64", "table": "object", "lo": "int64", "hi": "int64"}


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in STAGED.items()})


def merge(staged: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """``staged`` with the positions (xid, table, dc_order) of ``events`` added, as merged intervals."""
    points = events[["xid", "table", "dc_order"]].drop_duplicates()
    points = pd.DataFrame(
        {"xid": points["xid"], "table": points["table"], "lo": points["dc_order"], "hi": points["dc_order"]}
    )
    both = points if staged.empty else pd.concat([staged, points], ignore_index=True)
    if both.empty:
        return _empty()
    both = both.sort_values(["xid", "table", "lo"], kind="stable", ignore_index=True)
    group = (both["xid"] != both["xid"].shift()) | (both["table"] != both["table"].shift())
    # Highest end among earlier intervals of the same group: a run starts past it (+1: adjacent merges).
    reach = both.groupby((group.cumsum()), sort=False)["hi"].cummax().shift()
    start = group | (both["lo"] > reach + 1)
    runs = both.assign(run=start.cumsum()).groupby("run", sort=False)
    return (
        pd.DataFrame(
            {
                "xid": runs["xid"].first(),
                "table": runs["table"].first(),
                "lo": runs["lo"].min(),
                "hi": runs["hi"].max(),
            }
        )
        .reset_index(drop=True)
        .astype(STAGED)
    )


def sizes(staged: pd.DataFrame) -> pd.Series:
    """Distinct staged events per xid."""
    if staged.empty:
        return pd.Series(dtype="int64")
    return (staged["hi"] - staged["lo"] + 1).groupby(staged["xid"]).sum()


def complete(staged: pd.DataFrame, xid: int, counts: dict[str, int]) -> bool:
    """Whether ``xid``'s staged positions are exactly 1..n for every table of its END's ``counts``."""
    mine = staged.loc[staged["xid"] == xid]
    have = {t: (int(lo), int(hi)) for t, lo, hi in zip(mine["table"], mine["lo"], mine["hi"], strict=True)}
    if len(mine) != len(have) or set(have) != {t for t, n in counts.items() if n}:
        return False
    return all(have[t] == (1, n) for t, n in counts.items() if n)


def tables_beyond(staged: pd.DataFrame, xid: int, counts: dict[str, int]) -> list[str]:
    """Tables whose staged positions go past what ``xid``'s END counts (damage, or another writer)."""
    mine = staged.loc[staged["xid"] == xid]
    return sorted({str(t) for t, hi in zip(mine["table"], mine["hi"], strict=True) if hi > counts.get(t, 0)})
