"""``load_model`` on user models: factories, ONNX, torch.export programs, weights, pickles."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelscope.errors import ModelLoadError, UnsafeModelError
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.loading import load_model
from accelscope.models.safe_load import no_unpickling
from accelscope.spec import TensorSpec
from accelscope.testing import tiny_onnx_bytes

X16 = (TensorSpec(name="x", shape=("N", 16), dtype="float32"),)

FACTORY = """\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Linear(16, 4)


def make_other():
    torch.manual_seed(1)
    return torch.nn.Linear(16, 4)
"""


def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def module_of(loaded: LoadedModel) -> nn.Module:
    assert loaded.module is not None
    return loaded.module


def write_factory(tmp: Path, text: str = FACTORY, name: str = "m.py") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def reference_linear(seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(16, 4).eval()


def onnx_model(tmp: Path, batch: int | str = "batch", name: str = "m.onnx", seed: int = 0) -> Path:
    """y = x @ W + b, W (16, 4) an initializer; ``batch`` is symbolic (str) or fixed (int)."""
    path = tmp / name
    path.write_bytes(tiny_onnx_bytes(batch, seed))
    return path


class _Payload:
    """Unpickling this creates a directory at ``marker``: proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return (os.mkdir, (self.marker,))


# --------------------------------------------------------------------------------------------
# factories


def test_factory_from_a_file_path(tmp_path: Path) -> None:
    path = write_factory(tmp_path)
    loaded = load_model(f"{path}:make", inputs=X16)
    assert loaded.format is ModelFormat.TORCH
    assert loaded.ref == f"{path}:make"
    assert loaded.inputs == X16
    assert isinstance(loaded.module, nn.Linear)
    assert not loaded.module.training, "factory models are put in eval mode"
    assert loaded.onnx_path is None
    assert len(loaded.digest) == 16 and int(loaded.digest, 16) >= 0
    x = torch.randn(3, 16)
    torch.testing.assert_close(loaded.module(x), reference_linear(0)(x))


