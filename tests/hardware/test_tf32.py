"""TF32 flags read, set and set back (host-side state: a CPU build of torch has them too), the
new-API-only fallback through a fake torch, and the numerics every environment records."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.tf32 import (
    BENCHMARK_KEY,
    CONV_KEY,
    MATMUL_KEY,
    Fp32Math,
    apply_tf32,
    numerics,
    read_fp32_math,
    restore_fp32_math,
    tf32_mode,
)
from accelscope.serialise import dump, load
from accelscope.testing import fixed_environment

TORCH_DEFAULT = Fp32Math(matmul="ieee", conv="tf32")
"""torch's own defaults: IEEE cuBLAS products, TF32 cuDNN convolutions."""


@pytest.fixture(autouse=True)
def torch_defaults() -> Iterator[None]:
    """Each test starts from torch's defaults and leaves them behind."""
    restore_fp32_math(TORCH_DEFAULT)
    yield
    restore_fp32_math(TORCH_DEFAULT)


def test_torch_defaults_read_as_they_are() -> None:
    assert read_fp32_math() == TORCH_DEFAULT and TORCH_DEFAULT.tf32 is None


@pytest.mark.parametrize("enabled", [False, True])
def test_apply_sets_both_libraries(enabled: bool) -> None:
    apply_tf32(enabled)
    math = read_fp32_math()
    assert math.tf32 is enabled
    expected = "tf32" if enabled else "ieee"
    assert math == Fp32Math(matmul=expected, conv=expected)


def test_mode_sets_back_what_was_there() -> None:
    with tf32_mode(False):
        assert read_fp32_math() == Fp32Math(matmul="ieee", conv="ieee")
        with tf32_mode(True):
            assert read_fp32_math().tf32 is True
        assert read_fp32_math() == Fp32Math(matmul="ieee", conv="ieee")
    assert read_fp32_math() == TORCH_DEFAULT


def test_mode_sets_back_after_an_error() -> None:
    with pytest.raises(RuntimeError), tf32_mode(True):
        raise RuntimeError("the measured kernel failed")
    assert read_fp32_math() == TORCH_DEFAULT


def test_numerics_name_the_state() -> None:
    apply_tf32(False)
    assert dict(numerics()) == {MATMUL_KEY: "ieee", CONV_KEY: "ieee", BENCHMARK_KEY: "off"}
    assert [key for key, _ in numerics()] == sorted([MATMUL_KEY, CONV_KEY, BENCHMARK_KEY])


class NewApiOnly:
    """A torch with only the ``fp32_precision`` API (no legacy ``allow_tf32`` functions)."""

    def __init__(self) -> None:
        self.values = {("generic", "all"): "none", ("cuda", "all"): "none"}
        self.values.update({("cuda", "matmul"): "none", ("cuda", "conv"): "tf32"})
        self.values[("cuda", "rnn")] = "tf32"
        self._C = types.SimpleNamespace(
            _get_fp32_precision_getter=lambda backend, op: self.values[(backend, op)],
            _set_fp32_precision_setter=self._set,
        )
        self.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(benchmark=True))

    def _set(self, backend: str, op: str, value: str) -> None:
        self.values[(backend, op)] = value


def test_a_torch_with_only_the_new_api() -> None:
    torch: Any = NewApiOnly()
    assert read_fp32_math(torch) == TORCH_DEFAULT  # matmul "none" resolves to IEEE
    with tf32_mode(False, torch):
        assert read_fp32_math(torch) == Fp32Math(matmul="ieee", conv="ieee")
        assert torch.values[("cuda", "rnn")] == "ieee"  # legacy readers see one cuDNN state
    assert read_fp32_math(torch) == TORCH_DEFAULT
    torch.values[("cuda", "all")] = "tf32"
    torch.values[("cuda", "matmul")] = "none"
    assert read_fp32_math(torch).matmul == "tf32"  # inherited from the parent setting
    assert dict(numerics(torch))[BENCHMARK_KEY] == "on"


def test_unreadable_flags_are_unknown_with_the_reason_and_left_alone() -> None:
    broken: Any = types.SimpleNamespace(_C=types.SimpleNamespace())
    math = read_fp32_math(broken)
    assert math.matmul.startswith("unknown: ") and math.tf32 is None
    restore_fp32_math(math, broken)  # nothing to set back: no error
    found = dict(numerics(broken))
    assert found[MATMUL_KEY].startswith("unknown: ") and found[BENCHMARK_KEY].startswith("unknown")


def test_environment_records_numerics_and_older_ones_load() -> None:
    env = replace(fixed_environment(), numerics=((CONV_KEY, "ieee"), (MATMUL_KEY, "ieee")))
    assert load(Environment, json.loads(json.dumps(dump(env)))) == env
    old = dump(env)
    del old["numerics"]
    assert load(Environment, old).numerics == ()  # stored before: not known
    apply_tf32(True)
    measured = fixed_environment().with_numerics()
    assert dict(measured.numerics)[CONV_KEY] == "tf32"
    assert measured.fingerprint() == fixed_environment().fingerprint()  # not hardware identity
