"""The built-in model zoo: architectures, determinism, trained digits model, lookup."""

from __future__ import annotations

import sys

import pytest
import torch

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.models.base import Task
from accelscope.models.zoo import DEFAULT_MODEL, ZOO, zoo_entry, zoo_names
from accelscope.models.zoo.mobilenet import mobilenet_v2
from accelscope.models.zoo.resnet import resnet50


def _num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_resnet50_parameter_count_and_torchvision_keys() -> None:
    model = resnet50()
    assert _num_params(model) == 25_557_032
    keys = set(model.state_dict())
    # torchvision's resnet50 state dict: 53 conv + 53 batch-norm (5 entries each) + fc (2).
    assert len(keys) == 320
    for key in (
        "conv1.weight",
        "bn1.running_mean",
        "layer1.0.conv1.weight",
        "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.num_batches_tracked",
        "layer3.5.conv2.weight",
        "layer4.2.bn3.running_var",
        "fc.weight",
        "fc.bias",
    ):
        assert key in keys, key
    assert "layer1.1.downsample.0.weight" not in keys
    # v1.5: the stride sits on the 3x3 conv, not the first 1x1.
    assert model.layer2[0].conv2.stride == (2, 2)
    assert model.layer2[0].conv1.stride == (1, 1)


def test_resnet50_num_classes_changes_only_the_head() -> None:
    model = resnet50(num_classes=10)
    assert model.fc.weight.shape == (10, 2048)
    assert _num_params(model) == 25_557_032 - 990 * 2049


def test_mobilenet_v2_parameter_count_and_torchvision_keys() -> None:
    model = mobilenet_v2()
    assert _num_params(model) == 3_504_872
    keys = set(model.state_dict())
    assert len(keys) == 314
    for key in (
        "features.0.0.weight",
        "features.0.1.running_var",
        "features.1.conv.0.0.weight",
        "features.1.conv.1.weight",
        "features.2.conv.0.0.weight",
        "features.2.conv.3.running_mean",
        "features.17.conv.2.weight",
        "features.18.0.weight",
        "features.18.1.weight",
        "classifier.1.weight",
        "classifier.1.bias",
    ):
        assert key in keys, key
    assert any(isinstance(m, torch.nn.ReLU6) for m in model.modules())


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_image_models_forward_shape_and_determinism(name: str) -> None:
    entry = zoo_entry(name)
    model = entry.build()
    assert not model.training
    batch = entry.inputs[0].concrete_shape(2)
    with torch.no_grad():
        out = model(torch.randn(batch))
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()
    assert _same_state(model, entry.build())


def test_build_leaves_global_rng_untouched() -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    zoo_entry("mobilenet_v2").build()
    threads = torch.get_num_threads()
    zoo_entry("digits-cnn").build()
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), before)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    assert torch.equal(torch.rand(3), expected)


def test_digits_heldout_accuracy_and_cached_build() -> None:
    entry = zoo_entry("digits")
    assert entry.eval_data is not None
    data = entry.eval_data()
    assert data.metric == "top1_accuracy"
    assert data.num_samples == 360
    pixels = data.inputs["pixels"]
    assert pixels.shape == (360, 1, 8, 8)
    assert pixels.dtype == torch.float32
    assert float(pixels.min()) >= 0.0
    assert float(pixels.max()) <= 1.0
    assert sorted(torch.bincount(data.labels).tolist())[0] >= 35  # stratified: ~36 per class
    model = entry.build()
    assert not model.training
    with torch.no_grad():
        predicted = model(pixels).argmax(dim=1)
    accuracy = float((predicted == data.labels).float().mean())
    assert accuracy >= 0.95, accuracy
    again = entry.build()
    assert again is not model
    assert _same_state(model, again)


def test_bert_base_forward_shape() -> None:
    pytest.importorskip("transformers")
    entry = zoo_entry("BERT")
    assert entry.name == "bert-base"
    assert entry.requires == ("transformers",)
    model = entry.build()
    assert not model.training
    ids = torch.randint(0, 30522, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.int64)
    with torch.no_grad():
        out = model(ids, mask)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (1, 16, 768)
    assert 105_000_000 < _num_params(model) < 115_000_000


def test_gpt2_small_forward_shape() -> None:
    pytest.importorskip("transformers")
    entry = zoo_entry("gpt2")
    assert entry.name == "gpt2-small"
    assert entry.task is Task.LANGUAGE_MODEL
    model = entry.build()
    ids = torch.randint(0, 50257, (1, 16))
    with torch.no_grad():
        out = model(ids)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (1, 16, 50257)
    assert 120_000_000 < _num_params(model) < 130_000_000


def test_transformer_entries_without_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    for name in ("bert-base", "gpt2-small"):
        with pytest.raises(NotAvailableError, match=r"accelscope\[transformers\]") as info:
            zoo_entry(name).build()
        assert name in str(info.value)


def test_zoo_registry_specs() -> None:
    assert DEFAULT_MODEL in ZOO
    assert zoo_names() == [
        "resnet50",
        "mobilenet_v2",
        "vit-b-16",
        "bert-base",
        "gpt2-small",
        "digits-cnn",
    ]
    bert = ZOO["bert-base"]
    assert [s.name for s in bert.inputs] == ["input_ids", "attention_mask"]
    assert bert.inputs[0].concrete_shape(4) == (4, 128)
    assert (bert.inputs[0].low, bert.inputs[0].high) == (0, 30522)
    assert (bert.inputs[1].low, bert.inputs[1].high) == (1, 2)
    assert ZOO["gpt2-small"].inputs[0].high == 50257
    assert ZOO["resnet50"].inputs[0].shape == ("N", 3, 224, 224)
    assert ZOO["digits-cnn"].inputs[0].shape == ("N", 1, 8, 8)
    assert {e.task for e in ZOO.values()} == {
        Task.CLASSIFICATION,
        Task.ENCODER,
        Task.LANGUAGE_MODEL,
    }
    assert all(e.requires == () for e in ZOO.values() if e.task is Task.CLASSIFICATION)


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("ResNet-50", "resnet50"),
        ("MobileNetV2", "mobilenet_v2"),
        ("ViT-B/16", "vit-b-16"),
        ("bert", "bert-base"),
        ("GPT2", "gpt2-small"),
        (" digits ", "digits-cnn"),
    ],
)
def test_zoo_lookup_by_alias(alias: str, canonical: str) -> None:
    assert zoo_entry(alias).name == canonical


def test_zoo_unknown_name_lists_valid_names() -> None:
    with pytest.raises(BadInputError) as info:
        zoo_entry("resnet152")
    message = str(info.value)
    assert "resnet152" in message
    for name in zoo_names():
        assert name in message


def test_vit_b_16_shape_parameters_and_linear_projections() -> None:
    from accelscope.models.zoo.vit import vit_b_16

    model = zoo_entry("vit").build()
    assert _num_params(model) == 86_567_656  # torchvision's vit_b_16 with 1000 classes
    with torch.no_grad():
        out = model(torch.randn(2, 3, 224, 224))
    assert out.shape == (2, 1000) and torch.isfinite(out).all()
    assert out[0].argmax() != out[1].argmax() or not torch.equal(out[0], out[1])  # a real head
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 12 * 4 + 1  # qkv, proj, two MLP layers per block, the head
    small = vit_b_16(classes=10)
    assert small.head.out_features == 10