def test_factory_needs_inputs(tmp_path: Path) -> None:
    path = write_factory(tmp_path)
    with pytest.raises(ModelLoadError, match="--input"):
        load_model(f"{path}:make")


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh importable package ``<name>`` with ``<name>.zoo:make`` on sys.path."""
    name = f"userpkg_{uuid.uuid4().hex[:10]}"
    package = tmp_path / "site" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "zoo.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_factory_from_a_module_path(user_package: str, tmp_path: Path) -> None:
    loaded = load_model(f"{user_package}.zoo:make", inputs=X16)
    assert loaded.format is ModelFormat.TORCH
    assert isinstance(loaded.module, nn.Linear)
    assert not loaded.module.training
    x = torch.randn(2, 16)
    torch.testing.assert_close(loaded.module(x), reference_linear(0)(x))
    source = (tmp_path / "site" / user_package / "zoo.py").read_bytes()
    assert loaded.digest == hashlib.sha256(source + b":make").hexdigest()[:16]
    other = load_model(f"{user_package}.zoo:make_other", inputs=X16)
    assert other.digest != loaded.digest, "the function name is part of the digest"
    torch.testing.assert_close(module_of(other)(x), reference_linear(1)(x))


def test_module_path_with_a_missing_function(user_package: str) -> None:
    with pytest.raises(ModelLoadError, match="no callable named 'absent'"):
        load_model(f"{user_package}.zoo:absent", inputs=X16)


def test_module_path_with_a_missing_module() -> None:
    with pytest.raises(ModelLoadError, match="cannot import module 'no_such_module_9c1e'"):
        load_model("no_such_module_9c1e:make", inputs=X16)


# --------------------------------------------------------------------------------------------
# ONNX


def test_onnx_dynamic_batch_is_inferred_as_n(tmp_path: Path) -> None:
    path = onnx_model(tmp_path, batch="batch")
    loaded = load_model(str(path))
    assert loaded.format is ModelFormat.ONNX
    assert loaded.inputs == (TensorSpec(name="x", shape=("N", 16), dtype="float32"),)
    assert loaded.onnx_path == path
    assert loaded.module is None
    assert loaded.digest == sha16(path)


def test_onnx_fixed_batch_keeps_its_shape(tmp_path: Path) -> None:
    path = onnx_model(tmp_path, batch=2)
    loaded = load_model(str(path))
    assert loaded.inputs == (TensorSpec(name="x", shape=(2, 16), dtype="float32"),)
    assert loaded.inputs[0].concrete_shape(64) == (2, 16), "no batch dimension to replace"


def test_onnx_given_inputs_override_the_declared_ones(tmp_path: Path) -> None:
    path = onnx_model(tmp_path)
    given = (TensorSpec(name="x", shape=(5, 16), dtype="float32"),)
    assert load_model(str(path), inputs=given).inputs == given
    with pytest.raises(ModelLoadError, match="--input names do not match"):
        load_model(str(path), inputs=(TensorSpec(name="pixels", shape=("N", 16)),))


# --------------------------------------------------------------------------------------------
# torch.export programs


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))  # type: ignore[no-any-return]


def test_exported_program_with_dynamic_batch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Mlp().eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (torch.randn(4, 16),), dynamic_shapes={"x": {0: batch}})
    path = tmp_path / "mlp.pt2"
    torch.export.save(program, str(path))

    loaded = load_model(str(path))
    assert loaded.format is ModelFormat.EXPORTED
    assert loaded.inputs == (TensorSpec(name="x", shape=("N", 16), dtype="float32"),)
    assert loaded.digest == sha16(path)
    assert loaded.module is not None
    for rows in (3, 7):  # neither is the example batch: the batch really is dynamic
        x = torch.randn(rows, 16)
        with torch.no_grad():
            torch.testing.assert_close(loaded.module(x), model(x))


# --------------------------------------------------------------------------------------------
# no_unpickling


def test_no_unpickling_forces_weights_only_and_restores_torch_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []

    def recording_load(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "loaded"

    monkeypatch.setattr(torch, "load", recording_load)
    import torch.export.pt2_archive._package as package

    namespace = vars(package)
    pickle_before = namespace["pickle"]
    script_load_before = torch._C._pickle_load_obj
    with no_unpickling():
        assert torch.load is not recording_load
        assert torch.load("model.pt", weights_only=False) == "loaded"
        assert torch.load("model.pt") == "loaded"
        assert namespace["pickle"] is not pickle_before
        with pytest.raises(UnsafeModelError):
            namespace["pickle"].loads(b"anything")
        with pytest.raises(UnsafeModelError):
            torch._C._pickle_load_obj(b"anything")
    assert [c["weights_only"] for c in calls] == [True, True]
    assert torch.load is recording_load
    assert namespace["pickle"] is pickle_before
    assert torch._C._pickle_load_obj is script_load_before


def test_no_unpickling_restores_torch_load_after_an_error() -> None:
    original = torch.load
    with pytest.raises(RuntimeError, match="inside"), no_unpickling():
        assert torch.load is not original
        raise RuntimeError("inside")
    assert torch.load is original


def test_no_unpickling_refuses_a_malicious_pickle(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save(_Payload(marker), path)
    with pytest.raises(UnsafeModelError, match="--trust-model-code"), no_unpickling():
        torch.load(path, weights_only=False)
    assert not marker.exists(), "the payload ran inside no_unpickling()"


# --------------------------------------------------------------------------------------------
# pickled models and --trust-model-code


def test_pickled_module_needs_trust(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt"
    torch.save(reference_linear(0), path)
    with pytest.raises(UnsafeModelError, match="--trust-model-code"):
        load_model(str(path), inputs=X16)
    loaded = load_model(str(path), inputs=X16, trust_model_code=True)
    assert isinstance(loaded.module, nn.Linear)
    assert loaded.digest == sha16(path)
    x = torch.randn(2, 16)
    torch.testing.assert_close(loaded.module(x), reference_linear(0)(x))


def test_malicious_pickle_runs_only_with_trust(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save(_Payload(marker), path)
    with pytest.raises(UnsafeModelError):
        load_model(str(path), inputs=X16)
    assert not marker.exists()
    with pytest.raises(ModelLoadError, match=re.escape("expected a torch.nn.Module")):
        load_model(str(path), inputs=X16, trust_model_code=True)
    assert marker.is_dir(), "with trust_model_code the file was really unpickled"


def test_state_dict_as_a_model_points_to_weights(tmp_path: Path) -> None:
    path = tmp_path / "sd.pt"
    torch.save(reference_linear(0).state_dict(), path)
    with pytest.raises(ModelLoadError, match="--weights"):
        load_model(str(path), inputs=X16)


# --------------------------------------------------------------------------------------------
# --weights


def known_weights() -> dict[str, torch.Tensor]:
    return {"weight": torch.full((4, 16), 0.5), "bias": torch.arange(4, dtype=torch.float32)}


def expected_output(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1, keepdim=True) * 0.5 + torch.arange(4, dtype=torch.float32)


def _safetensors(path: Path) -> None:
    from safetensors.torch import save_file

    save_file(known_weights(), str(path))


def _torch_state_dict(path: Path) -> None:
    torch.save(known_weights(), path)


def _wrapped_state_dict(path: Path) -> None:
    torch.save({"state_dict": known_weights(), "epoch": 7}, path)


def _model_state_dict_key(path: Path) -> None:
    torch.save({"model_state_dict": known_weights(), "optimizer": {"lr": 0.1}}, path)


@pytest.mark.parametrize(
    ("writer", "filename"),
    [
        pytest.param(_safetensors, "w.safetensors", id="safetensors"),
        pytest.param(_torch_state_dict, "w.pt", id="torch-save"),
        pytest.param(_wrapped_state_dict, "w.pth", id="wrapped-state_dict"),
        pytest.param(_model_state_dict_key, "w.ckpt", id="wrapped-model_state_dict"),
    ],
)
def test_weights_are_loaded_into_a_factory_model(
    writer: Callable[[Path], None], filename: str, tmp_path: Path
) -> None:
    factory = write_factory(tmp_path)
    weights = tmp_path / filename
    writer(weights)
    plain = load_model(f"{factory}:make", inputs=X16)
    loaded = load_model(f"{factory}:make", inputs=X16, weights=weights)
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(module_of(loaded)(x), expected_output(x))
        assert not torch.allclose(module_of(plain)(x), module_of(loaded)(x)), "no change"
    assert loaded.digest == f"{plain.digest}+{sha16(weights)}"


def test_weights_that_do_not_fit(tmp_path: Path) -> None:
    factory = write_factory(tmp_path)
    weights = tmp_path / "wrong.pt"
    torch.save({"weight": torch.zeros(4, 3), "bias": torch.zeros(4)}, weights)
    with pytest.raises(ModelLoadError, match=re.escape("wrong.pt do not fit the model")):
        load_model(f"{factory}:make", inputs=X16, weights=weights)


def test_weights_with_missing_keys_do_not_fit(tmp_path: Path) -> None:
    factory = write_factory(tmp_path)
    weights = tmp_path / "partial.pt"
    torch.save({"weight": torch.zeros(4, 16)}, weights)
    with pytest.raises(ModelLoadError, match="do not fit"):
        load_model(f"{factory}:make", inputs=X16, weights=weights)


def test_weights_are_refused_for_onnx(tmp_path: Path) -> None:
    weights = tmp_path / "w.pt"
    torch.save(known_weights(), weights)
    with pytest.raises(ModelLoadError, match="--weights applies to PyTorch models"):
        load_model(str(onnx_model(tmp_path)), weights=weights)


# --------------------------------------------------------------------------------------------
# digests pin the content


def test_factory_digest_follows_the_file_content(tmp_path: Path) -> None:
    path = write_factory(tmp_path)
    first = load_model(f"{path}:make", inputs=X16).digest
    assert load_model(f"{path}:make", inputs=X16).digest == first, "same content, same digest"
    path.write_text(FACTORY.replace("manual_seed(0)", "manual_seed(3)"))
    changed = load_model(f"{path}:make", inputs=X16)
    assert changed.digest != first
    x = torch.randn(2, 16)
    torch.testing.assert_close(module_of(changed)(x), reference_linear(3)(x))


def test_factory_digest_does_not_depend_on_the_location(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write_factory(tmp_path / "a")
    two = write_factory(tmp_path / "b")
    assert load_model(f"{one}:make", inputs=X16).digest == (
        load_model(f"{two}:make", inputs=X16).digest
    )


def test_onnx_digest_follows_the_file_content(tmp_path: Path) -> None:
    path = onnx_model(tmp_path, seed=0)
    first = load_model(str(path)).digest
    assert load_model(str(path)).digest == first
    onnx_model(tmp_path, seed=1)  # same path, different weights
    second = load_model(str(path)).digest
    assert second != first
    assert second == sha16(path)
