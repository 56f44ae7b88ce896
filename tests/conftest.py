"""Fixtures for the whole suite. Servers are real: PostgreSQL, Spark, Delta."""

from __future__ import annotations

import signal
from types import FrameType

import tests.support.profiles  # noqa: F401  (registers hypothesis profiles)

pytest_plugins = ["tests.support.pg", "tests.support.spark"]


def _sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into KeyboardInterrupt so fixture teardown stops servers.
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _sigterm)
