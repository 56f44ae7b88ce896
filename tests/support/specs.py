"""Pipeline spec files for tests that run ``txjoin`` as a user does (one source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_spec(
    path: Path,
    *,
    name: str,
    state_dir: Path,
    source: str,
    dsn: str,
    tables: list[str],
    outputs: dict[str, tuple[list[str], str]],
    options: dict[str, Any] | None = None,
) -> Path:
    """Write a TOML spec to ``path``: ``outputs`` maps a name to (key columns, SQL)."""

    def toml(v: Any) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(toml(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    lines = [f"name = {toml(name)}", f"state_dir = {toml(str(state_dir))}", f"[sources.{source}]"]
    lines += [f"dsn = {toml(dsn)}", f"tables = {toml(tables)}"]
    if options:
        lines += ["[options]", *(f"{k} = {toml(v)}" for k, v in options.items())]
    for out, (key, sql) in outputs.items():
        lines += [f"[outputs.{out}]", f"key = {toml(key)}", f'sql = """{sql}"""']
    path.write_text("\n".join(lines) + "\n")
    return path
