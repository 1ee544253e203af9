"""The layering rules of ARCHITECTURE.md: imports point downwards only, and no command package
imports another one.

Covers: accelscope."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "accelscope"

# Lower number = lower layer. A module may import its own package and lower layers only.
LAYERS: dict[str, int] = {
    "errors": 0,
    "aten": 1,  # the aten operator vocabulary: names only, read by roofline and plan
    "spec": 1,
    "units": 1,
    "validation": 1,
    "serialise": 1,
    "files": 1,
    "processes": 1,
    "hardware": 2,
    "models": 3,
    "backends": 4,
    "measurement": 5,
    "accuracy": 5,
    "result": 6,
    "documents": 6,
    "engine": 7,
    "sweep": 8,
    "doctor": 8,
    "roofline": 8,
    "load": 8,
    "plan": 8,
    "store": 9,
    "audit": 9,  # above plan: prices GPU-hours from plan's catalog
    "llm": 9,  # above load (schedules, early stopping), plan (KV bytes, catalog), roofline
    "report": 10,
    "tune": 10,  # above llm: measures each server configuration with llm's harness
    "compare": 11,  # above llm and tune: reads their typed documents
    "commands": 12,
    "testing": 12,
    "cli": 13,
}


def _unit(module_path: Path) -> str:
    """The layer unit of a module; a command package is its own unit (``commands.bench``)."""
    parts = module_path.relative_to(PACKAGE).parts
    if parts[0] == "commands" and len(parts) > 2:
        return f"commands.{parts[1]}"
    return parts[0].removesuffix(".py")


def _layer(unit: str) -> int:
    return LAYERS[unit.split(".")[0]]


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
                if parts[1] == "commands" and len(parts) > 2 and parts[2] != "_lifecycle":
                    found.add(f"commands.{parts[2]}")
                else:
                    found.add(parts[1])
    return found


def _violations() -> list[str]:
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        if unit == "__init__":
            continue  # the package root re-exports the public API
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in _imported_units(tree):
            if target == unit:
                continue
            same_layer_package = target == "commands" and unit.startswith("commands.")
            if same_layer_package:
                continue  # commands._lifecycle, the plumbing every command shares
            if _layer(target) >= _layer(unit):
                violations.append(f"{path.relative_to(PACKAGE)} imports accelscope.{target}")
    return violations


def test_every_unit_has_a_layer() -> None:
    units = {_unit(path).split(".")[0] for path in PACKAGE.rglob("*.py")} - {"__init__"}
    missing = units - set(LAYERS)
    assert not missing, f"add these to LAYERS (and ARCHITECTURE.md): {sorted(missing)}"


def test_imports_point_downwards_and_commands_are_independent() -> None:
    violations = _violations()
    assert not violations, "upward or sideways imports:\n" + "\n".join(violations)


def test_checker_catches_an_upward_import() -> None:
    tree = ast.parse("from accelscope.cli import main\nimport accelscope.store.sqlite\n")
    assert _imported_units(tree) == {"cli", "store"}


def test_checker_catches_one_command_importing_another() -> None:
    tree = ast.parse(
        "from accelscope.commands.bench.workflow import bench\n"
        "from accelscope.commands._lifecycle import CommandRun\n"
    )
    assert _imported_units(tree) == {"commands.bench", "commands"}
    assert _layer("commands.bench") == _layer("commands.load")  # same layer: sideways is refused
