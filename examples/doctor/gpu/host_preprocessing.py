"""Host preprocessing inside the loop: the raw uint8 batch is already in memory, but every step
crops, flips and normalises each sample on the CPU in the training loop itself (no DataLoader,
no workers), then copies the result. The GPU waits while the host prepares the batch.
Expected verdict: host-bound on the preprocessing (advice: move it into DataLoader workers or
onto the GPU: copy the uint8 batch, augment there), never bf16.

    accelscope doctor examples/doctor/gpu/host_preprocessing.py --steps 20
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def preprocess(raw: torch.Tensor, crop: int, generator: torch.Generator) -> torch.Tensor:
    """Random crop, random flip and normalisation, one sample at a time on the CPU."""
    samples = []
    for image in raw:
        corner = torch.randint(0, raw.shape[-1] - crop, (2,), generator=generator)
        top, left = int(corner[0]), int(corner[1])
        sample = image[:, top : top + crop, left : left + crop].float() / 255.0
        if torch.rand(1, generator=generator).item() < 0.5:
            sample = sample.flip(-1)
        samples.append((sample - 0.45) / 0.225)
    return torch.stack(samples)


def main() -> None:
    args = arguments(__doc__ or "", steps=100)
    batch, side, crop = size(args, 128, 4), size(args, 256, 40), size(args, 224, 32)
    raw = torch.randint(0, 256, (batch, 3, side, side), dtype=torch.uint8)
    labels = torch.randint(0, 10, (batch,))
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    for _ in range(args.steps):
        images = preprocess(raw, crop, generator).to(args.device)
        loss = nn.functional.cross_entropy(model(images), labels.to(args.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
