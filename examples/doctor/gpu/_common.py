"""What every GPU archetype shares: the flags (``--device``, ``--steps``, ``--small``) and the
device choice. ``--small`` shrinks every size so the loop runs in seconds on a CPU (the suite's
smoke test); the archetype's bottleneck is only claimed at full size on a GPU."""

from __future__ import annotations

import argparse

import torch


def arguments(description: str, steps: int = 200) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--small", action="store_true", help="tiny sizes (a CPU smoke run)")
    args = parser.parse_args()
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = torch.device(name)
    torch.manual_seed(0)
    return args


def size(args: argparse.Namespace, full: int, small: int) -> int:
    """``full`` on the real run, ``small`` under ``--small``."""
    return small if args.small else full
