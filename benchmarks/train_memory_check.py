"""Training memory model against a measured CPU training step (issue 43, first slice).

For each configuration a fresh process builds a small ``LlamaForCausalLM`` from a
``LlamaConfig`` (no download), runs one warm-up step (so the optimizer's states exist, as in
every step after the first) and then one profiled step (forward with ``labels``, backward,
``optimizer.step()``, ``zero_grad()``; the forward with ``use_cache=False``: a training step
has no use for transformers' KV cache, which its default would return), under
``torch.profiler.profile(profile_memory=True)``.
The CPU allocator reports every allocation and free made while the profiler runs, with its
running total (``[memory]`` events, ``Total Allocated`` in the exported chrome trace); the
profiler starts before the model is built, so that total counts every tensor the process
holds. Measured: the total just before the step (weights + optimizer states) and its peak
inside the step. Predicted: :func:`accelscope.plan.train_memory.estimate_train_memory` with
no framework overhead (the profiler counts tensor bytes, not the allocator's reserve).

    .venv/bin/python benchmarks/train_memory_check.py [--quick] [--json OUT]

``--rows JSON`` re-predicts the measurements an earlier ``--json`` wrote (measures nothing).
``--one JSON`` measures one configuration and prints its result as JSON (the worker; the test
``tests/plan/test_train_memory.py`` calls :func:`measure` in-process). Optimizers are torch's
foreach implementations (what a GPU uses by default). About 10 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelscope.plan.llm_memory import shape_from_config
from accelscope.plan.train_memory import (
    TrainMemory,
    TrainSetup,
    activation_bytes,
    estimate_train_memory,
)

SIZES: dict[str, dict[str, int]] = {
    "2M": {"H": 128, "I": 352, "L": 4, "nh": 4, "kv": 2, "V": 4096},
    "9M": {"H": 256, "I": 688, "L": 6, "nh": 8, "kv": 4, "V": 8192},
}
SEQ = 128


def _llama_config(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": c["H"],
        "intermediate_size": c["I"],
        "num_hidden_layers": c["L"],
        "num_attention_heads": c["nh"],
        "num_key_value_heads": c["kv"],
        "vocab_size": c["V"],
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    }


def measure(c: dict[str, Any]) -> dict[str, Any]:
    """One warm-up and one profiled training step of configuration ``c``, in this process."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    mixed = c["precision"] == "bf16_mixed"
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        cfg = LlamaConfig(**_llama_config(c), attn_implementation=c.get("attention", "sdpa"))
        model = LlamaForCausalLM(cfg)
        model.train()
        if c["ckpt"]:
            model.gradient_checkpointing_enable()
        opt: torch.optim.Optimizer
        if c["opt"] == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
        ids = torch.randint(0, c["V"], (c["B"], c["S"]))

        def step() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
                out = model(input_ids=ids, labels=ids, use_cache=False)
            out.loss.backward()
            del out
            opt.step()
            opt.zero_grad()

        with record_function("warmup"):
            step()
        with record_function("step"):
            step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ranges = {
        e["name"]: (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name") in ("warmup", "step") and e.get("ph") == "X"
    }
    start, end = ranges["step"]
    memory = sorted(
        (float(e["ts"]), int(e["args"]["Total Allocated"]))
        for e in events
        if e.get("name") == "[memory]"
    )
    built = [total for ts, total in memory if ts < ranges["warmup"][0]][-1]
    before = [total for ts, total in memory if ts < start][-1]
    peak = max(total for ts, total in memory if start <= ts <= end)
    params = sum(p.numel() for p in model.parameters())
    ids_bytes = ids.numel() * ids.element_size()
    return {"params": params, "weights": built - ids_bytes, "held_before": before, "peak": peak}


FORMULA_SHAPES: list[dict[str, int]] = [
    {"B": 2, "S": 24, "H": 64, "nh": 4, "kv": 2, "I": 176, "V": 300, "L": 2},
    {"B": 3, "S": 40, "H": 96, "nh": 6, "kv": 6, "I": 256, "V": 500, "L": 3},
]


def saved_bytes(c: dict[str, Any], precision: str, attention: str) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one forward with the
    loss (``saved_tensors_hooks``), plus the logits the output holds."""
    import contextlib

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**_llama_config(c), attn_implementation=attention))
    if precision == "bf16_pure":
        model = model.to(torch.bfloat16)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, c["V"], (c["B"], c["S"]))
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bf16_mixed"
        else contextlib.nullcontext()
    )
    with autocast, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    logits = out.logits.untyped_storage()
    seen.setdefault(logits.data_ptr(), logits.nbytes())
    return sum(seen.values())


def formula_table() -> str:
    """The activation formula against the saved bytes, for each precision and attention."""
    lines = [
        "| precision | attention | batch x seq, hidden, heads/kv, MLP, vocab, layers | "
        "saved by autograd (B) | formula (B) | difference |",
        "|---|---|---|---|---|---|",
    ]
    for precision in ("fp32", "bf16_pure", "bf16_mixed"):
        for attention in ("sdpa", "eager"):
            for c in FORMULA_SHAPES:
                shape = shape_from_config(_llama_config(c))
                formula = activation_bytes(
                    shape,
                    batch=c["B"],
                    seq_len=c["S"],
                    precision=precision,  # type: ignore[arg-type]
                    checkpointing=False,
                    attention=attention,  # type: ignore[arg-type]
                )
                if precision == "bf16_mixed":  # autocast saves its bf16 weight casts too
                    formula += predict(
                        {**c, "opt": "sgd", "ckpt": False, "precision": precision}
                    ).weight_copies_bytes
                got = saved_bytes(c, precision, attention)
                lines.append(
                    f"| {precision} | {attention} | {c['B']} x {c['S']}, {c['H']}, "
                    f"{c['nh']}/{c['kv']}, {c['I']}, {c['V']}, {c['L']} | {got:,} | "
                    f"{formula:,.0f} | {got - formula:+,.0f} |"
                )
    return "\n".join(lines)


def predict(c: dict[str, Any]) -> TrainMemory:
    """The model's estimate for configuration ``c`` (no framework overhead)."""
    shape = shape_from_config(_llama_config(c))
    return estimate_train_memory(
        TrainSetup(
            shape=shape,
            optimizer=c["opt"],
            precision=c["precision"],
            micro_batch=c["B"],
            seq_len=c["S"],
            checkpointing=c["ckpt"],
            attention=c.get("attention", "sdpa"),
            overhead_fixed_bytes=0.0,
            overhead_fraction=0.0,
        )
    )


def run_one(c: dict[str, Any]) -> dict[str, Any]:
    """Measure ``c`` in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(c)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"{c}: worker failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def configs(quick: bool) -> list[dict[str, Any]]:
    out = []
    sizes = ["2M"] if quick else list(SIZES)
    batches = [1, 4] if quick else [1, 4, 16]
    for size in sizes:
        for opt in ("adamw", "sgd"):
            for ckpt in (False, True):
                for b in batches:
                    out.append(
                        {**SIZES[size], "size": size, "opt": opt, "ckpt": ckpt, "B": b}
                        | {"S": SEQ, "precision": "fp32"}
                    )
    if not quick:
        for ckpt in (False, True):
            out.append(
                {**SIZES["2M"], "size": "2M", "opt": "adamw", "ckpt": ckpt, "B": 4}
                | {"S": SEQ, "precision": "bf16_mixed"}
            )
    return out


def _mib(x: float) -> str:
    return f"{x / 2**20:.2f}"


def row(c: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
    p = predict(c)
    held = p.held_bytes
    peak_pred = p.total_bytes
    return {
        **c,
        "params": m["params"],
        "weights_measured": m["weights"],
        # the weights held before the step: a mixed recipe's fp32 master (its bf16 copies
        # are made in the forward)
        "weights_predicted": p.master_bytes or p.weights_bytes,
        "held_measured": m["held_before"],
        "held_predicted": held,
        "peak_measured": m["peak"],
        "peak_predicted": peak_pred,
        "phase": p.peak_phase,
        "error": (peak_pred - m["peak"]) / m["peak"],
        "step_error": (peak_pred - held - (m["peak"] - m["held_before"]))
        / (m["peak"] - m["held_before"]),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | params | opt | precision | ckpt | batch x seq | weights: measured / "
        "predicted MiB | held before the step: measured / predicted MiB | peak: measured / "
        "predicted MiB | peak phase (predicted) | error (peak) | error (step, above held) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['params'] / 1e6:.2f} M | {r['opt']} | {r['precision']} | "
            f"{'on' if r['ckpt'] else 'off'} | {r['B']} x {r['S']} | "
            f"{_mib(r['weights_measured'])} / {_mib(r['weights_predicted'])} | "
            f"{_mib(r['held_measured'])} / {_mib(r['held_predicted'])} | "
            f"{_mib(r['peak_measured'])} / {_mib(r['peak_predicted'])} | {r['phase']} | "
            f"{r['error']:+.1%} | {r['step_error']:+.1%} |"
        )
    errors = [abs(r["error"]) for r in rows]
    steps = [abs(r["step_error"]) for r in rows]
    lines.append("")
    lines.append(
        f"|error| of the peak: median {statistics.median(errors):.1%}, max {max(errors):.1%}; "
        f"of the step above held memory: median {statistics.median(steps):.1%}, "
        f"max {max(steps):.1%} ({len(rows)} configurations)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help="measure one configuration (JSON) and print JSON")
    parser.add_argument("--quick", action="store_true", help="the 2M model, batch 1 and 4")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--formula", action="store_true", help="only the activation formula vs saved bytes"
    )
    parser.add_argument(
        "--rows",
        type=Path,
        help="re-predict the measurements of an earlier --json, measure nothing",
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(json.loads(args.one))))
        return
    if args.formula:
        print(formula_table())
        return
    if args.rows:
        old = json.loads(args.rows.read_text())
        rows = [
            row(
                {k: r[k] for k in (*SIZES["2M"], "size", "opt", "ckpt", "B", "S", "precision")},
                {
                    "params": r["params"],
                    "weights": r["weights_measured"],
                    "held_before": r["held_measured"],
                    "peak": r["peak_measured"],
                },
            )
            for r in old
        ]
        print(table(rows))
        return
    print(formula_table())
    print()
    rows = []
    for c in configs(args.quick):
        rows.append(row(c, run_one(c)))
        print(f"measured {len(rows)}: {rows[-1]['error']:+.1%}", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
