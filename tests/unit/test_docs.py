"""The README names only commands, scenarios, settings (with their defaults)
and make targets that exist, and docker-compose.yml carries the settings
txjoin needs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from txjoin.cli import build_parser
from txjoin.scenario.definition import find_scenarios
from txjoin.spec import Options, SourceSpec

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _choices(p: argparse.ArgumentParser, dest: str) -> set[str]:
    for a in p._actions:
        if a.dest == dest and a.choices:
            return set(a.choices)
    return set()


def test_every_command_the_readme_names_exists() -> None:
    commands = _subparsers(build_parser())
    uses = re.findall(r"(?m)(?:^|`)txjoin ([a-z]+)(?: ([a-z|_]+))?", README)
    assert len(uses) >= 10
    for command, arg in uses:
        assert command in commands, f"README names 'txjoin {command}', which does not exist"
        sub = commands[command]
        if arg and "|" in arg:  # e.g. db start|status|stop
            words = set(arg.split("|"))
            known = _choices(sub, "action") | set(_subparsers(sub))
            assert words <= known, f"txjoin {command} {arg}: {words - known} do not exist"
        if command == "scenario" and arg and arg not in ("list", "run"):
            raise AssertionError(f"txjoin scenario {arg} does not exist")


def test_every_scenario_the_readme_names_exists() -> None:
    found = find_scenarios(ROOT / "scenarios")
    named = set(re.findall(r"txjoin scenario run ([a-z_]+)", README))
    before, _, rest = README.partition("<!-- allowlist:start -->")  # the allowlist's tables name constructs
    tables = before + rest.partition("<!-- allowlist:end -->")[2]
    named |= set(re.findall(r"(?m)^\| `([a-z_]+)` \|", tables)) - set(Options.__dataclass_fields__)
    assert {"pizzeria", "two_databases", "ledger"} <= named
    assert named <= set(found), f"README names scenarios that do not exist: {named - set(found)}"


def test_every_setting_the_readme_lists_exists_with_its_default() -> None:
    table = README.split("| setting | default |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"(?m)^\| `(\[sources\.X\] )?([a-z_]+)` \| ([^|]+) \|", table)
    assert len(rows) >= 9
    for source, name, default in rows:
        fields = (SourceSpec if source else Options).__dataclass_fields__
        assert name in fields, f"README lists setting {name!r}, which {'sources' if source else 'options'} lack"
        value = fields[name].default
        if isinstance(value, int) and value:  # 0 and "" mean derived: the README gives the rule
            assert default.strip() == str(value), f"README says {name} defaults to {default.strip()}"


def test_every_make_target_the_readme_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"(?m)^([a-z-]+):", makefile))
    named = set(re.findall(r"`?make ([a-z-]+)", README))
    assert {"demo", "test"} <= named
    assert named <= targets, f"README names make targets that do not exist: {named - targets}"


def test_docker_compose_configures_logical_replication_and_the_scenario_databases() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    pg = compose["services"]["postgres"]
    assert pg["image"].startswith("postgres:")
    args = pg["command"]
    settings = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-c")
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) >= 10
    assert int(settings["max_wal_senders"]) >= 10
    assert "5432:5432" in pg["ports"]
    mounts = [v.split(":") for v in pg["volumes"]]
    init = next(host for host, container, *_ in mounts if container == "/docker-entrypoint-initdb.d")
    sql = "".join(p.read_text() for p in sorted((ROOT / init).glob("*.sql")))
    # The names scenario two_databases creates its sources under.
    for source in ("accounts", "prefs"):
        assert f"CREATE DATABASE txjoin_two_databases_{source};" in sql
    scenario = (ROOT / "scenarios" / "two_databases" / "scenario.toml").read_text()
    assert "[sources.accounts]" in scenario
    assert "[sources.prefs]" in scenario


def test_readme_lists_exactly_what_the_allowlist_accepts() -> None:
    from txjoin.join.plan.allowlist import in_readme

    text = (ROOT / "README.md").read_text()
    assert text == in_readme(text), (
        "README's allowlist tables are stale: "
        ".venv/bin/python -W ignore -m txjoin.join.plan.allowlist --readme README.md"
    )
