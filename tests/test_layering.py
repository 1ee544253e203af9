"""The layering rule of ARCHITECTURE.md: imports point downwards only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "accelscope"

# Lower number = lower layer. A module may import its own package and lower layers only.
LAYERS: dict[str, int] = {
    "errors": 0,
    "spec": 1,
    "units": 1,
    "hardware": 2,
    "models": 3,
    "backends": 4,
    "measure": 5,
    "accuracy": 5,
    "result": 6,
    "engine": 7,
    "sweep": 8,
    "doctor": 8,
    "roofline": 8,
    "load": 8,
    "plan": 8,
    "audit": 8,
    "store": 9,
    "report": 10,
    "config": 11,
    "api": 11,
    "bench": 11,
    "testing": 11,
    "workflows": 11,
    "cli": 12,
}


def _unit(module_path: Path) -> str:
    relative = module_path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def _imported_units(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "accelscope" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_unit_has_a_layer() -> None:
    units = {_unit(path) for path in PACKAGE.rglob("*.py")} - {"__init__"}
    missing = units - set(LAYERS)
    assert not missing, f"add these to LAYERS (and ARCHITECTURE.md): {sorted(missing)}"


def test_imports_point_downwards() -> None:
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        if unit == "__init__":
            continue  # the package root re-exports the public API
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in _imported_units(tree):
            if target != unit and LAYERS[target] >= LAYERS[unit]:
                violations.append(f"{path.relative_to(PACKAGE)} imports accelscope.{target}")
    assert not violations, "upward or sideways imports:\n" + "\n".join(violations)


def test_checker_catches_an_upward_import() -> None:
    tree = ast.parse("from accelscope.cli import main\nimport accelscope.store.sqlite\n")
    assert _imported_units(tree) == {"cli", "store"}
