"""The test command installs every CPU runtime, so their tests must never skip there.

Backend tests skip when a runtime is missing (for someone running pytest in a partial
environment); this test turns such a skip into a failure in the environment `make test` builds,
so a broken install cannot hide behind skips.

Covers: accelscope.backends.onnxruntime, accelscope.backends.openvino, accelscope.backends.compiled,
accelscope.backends.quantize.
"""

from __future__ import annotations

import importlib.util
import platform

import pytest

from accelscope.backends.compiled import cxx_compiler


@pytest.mark.parametrize(
    "module", ["onnxruntime", "onnx", "openvino", "nncf", "torchao", "transformers"]
)
def test_runtime_installed(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, (
        f"{module} is missing: run `make test` (it installs every extra through constraints.txt)"
    )


def test_inductor_has_a_compiler() -> None:
    assert cxx_compiler() is not None, "torch.compile tests need a C++ compiler (g++)"


def test_int8_path_is_testable_here() -> None:
    assert platform.machine().lower() in ("x86_64", "amd64"), "int8 PT2E tests need x86"
