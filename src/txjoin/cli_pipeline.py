"""Pipeline commands of the CLI (run, verify, check, show, scenario): added by later stages."""

from __future__ import annotations

from typing import Any


def add_commands(sub: Any) -> None:
    """Register the pipeline subcommands on the ``txjoin`` parser."""
