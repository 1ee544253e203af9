"""A synchronisation-bound training loop: a tiny classifier whose loop reads results back to
the host every step -- ``loss.item()``, the accuracy, and the per-sample predictions, class
probabilities and logits kept for a log -- so the host spends its time converting tensors to
Python values instead of training.

Run it alone (``python sync_bound.py``) or under the doctor::

    accelscope doctor examples/doctor/sync_bound.py --steps 50
"""

from __future__ import annotations

import argparse
from collections import deque

import torch
from torch import nn

CLASSES = 100


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    torch.manual_seed(0)
    features = torch.randn(4096, 32)
    labels = torch.randint(0, CLASSES, (4096,))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    history: deque[dict[str, object]] = deque(maxlen=50)  # a rolling log window
    batch = 512
    for step in range(args.steps):
        start = (step * batch) % features.shape[0]
        x, y = features[start : start + batch], labels[start : start + batch]
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # per-step logging: every value is read back to the host as soon as it exists
        probabilities = logits.detach().softmax(dim=1)
        record: dict[str, object] = {"step": step, "loss": loss.item()}
        record["accuracy"] = (logits.argmax(dim=1) == y).float().mean().item()
        record["predictions"] = logits.argmax(dim=1).tolist()
        record["probabilities"] = probabilities.tolist()
        record["logits"] = logits.detach().tolist()
        history.append(record)
        if step % 100 == 0:
            print(f"step {step} loss {record['loss']:.3f} accuracy {record['accuracy']:.2f}")


if __name__ == "__main__":
    main()
