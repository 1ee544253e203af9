"""The package root re-exports the public API without hiding its own subpackages.

Covers: accelscope."""

from __future__ import annotations

import importlib
import pkgutil
import types

import accelscope


def test_no_public_name_shadows_a_subpackage_or_module() -> None:
    modules = {info.name for info in pkgutil.iter_modules(accelscope.__path__)}
    clashes = sorted(set(accelscope.__all__) & modules)
    assert not clashes, f"accelscope.{clashes} names both a public object and a module"
    for name in modules:
        importlib.import_module(f"accelscope.{name}")
        attribute = getattr(accelscope, name)
        assert isinstance(attribute, types.ModuleType), f"accelscope.{name} is {attribute!r}"


def test_the_measure_function_and_the_measurement_package_both_resolve() -> None:
    assert callable(accelscope.measure)
    assert accelscope.measurement.Timer is accelscope.Timer
