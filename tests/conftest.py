"""Fixtures for the whole suite. Servers are real: PostgreSQL, Spark, Delta."""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest

import tests.support.profiles  # noqa: F401  (registers hypothesis profiles)

pytest_plugins = ["tests.support.pg", "tests.support.spark"]


def _sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into KeyboardInterrupt so fixture teardown stops servers.
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _sigterm)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow(seconds)`` first, longest first, dealt out to the start of each
    worker's share. xdist's worksteal gives each of N workers a contiguous share of the list
    (the first len // N items, then len // (N - 1) of the rest, ...) and later steals from
    the ends of queues; in collection order a long test could start last and hold one core
    while the other idled."""
    slow = [i for i in items if i.get_closest_marker("slow") is not None]
    if not slow:
        return
    slow.sort(key=lambda i: -float(i.get_closest_marker("slow").args[0]))  # type: ignore[union-attr]
    marked = {id(i) for i in slow}
    rest = [i for i in items if id(i) not in marked]
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    shares, left = [], len(items)
    for w in range(workers):
        shares.append(left // (workers - w))
        left -= shares[-1]
    dealt = [slow[w::workers] for w in range(workers)]
    if any(len(d) > share for d, share in zip(dealt, shares, strict=True)):
        items[:] = slow + rest  # mostly long tests selected: longest first is all there is to do
        return
    ordered: list[pytest.Item] = []
    for d, share in zip(dealt, shares, strict=True):
        fill = share - len(d)
        ordered += d + rest[:fill]
        rest = rest[fill:]
    assert sorted(map(id, ordered)) == sorted(map(id, items)), "reordering lost a test"
    items[:] = ordered
