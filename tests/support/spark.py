"""A local Spark session shared by the test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from txjoin.session import spark_session

    session = spark_session("txjoin-tests", cores=2, driver_memory="3g")
    try:
        yield session
    finally:
        session.stop()
