"""MobileNetV2 (Sandler et al. 2018), width 1.0, written from scratch.

Module names match torchvision's ``mobilenet_v2`` (``features.N...``, ``classifier.1``), so a
torchvision state dict loads with ``model.load_state_dict(sd)``. Initialisation follows
torchvision: Kaiming normal (fan_out) on convolutions, BatchNorm 1/0, Linear normal(0, 0.01)
with zero bias.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["InvertedResidual", "MobileNetV2", "mobilenet_v2"]

# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2.
_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to a multiple of ``divisor`` without dropping more than 10 %."""
    new_value = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new_value < 0.9 * value:
        new_value += divisor
    return new_value


class ConvBNReLU6(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6, indexed 0/1/2 as in torchvision."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel_size: int = 3, stride: int = 1, groups: int = 1
    ) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise 3x3 -> linear project (1x1); residual when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(in_ch * expand_ratio)
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(in_ch, hidden, kernel_size=1))
        layers.extend(
            [
                ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                nn.Conv2d(hidden, out_ch, 1, 1, 0, bias=False),
                nn.BatchNorm2d(out_ch),
            ]
        )
        self.conv = nn.Sequential(*layers)
        self.out_channels = out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(N, in_ch, H, W)`` to ``(N, out_ch, H / stride, W / stride)``."""
        if self.use_res_connect:
            return x + self.conv(x)  # type: ignore[no-any-return]
        return self.conv(x)  # type: ignore[no-any-return]


class MobileNetV2(nn.Module):
    """MobileNetV2 at width multiplier 1.0: 19 feature blocks, dropout 0.2, linear classifier."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        in_ch = _make_divisible(32.0)
        last_ch = _make_divisible(1280.0)
        features: list[nn.Module] = [ConvBNReLU6(3, in_ch, stride=2)]
        for t, c, n, s in _SETTINGS:
            out_ch = _make_divisible(float(c))
            for i in range(n):
                features.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                in_ch = out_ch
        features.append(ConvBNReLU6(in_ch, last_ch, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(last_ch, num_classes))

        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images ``(N, 3, H, W)`` float32 (224x224 nominal) to logits ``(N, num_classes)``."""
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)  # type: ignore[no-any-return]


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    """MobileNetV2, width 1.0; 3,504,872 parameters at 1000 classes.

    Input ``(N, 3, 224, 224)`` float32 images, output ``(N, num_classes)`` logits. Weights are
    freshly initialised from the global torch RNG (seed it first for reproducible weights).
    """
    return MobileNetV2(num_classes=num_classes)
