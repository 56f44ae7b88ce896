"""Scenario folders: ``scenarios/<name>/``.

Each holds:

- ``scenario.toml``: a description, per source its schema file (DDL and seed
  data), the workload's defaults (clients, transactions) and, optionally,
  an invariants module;
- ``pipeline.toml``: the pipeline spec, as users write theirs, with each
  source's DSN taken from an environment variable the runner sets;
- ``workload.py``: ``transactions(client, rng) -> list[Tx]``;
- optionally ``invariants.py``: ``check(output, rows) -> str | None``, run on
  every Delta version (and on the naive baseline's).

Scenarios are found in ``--scenarios DIR``, ``$TXJOIN_SCENARIOS``,
``./scenarios`` or the ``scenarios/`` folder of txjoin's own checkout.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from txjoin.errors import ConfigError

__all__ = ["Scenario", "find_scenarios", "load_scenario"]


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    description: str
    #: source name -> schema file (DDL + seed data)
    schemas: dict[str, Path]
    clients: int
    txs: int
    #: Transactions per second over all clients.
    rate: float
    workload: Callable[..., Any]
    invariants: Callable[[str, list[dict[str, Any]]], str | None] | None
    #: ``metric(output, rows) -> float | None`` from the invariants module: what ``--plot`` draws
    #: per version (the ledger's total); without it the plot shows consistent or torn.
    metric: Callable[[str, list[dict[str, Any]]], float | None] | None = None

    @property
    def spec_path(self) -> Path:
        return self.path / "pipeline.toml"

    def dsn_env(self) -> dict[str, str]:
        """Source name -> the environment variable its pipeline.toml reads the DSN from."""
        raw = tomllib.loads(self.spec_path.read_text())
        out = {}
        for name, s in raw.get("sources", {}).items():
            if "dsn_env" not in s:
                raise ConfigError(f"{self.spec_path}: [sources.{name}] must use dsn_env in a scenario")
            out[name] = str(s["dsn_env"])
        return out


def search_path(extra: str | os.PathLike[str] | None = None) -> list[Path]:
    dirs = []
    if extra:
        dirs.append(Path(extra))
    if os.environ.get("TXJOIN_SCENARIOS"):
        dirs.append(Path(os.environ["TXJOIN_SCENARIOS"]))
    dirs.append(Path.cwd() / "scenarios")
    dirs.append(Path(__file__).resolve().parents[3] / "scenarios")  # a checkout: src/txjoin/scenario/
    seen, out = set(), []
    for d in dirs:
        r = d.resolve()
        if r not in seen and r.is_dir():
            seen.add(r)
            out.append(r)
    return out


def find_scenarios(extra: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Scenario name -> folder, first found wins."""
    out: dict[str, Path] = {}
    for d in search_path(extra):
        for sub in sorted(d.iterdir()):
            if (sub / "scenario.toml").is_file() and sub.name not in out:
                out[sub.name] = sub
    return out


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"txjoin_scenario_{name}_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_scenario(name: str, extra: str | os.PathLike[str] | None = None) -> Scenario:
    found = find_scenarios(extra)
    path = found.get(name)
    if path is None:
        where = ", ".join(str(d) for d in search_path(extra)) or "nowhere"
        raise ConfigError(
            f"no scenario {name!r}: known scenarios are {sorted(found) or 'none'} (searched {where}); "
            "run 'txjoin scenario list'"
        )
    raw = tomllib.loads((path / "scenario.toml").read_text())
    schemas = {}
    for source, s in raw.get("sources", {}).items():
        f = path / str(s.get("schema", ""))
        if not f.is_file():
            raise ConfigError(f"{path / 'scenario.toml'}: [sources.{source}] schema file {f} does not exist")
        schemas[source] = f
    wl = raw.get("workload", {})
    mod = _module(path / "workload.py", name)
    if not hasattr(mod, "transactions"):
        raise ConfigError(f"{path / 'workload.py'} must define transactions(client, rng)")
    inv = metric = None
    if "invariants" in raw:
        inv_mod = _module(path / str(raw["invariants"].get("module", "invariants.py")), name)
        inv = inv_mod.check
        metric = getattr(inv_mod, "metric", None)
    return Scenario(
        name=name,
        path=path,
        description=str(raw.get("description", "")),
        schemas=schemas,
        clients=int(wl.get("clients", 4)),
        txs=int(wl.get("txs", 300)),
        rate=float(wl.get("rate", 25)),
        workload=mod.transactions,
        invariants=inv,
        metric=metric,
    )
