"""Measure the GPU memory of real training steps of Llama-style models, for checking the training
memory model of ``plan train`` (issue 43) against a real accelerator: per configuration, the
bytes the caching allocator holds for the weights, after the optimizer's first step (its states
created) and the peak of a steady step (``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats``), each model built in code from a ``LlamaConfig`` (no download).

    python benchmarks/gpu/train_memory_gpu.py OUT.json [--quick]

Each configuration runs in this process one after another (everything freed and the cache
emptied between them); one that runs out of memory is recorded as such. On a CPU (no CUDA) it
checks the plumbing on the smallest configuration and records no figures.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import time
from pathlib import Path
from typing import Any

import torch

SHAPES = {
    # name: (hidden, layers, heads, kv_heads, intermediate, vocab)
    "llama-110m": (768, 12, 12, 12, 2048, 32000),
    "llama-430m": (1024, 24, 16, 8, 2816, 32000),
    "llama-1b": (2048, 16, 32, 8, 5632, 32000),
}


def _model(shape: str, device: str, attention: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv, inter, vocab = SHAPES[shape]
    config = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it trains: a 1B model's CPU init takes long
        return LlamaForCausalLM(config)


def measure(
    shape: str,
    *,
    optimizer: str,
    precision: str,
    checkpointing: bool,
    batch: int,
    seq: int,
    device: str,
    attention: str = "sdpa",
) -> dict[str, Any]:
    cuda = device.startswith("cuda")
    row: dict[str, Any] = {
        "shape": shape,
        "optimizer": optimizer,
        "precision": precision,
        "checkpointing": checkpointing,
        "batch": batch,
        "seq": seq,
        "attention": attention,
    }
    model = opt = None
    try:
        base = torch.cuda.memory_allocated() if cuda else 0
        model = _model(shape, device, attention)
        if precision == "bf16_pure":
            model = model.to(torch.bfloat16)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        row["params"] = sum(p.numel() for p in model.parameters())
        row["weights_bytes"] = (torch.cuda.memory_allocated() - base) if cuda else None
        if optimizer == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        ids = torch.randint(0, SHAPES[shape][5], (batch, seq), device=device)

        def step() -> None:
            assert opt is not None and model is not None
            with torch.autocast(
                device_type="cuda" if cuda else "cpu",
                dtype=torch.bfloat16,
                enabled=precision == "bf16_mixed",
            ):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # the optimizer's states are created here
        if cuda:
            torch.cuda.synchronize()
            row["after_first_step_bytes"] = torch.cuda.memory_allocated() - base
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated() - base
        began = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
            row["steady_step_s"] = time.perf_counter() - began
            row["held_before_step_bytes"] = held
            row["peak_step_bytes"] = torch.cuda.max_memory_allocated() - base
            row["peak_above_held_bytes"] = row["peak_step_bytes"] - held
        row["status"] = "measured" if cuda else "plumbing only (no CUDA)"
    except torch.OutOfMemoryError as exc:
        row["status"] = f"out of memory: {str(exc).splitlines()[0][:160]}"
    finally:
        model = opt = None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return row


def configurations(quick: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    shapes = ["llama-110m"] if quick else list(SHAPES)
    for shape, optimizer, precision, ckpt in itertools.product(
        shapes, ("adamw", "sgd"), ("fp32", "bf16_mixed"), (False, True)
    ):
        for batch, seq in ((1, 1024), (4, 1024), (8, 2048)):
            if optimizer == "sgd" and (batch, seq) != (4, 1024):
                continue  # SGD: one point per shape is enough against AdamW's three
            out.append(dict(shape=shape, optimizer=optimizer, precision=precision,
                            checkpointing=ckpt, batch=batch, seq=seq))  # fmt: skip
    if not quick:  # the attention implementation's own share, on one point
        out.append(dict(shape="llama-430m", optimizer="adamw", precision="bf16_mixed",
                        checkpointing=False, batch=4, seq=1024, attention="eager"))  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="the smallest shape only")
    parser.add_argument("--budget-s", type=float, default=170.0)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    configs = configurations(args.quick or device == "cpu")
    if device == "cpu":
        configs = [dict(configs[0], batch=1, seq=64)]
    began = time.monotonic()
    rows = []
    for config in configs:
        if time.monotonic() - began > args.budget_s:
            rows.append({**config, "status": "skipped: budget spent"})
            continue
        row = measure(**config, device=device)
        rows.append(row)
        print(json.dumps(row), flush=True)
    document = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "rows": rows,
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
