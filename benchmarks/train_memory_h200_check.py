"""The training memory model (``accelscope.plan.train_memory``) against 49 training steps measured
on a real NVIDIA H200 (``benchmarks/gpu/train_memory_gpu.py``, 2026-11-28; the figures in
``benchmarks/results/gpu-2026-11-28-h200/train_memory_h200.json``): per configuration the
weights, the bytes held after the optimizer's first step and the peak of a steady step, as the
caching allocator counted them (``torch.cuda.memory_allocated`` / ``max_memory_allocated`` above
what was allocated before the model), against the model's estimate with no overhead (the
allocator's own counts hold no CUDA context and no fragmentation).

    .venv/bin/python benchmarks/train_memory_h200_check.py

Prints a markdown table and the median and largest |error| of the peak.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from accelscope.plan.llm_memory import shape_from_config
from accelscope.plan.train_memory import TrainSetup, estimate_train_memory

DATA = (
    Path(__file__).resolve().parent / "results" / "gpu-2026-11-28-h200" / "train_memory_h200.json"
)
SHAPES = {  # as benchmarks/gpu/train_memory_gpu.py built them
    "llama-110m": (768, 12, 12, 12, 2048, 32000),
    "llama-430m": (1024, 24, 16, 8, 2816, 32000),
    "llama-1b": (2048, 16, 32, 8, 5632, 32000),
}


def _shape(name: str) -> Any:
    hidden, layers, heads, kv, inter, vocab = SHAPES[name]
    return shape_from_config(
        {
            "model_type": "llama",
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "intermediate_size": inter,
            "vocab_size": vocab,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
        },
        origin=name,
    )


def main() -> int:
    document = json.loads(DATA.read_text())
    print(f"device: {document['device']}, torch {document['torch']}\n")
    print(
        "| shape | optimizer | precision | ckpt | batch x seq | params (model / measured) "
        "| held after step 1, GB (model / measured) | peak, GB (model / measured) | error "
        "| phase |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors: list[float] = []
    for row in document["rows"]:
        if row.get("status") != "measured":
            continue
        shape = _shape(row["shape"])
        setup = TrainSetup(
            shape=shape,
            optimizer=row["optimizer"],
            precision=row["precision"],
            micro_batch=row["batch"],
            seq_len=row["seq"],
            checkpointing=row["checkpointing"],
            attention=row["attention"],
            overhead_fixed_bytes=0.0,
            overhead_fraction=0.0,
        )
        memory = estimate_train_memory(setup)
        predicted = memory.total_bytes
        measured = float(row["peak_step_bytes"])
        error = predicted / measured - 1.0
        errors.append(error)
        print(
            f"| {row['shape']} | {row['optimizer']} | {row['precision']} | "
            f"{'on' if row['checkpointing'] else 'off'}"
            f"{' (eager)' if row['attention'] == 'eager' else ''} | "
            f"{row['batch']} x {row['seq']} | {memory.params / 1e6:.0f}M / "
            f"{row['params'] / 1e6:.0f}M | {memory.held_bytes / 1e9:.2f} / "
            f"{row['held_before_step_bytes'] / 1e9:.2f} | {predicted / 1e9:.2f} / "
            f"{measured / 1e9:.2f} | {error:+.1%} | {memory.peak_phase} |"
        )
    magnitudes = sorted(abs(e) for e in errors)
    print(
        f"\n{len(errors)} steps: median |error| {statistics.median(magnitudes):.1%}, "
        f"largest {magnitudes[-1]:.1%}; within 10 %: "
        f"{sum(m <= 0.10 for m in magnitudes)} of {len(errors)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
