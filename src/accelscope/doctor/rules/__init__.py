"""The verdict's rules, one per module: a module that defines ``RULE`` (an object with a
``name`` and ``check(ctx) -> Finding``) is a rule. Adding a rule is adding a file here."""

from __future__ import annotations

import importlib
import pkgutil

from accelscope.doctor.findings import Rule

__all__ = ["all_rules"]


def all_rules() -> tuple[Rule, ...]:
    """Every rule in this package, ordered by module name."""
    found: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rule = getattr(module, "RULE", None)
        if rule is not None:
            found.append(rule)
    return tuple(found)
