"""BERT-base encoder and GPT-2-small decoder built from ``transformers`` default configs.

Weights are random (the caller seeds the RNG); nothing is downloaded. Each model is wrapped so
that ``forward`` takes positional tensors and returns one tensor, which keeps timing and
``torch.export`` simple. ``transformers`` is imported lazily inside the build functions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accelscope.errors import NotAvailableError

__all__ = ["BertEncoder", "GPT2LanguageModel", "build_bert_base", "build_gpt2_small"]

ATTN_IMPLEMENTATION = "sdpa"
"""Attention kernel requested from transformers.

PyTorch's ``scaled_dot_product_attention``: the kernel transformers picks by default where it
is available, it traces through ``torch.export`` (checked with a dynamic batch dimension), and
it agrees with the ``"eager"`` implementation to ~3e-6 on BERT-base.
"""


def _transformers(model_name: str) -> Any:
    try:
        import transformers
    except ImportError:
        raise NotAvailableError(
            f"model {model_name!r} needs the transformers package: "
            "pip install 'accelscope[transformers]'"
        ) from None
    return transformers


class BertEncoder(nn.Module):
    """Wraps ``BertModel``: ``(input_ids, attention_mask)`` -> last hidden state."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Map int64 ``(N, S)`` token ids and ``(N, S)`` 0/1 mask to ``(N, S, 768)`` float32."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state  # type: ignore[no-any-return]


class GPT2LanguageModel(nn.Module):
    """Wraps ``GPT2LMHeadModel``: ``input_ids`` -> next-token logits, no KV cache."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Map int64 ``(N, S)`` token ids (S <= 1024) to ``(N, S, 50257)`` float32 logits."""
        out = self.model(input_ids=input_ids, use_cache=False, return_dict=True)
        return out.logits  # type: ignore[no-any-return]


def build_bert_base() -> BertEncoder:
    """BERT-base-uncased shape (12 layers, hidden 768, 12 heads, vocab 30522), random weights.

    Weights come from the global torch RNG; seed it first for reproducible weights.
    """
    transformers = _transformers("bert-base")
    config = transformers.BertConfig(attn_implementation=ATTN_IMPLEMENTATION)
    model = transformers.BertModel(config, add_pooling_layer=False)
    return BertEncoder(model).eval()


def build_gpt2_small() -> GPT2LanguageModel:
    """GPT-2 small shape (12 layers, hidden 768, 12 heads, vocab 50257, 1024 positions).

    Random weights from the global torch RNG; the LM head is tied to the token embedding.
    """
    transformers = _transformers("gpt2-small")
    config = transformers.GPT2Config(attn_implementation=ATTN_IMPLEMENTATION, use_cache=False)
    model = transformers.GPT2LMHeadModel(config)
    return GPT2LanguageModel(model).eval()
