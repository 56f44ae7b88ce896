"""Fixtures for the whole suite. Servers are real: PostgreSQL, Spark, Delta."""

from __future__ import annotations

import signal
from types import FrameType

import pytest

import tests.support.profiles  # noqa: F401  (registers hypothesis profiles)

pytest_plugins = ["tests.support.pg", "tests.support.spark"]


def _sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into KeyboardInterrupt so fixture teardown stops servers.
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _sigterm)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (minutes each) run first. pytest-xdist's worksteal hands each worker
    a contiguous half of this order and an idle worker steals the tail of the other's queue, so a
    long test that starts late decides when the suite ends: one such test started 680 s into a
    1,150 s run and ran 285 s."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
