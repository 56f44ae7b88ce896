"""The package layout follows the flow (docs/design.md, "Where things live").

- imports run downstream along the flow: a module imports only from its own
  package and from layers before its own (capture -> changelog -> decode ->
  assemble -> join -> sink -> verify, with the shared formats below them and
  the wiring, check, scenario and the command line on top);
- no import cycles between modules (function-level imports count too);
- no module over 700 lines; pipeline.py, which only wires, under 250;
- the design document's map names every module and package, and nothing else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"

#: Lowest first. A unit may import units of earlier layers, and its own package.
LAYERS: list[list[str]] = [
    ["txjoin.errors", "txjoin.faults"],
    ["txjoin"],  # the package's own __init__: the version and the base error
    ["txjoin.pg"],
    ["txjoin.debezium"],
    ["txjoin.cut"],
    ["txjoin.capture"],
    ["txjoin.spec", "txjoin.session"],
    ["txjoin.changelog"],
    ["txjoin.decode"],
    ["txjoin.assemble"],
    ["txjoin.join"],
    ["txjoin.sink"],
    ["txjoin.verify"],
    ["txjoin.pipeline", "txjoin.runner"],
    ["txjoin.check", "txjoin.scenario"],
    ["txjoin.cli"],
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "txjoin").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _unit(module: str) -> str:
    """The layer unit a module belongs to: the longest unit name that prefixes it."""
    units = [u for layer in LAYERS for u in layer if module == u or module.startswith(u + ".")]
    assert units, f"{module} belongs to no layer: add it to LAYERS and to docs/design.md"
    return max(units, key=len)


LAYER_OF = {u: i for i, layer in enumerate(LAYERS) for u in layer}


def _imports(module: str) -> set[str]:
    """txjoin modules ``module`` imports, anywhere in its body."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: the package, minus a part per extra dot
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], base]).rstrip(".")
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: _imports(m) for m in MODULES}


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        _unit(m)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_downstream(module: str) -> None:
    unit = _unit(module)
    for imported in sorted(GRAPH[module]):
        other = _unit(imported)
        if other == unit:
            continue
        assert LAYER_OF[other] < LAYER_OF[unit], (
            f"{module} imports {imported}: {other} is not upstream of {unit} (see LAYERS)"
        )


def test_no_import_cycles() -> None:
    # Tarjan's strongly connected components over the module graph.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in sorted(MODULES):
        if m not in index:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    limit = 250 if module == "txjoin.pipeline" else 700
    assert lines <= limit, f"{MODULES[module]} has {lines} lines (at most {limit})"


def _design_map() -> set[str]:
    text = DESIGN.read_text()
    assert "## Where things live" in text
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `(txjoin[^`]*)`", section, flags=re.M))


def test_design_map_matches_the_tree() -> None:
    listed = _design_map()
    tree = {str(p.relative_to(SRC)) for p in (SRC / "txjoin").rglob("*.py") if p.name != "__init__.py"}
    tree |= {str(p.parent.relative_to(SRC)) + "/" for p in (SRC / "txjoin").rglob("__init__.py")}
    assert sorted(tree - listed) == [], "modules missing from docs/design.md's map"
    assert sorted(listed - tree) == [], "docs/design.md's map names modules that do not exist"
