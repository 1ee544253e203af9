"""ViT-B/16 (Dosovitskiy et al. 2020), torchvision's ``vit_b_16`` shape, written from scratch.

Patch embedding by a 16x16 stride-16 convolution, a class token, learned position embeddings,
12 pre-norm encoder blocks (hidden 768, 12 heads, MLP 3072, GELU) and a linear head:
86,567,656 parameters with 1000 classes, as torchvision's. Attention projects with
``nn.Linear`` layers (one fused ``qkv``, one ``proj``) and runs
``scaled_dot_product_attention``, so every matrix product of the model is an ``nn.Linear``:
what weight-only and float8 conversions (torchao) act on, and a fused attention kernel on a
GPU. (torchvision's ``nn.MultiheadAttention`` keeps its input projection as a bare
parameter, which those conversions skip.) Weights: truncated-normal-like init as
torchvision's (normal, std 0.02 for the position embedding) but PyTorch's default init on the
head, not zeros: a zero head gives every input the same logits, and top-1 agreement between
precisions would then hold by construction.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["VisionTransformer", "vit_b_16"]


class Attention(nn.Module):
    """Multi-head self-attention with a fused ``qkv`` projection and SDPA."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, hidden))  # type: ignore[no-any-return]


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, hidden: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))  # type: ignore[no-any-return]


class VisionTransformer(nn.Module):
    """``(N, 3, image, image)`` float32 -> ``(N, classes)`` logits."""

    def __init__(
        self,
        *,
        image: int = 224,
        patch: int = 16,
        layers: int = 12,
        heads: int = 12,
        hidden: int = 768,
        mlp: int = 3072,
        classes: int = 1000,
    ) -> None:
        super().__init__()
        self.patch = patch
        self.conv_proj = nn.Conv2d(3, hidden, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, hidden).normal_(std=0.02))
        self.layers = nn.Sequential(*(EncoderBlock(hidden, heads, mlp) for _ in range(layers)))
        self.ln = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, classes)
        fan_in = 3 * patch * patch
        nn.init.trunc_normal_(self.conv_proj.weight, std=(1.0 / fan_in) ** 0.5)
        if self.conv_proj.bias is not None:
            nn.init.zeros_(self.conv_proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.conv_proj(x).flatten(2).transpose(1, 2)  # (N, tokens - 1, hidden)
        token = self.class_token.expand(patches.shape[0], -1, -1)
        x = torch.cat([token, patches], dim=1) + self.pos_embedding
        x = self.ln(self.layers(x))
        return self.head(x[:, 0])  # type: ignore[no-any-return]


def vit_b_16(classes: int = 1000) -> VisionTransformer:
    """ViT-B/16 at 224 x 224: 12 layers, hidden 768, 12 heads, MLP 3072."""
    return VisionTransformer(classes=classes)
