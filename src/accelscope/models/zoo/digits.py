"""A small CNN trained at build time on scikit-learn's bundled handwritten digits.

``sklearn.datasets.load_digits`` ships 1797 8x8 grey-scale images (values 0..16) of the digits
0-9 with scikit-learn itself, so this is real labelled data with no download. A fixed stratified
split holds out 20 % (360 images) for evaluation; the rest trains a ~18k-parameter CNN with a
fixed seed, fixed mini-batches and a fixed number of epochs. Training runs once per process.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from accelscope.models.base import EvalData
from accelscope.spec import TensorSpec

__all__ = ["DIGITS_INPUT", "DIGITS_SOURCE", "DigitsCNN", "build_digits", "digits_eval_data"]

DIGITS_INPUT = TensorSpec(name="pixels", shape=("N", 1, 8, 8), dtype="float32")
"""Model input: pixel intensities scaled to [0, 1] (raw values / 16)."""

DIGITS_SOURCE = "scikit-learn load_digits (UCI handwritten digits), 20 % held out, seed 0"

_SEED = 0
_TEST_FRACTION = 0.2
_EPOCHS = 25
_BATCH_SIZE = 128
_LEARNING_RATE = 3e-3


class DigitsCNN(nn.Module):
    """Two 3x3 conv layers (8, 16 channels), 2x2 max-pool, 64-unit hidden layer, 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Map ``(N, 1, 8, 8)`` float32 pixels in [0, 1] to ``(N, 10)`` class logits."""
        return self.classifier(self.features(pixels))  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1)
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: x float32 ``(n, 1, 8, 8)`` in [0, 1], y int64."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (np.asarray(digits.images, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    labels = np.asarray(digits.target, dtype=np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=_TEST_FRACTION, random_state=_SEED, stratify=labels
    )
    return x_train, y_train, x_test, y_test


@functools.lru_cache(maxsize=1)
def _trained_state() -> dict[str, torch.Tensor]:
    """Train :class:`DigitsCNN` once on the training split; return a detached state dict copy."""
    x_np, y_np, _, _ = _split()
    threads = torch.get_num_threads()
    # One thread: these tensors are far too small to gain from more, extra threads only spin
    # on a busy machine, and a fixed thread count keeps the float reductions (so the weights)
    # the same whatever the host's core count.
    torch.set_num_threads(1)
    try:
        return _train(torch.from_numpy(x_np), torch.from_numpy(y_np))
    finally:
        torch.set_num_threads(threads)


def _train(x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Adam on fixed-seed mini-batches of ``x`` (n, 1, 8, 8) and ``y`` (n,); returns weights.

    Adam is written out here because constructing any ``torch.optim`` optimizer imports
    ``torch._dynamo``, which alone costs 1-3 s, more than the whole training run.
    """
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = DigitsCNN()
        params = list(model.parameters())
        first = [torch.zeros_like(p) for p in params]
        second = [torch.zeros_like(p) for p in params]
        order = torch.Generator().manual_seed(_SEED)
        model.train()
        step = 0
        for _ in range(_EPOCHS):
            perm = torch.randperm(x.shape[0], generator=order)
            for start in range(0, x.shape[0], _BATCH_SIZE):
                idx = perm[start : start + _BATCH_SIZE]
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                grads = torch.autograd.grad(loss, params)
                step += 1
                bias1 = 1 - beta1**step
                bias2 = 1 - beta2**step
                with torch.no_grad():
                    for p, g, m, v in zip(params, grads, first, second, strict=True):
                        m.mul_(beta1).add_(g, alpha=1 - beta1)
                        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                        denom = (v / bias2).sqrt_().add_(eps)
                        p.addcdiv_(m, denom, value=-_LEARNING_RATE / bias1)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def build_digits() -> DigitsCNN:
    """The trained digits CNN in eval mode: ``(N, 1, 8, 8)`` pixels -> ``(N, 10)`` logits.

    The first call trains (about a second of one CPU core); later calls in the same process
    reuse the cached weights and return a fresh, independent module. The global torch RNG state
    is left as it was.
    """
    state = _trained_state()
    with torch.random.fork_rng(devices=[]):
        model = DigitsCNN()
    model.load_state_dict(state)
    return model.eval()


def digits_eval_data() -> EvalData:
    """The 360 held-out images (``pixels``: float32 ``(360, 1, 8, 8)``) and int64 labels, plus
    256 training images for int8 calibration."""
    x_train, _, x_test, y_test = _split()
    return EvalData(
        inputs={DIGITS_INPUT.name: torch.from_numpy(x_test.copy())},
        labels=torch.from_numpy(y_test.copy()),
        metric="top1_accuracy",
        source=DIGITS_SOURCE,
        calibration={DIGITS_INPUT.name: torch.from_numpy(x_train[:256].copy())},
    )
