"""Reading a Debezium record's value: plain, or wrapped by Kafka Connect's
JsonConverter (``schemas.enable=true``) as ``{"schema": ..., "payload": ...}``."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_record"]


def parse_record(value: str | bytes) -> dict[str, Any]:
    """A Debezium record's payload, plain or wrapped as {schema, payload}."""
    v = json.loads(value)
    if isinstance(v, dict) and "payload" in v and "schema" in v:
        p = v["payload"]
        return dict(p) if isinstance(p, dict) else {}
    return dict(v)
