"""A cut: how far into each source an output version (or the replicas) reach.

Every version of an output equals its SQL on the sources at one cut: per
source, the commit of the last transaction it includes. The cut travels as
JSON in the Delta commit metadata (``txjoin.cut``) and in the replica store,
``{"<source>": {"lsn": ..., "xid": ..., "transactions": ..., "commit_ts_ms": ...}}``,
and is read back with :func:`cuts_from_json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Cut", "cuts_from_json", "cuts_to_json", "same_position"]


@dataclass(frozen=True)
class Cut:
    """One source's position: its last transaction included."""

    #: Commit (end) LSN of the last transaction included: the order of cuts.
    lsn: int
    #: Its transaction id (32-bit; 0 when unknown).
    xid: int = 0
    #: How many of the source's transactions are included (the snapshot is the first).
    transactions: int | None = None
    #: Its commit time, ms since the epoch.
    commit_ts_ms: int | None = None

    def to_json(self) -> dict[str, int]:
        out = {"lsn": self.lsn, "xid": self.xid}
        if self.transactions is not None:
            out["transactions"] = self.transactions
        if self.commit_ts_ms is not None:
            out["commit_ts_ms"] = self.commit_ts_ms
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Cut:
        def opt(k: str) -> int | None:
            v = value.get(k)
            return None if v is None else int(v)

        return cls(int(value["lsn"]), int(value.get("xid", 0)), opt("transactions"), opt("commit_ts_ms"))


def cuts_to_json(cuts: Mapping[str, Cut]) -> dict[str, dict[str, int]]:
    return {source: cut.to_json() for source, cut in cuts.items()}


def cuts_from_json(value: Mapping[str, Any] | None) -> dict[str, Cut]:
    return {str(source): Cut.from_json(c) for source, c in (value or {}).items()}


def same_position(a: Mapping[str, Cut], b: Mapping[str, Cut]) -> bool:
    """Whether two cuts name the same commit of every source."""
    return {s: c.lsn for s, c in a.items()} == {s: c.lsn for s, c in b.items()}
