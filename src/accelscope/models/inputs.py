"""Synthetic inputs from a model's input spec: deterministic, seeded, right dtype and range."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelscope.spec import TensorSpec

if TYPE_CHECKING:
    import torch

__all__ = ["make_batch", "torch_dtype"]


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a :class:`TensorSpec` dtype name."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"no torch dtype called {name!r}")
    return dtype


def make_batch(
    specs: tuple[TensorSpec, ...], batch_size: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """One batch of CPU tensors for ``specs``; the same seed gives the same values.

    Floats are standard normal (or uniform in ``[low, high)`` when both are set); integers are
    uniform in ``[low, high)`` (default ``[0, 2)``); bools are random.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    batch: dict[str, torch.Tensor] = {}
    for spec in specs:
        shape = spec.concrete_shape(batch_size)
        dtype = torch_dtype(spec.dtype)
        if spec.dtype == "bool":
            batch[spec.name] = torch.randint(0, 2, shape, generator=generator).bool()
        elif spec.is_integer:
            low = int(spec.low) if spec.low is not None else 0
            high = int(spec.high) if spec.high is not None else 2
            batch[spec.name] = torch.randint(low, high, shape, generator=generator, dtype=dtype)
        elif spec.low is not None and spec.high is not None:
            values = torch.rand(shape, generator=generator) * (spec.high - spec.low) + spec.low
            batch[spec.name] = values.to(dtype)
        else:
            batch[spec.name] = torch.randn(shape, generator=generator).to(dtype)
    return batch
