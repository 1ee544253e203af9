"""The built-in model zoo: models constructed in code with seeded weights, never downloaded.

``ZOO`` maps each canonical name to its :class:`~accelscope.models.base.ZooEntry`;
:func:`zoo_entry` looks a name up case-insensitively, aliases included. Every ``build`` seeds
torch inside ``torch.random.fork_rng`` (the caller's RNG state is untouched), so one entry
builds bit-identical weights every time, and returns the model in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from accelscope.errors import BadInputError
from accelscope.models.base import EvalData, Task, ZooEntry
from accelscope.models.zoo.digits import DIGITS_INPUT
from accelscope.spec import TensorSpec

__all__ = ["DEFAULT_MODEL", "ZOO", "zoo_entry", "zoo_names"]

DEFAULT_MODEL = "resnet50"
"""The model measured when none is named."""

_SEED = 0
_IMAGE = TensorSpec(name="x", shape=("N", 3, 224, 224), dtype="float32")
_SEQ_LEN = 128
_BERT_VOCAB = 30522
_GPT2_VOCAB = 50257


def _seeded(factory: Callable[[], nn.Module], seed: int = _SEED) -> Callable[[], nn.Module]:
    """Wrap ``factory`` so it runs under ``manual_seed(seed)`` without touching global RNG."""

    def build() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = factory()
        return model.eval()

    build.__name__ = getattr(factory, "__name__", "build")
    build.__doc__ = getattr(factory, "__doc__", None)
    return build


def _build_resnet50() -> nn.Module:
    from accelscope.models.zoo.resnet import resnet50

    return resnet50()


def _build_mobilenet_v2() -> nn.Module:
    from accelscope.models.zoo.mobilenet import mobilenet_v2

    return mobilenet_v2()


def _build_vit_b_16() -> nn.Module:
    from accelscope.models.zoo.vit import vit_b_16

    return vit_b_16()


def _build_bert_base() -> nn.Module:
    from accelscope.models.zoo.transformer import build_bert_base

    return build_bert_base()


def _build_gpt2_small() -> nn.Module:
    from accelscope.models.zoo.transformer import build_gpt2_small

    return build_gpt2_small()


def _build_digits() -> nn.Module:
    from accelscope.models.zoo.digits import build_digits

    return build_digits()


def _digits_eval_data() -> EvalData:
    from accelscope.models.zoo.digits import digits_eval_data

    return digits_eval_data()


ZOO: dict[str, ZooEntry] = {
    entry.name: entry
    for entry in (
        ZooEntry(
            name="resnet50",
            description="ResNet-50 v1.5 image classifier, 25.6 M parameters, random weights",
            task=Task.CLASSIFICATION,
            inputs=(_IMAGE,),
            build=_seeded(_build_resnet50),
            aliases=("resnet-50", "resnet_50", "resnet"),
        ),
        ZooEntry(
            name="mobilenet_v2",
            description="MobileNetV2 (width 1.0) image classifier, 3.5 M parameters, "
            "random weights",
            task=Task.CLASSIFICATION,
            inputs=(_IMAGE,),
            build=_seeded(_build_mobilenet_v2),
            aliases=("mobilenetv2", "mobilenet-v2", "mobilenet"),
        ),
        ZooEntry(
            name="vit-b-16",
            description="ViT-B/16 image classifier (12 layers, hidden 768, patch 16), 86.6 M "
            "parameters, random weights; attention through nn.Linear and SDPA",
            task=Task.CLASSIFICATION,
            inputs=(_IMAGE,),
            build=_seeded(_build_vit_b_16),
            aliases=("vit_b_16", "vit-b/16", "vit", "vitb16"),
        ),
        ZooEntry(
            name="bert-base",
            description="BERT-base encoder (12 layers, hidden 768), 109 M parameters, random "
            "weights; returns the last hidden state",
            task=Task.ENCODER,
            inputs=(
                TensorSpec(
                    name="input_ids", shape=("N", _SEQ_LEN), dtype="int64", low=0, high=_BERT_VOCAB
                ),
                TensorSpec(
                    name="attention_mask", shape=("N", _SEQ_LEN), dtype="int64", low=1, high=2
                ),
            ),
            build=_seeded(_build_bert_base),
            requires=("transformers",),
            aliases=("bert", "bert_base", "bert-base-uncased"),
        ),
        ZooEntry(
            name="gpt2-small",
            description="GPT-2 small decoder (12 layers, hidden 768), 124 M parameters, random "
            "weights; returns next-token logits, no KV cache",
            task=Task.LANGUAGE_MODEL,
            inputs=(
                TensorSpec(
                    name="input_ids", shape=("N", _SEQ_LEN), dtype="int64", low=0, high=_GPT2_VOCAB
                ),
            ),
            build=_seeded(_build_gpt2_small),
            requires=("transformers",),
            aliases=("gpt2", "gpt-2", "gpt2_small", "gpt2small"),
        ),
        ZooEntry(
            name="digits-cnn",
            description="small CNN trained at build time on scikit-learn's 8x8 handwritten "
            "digits; held-out top-1 accuracy is the fidelity metric",
            task=Task.CLASSIFICATION,
            inputs=(DIGITS_INPUT,),
            build=_seeded(_build_digits),
            eval_data=_digits_eval_data,
            default_batch_size=32,
            aliases=("digits", "digits_cnn", "digitscnn"),
        ),
    )
}

_LOOKUP: dict[str, str] = {}
for _entry in ZOO.values():
    for _key in (_entry.name, *_entry.aliases):
        if _key.lower() in _LOOKUP:
            raise RuntimeError(f"zoo name {_key!r} is declared twice")
        _LOOKUP[_key.lower()] = _entry.name


def zoo_names() -> list[str]:
    """Canonical zoo model names, in declaration order (aliases excluded)."""
    return list(ZOO)


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry called ``name`` (case-insensitive; aliases accepted).

    An unknown name raises :class:`~accelscope.errors.BadInputError` listing the valid names.
    """
    key = name.strip().lower()
    canonical = _LOOKUP.get(key)
    if canonical is None:
        raise BadInputError(f"unknown zoo model {name!r}; choose one of: {', '.join(zoo_names())}")
    return ZOO[canonical]
