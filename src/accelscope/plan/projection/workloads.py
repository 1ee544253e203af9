"""The published benchmarks, the workload class each belongs to, and the work of one sample.

A projection learns efficiency per benchmark and scenario, and reports it per workload class:
``conv`` (ResNet-50), ``detector`` (RetinaNet), ``encoder`` (BERT-large), ``llm`` (Llama-2-70B,
Mixtral-8x7B, Llama-3.1-405B, GPT-J) and ``diffusion`` (Stable Diffusion XL). The ``-99`` and
``-99.9`` accuracy targets of one benchmark are one workload (in most rounds they are the same
run, submitted twice).

``ops_per_sample`` is the work of one sample where it is defined here, so efficiency can be
stated as a share of peak: ResNet-50's is counted by accelscope's own operator counter on the
zoo model (``tests/plan/projection/test_workloads.py`` recounts it); BERT-large's follows from its
architecture at MLPerf's 384-token sequence. Elsewhere it is ``None`` and efficiency is learned
as throughput per unit of peak: the unknown constant is the benchmark's own and cancels in
every projection of that benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelscope.errors import BadInputError

__all__ = ["BENCHMARKS", "WORKLOAD_CLASSES", "Benchmark", "WorkloadClass", "benchmark"]

WorkloadClass = Literal["conv", "detector", "encoder", "llm", "diffusion"]
WORKLOAD_CLASSES: tuple[WorkloadClass, ...] = ("conv", "detector", "encoder", "llm", "diffusion")

_BERT_LAYERS, _BERT_HIDDEN, _BERT_FFN, _BERT_SEQ = 24, 1024, 4096, 384


def _encoder_ops(layers: int, hidden: int, ffn: int, seq: int) -> float:
    """Multiply-add ops (2 per MAC) of one sequence through a transformer encoder: the four
    attention projections and the two feed-forward matmuls per token, plus QK^T and AV."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * ffn)
    attention = 2 * 2 * seq * seq * hidden
    return float(layers * (per_token * seq + attention))


@dataclass(frozen=True)
class Benchmark:
    """A published benchmark: its name, class, the unit of its figure and a sample's work."""

    name: str
    workload_class: WorkloadClass
    unit: str
    ops_per_sample: float | None
    ops_source: str


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "resnet50",
            "conv",
            "images",
            8.24e9,
            "accelscope's operator counter (roofline/counting.py) on the zoo resnet50 at "
            "224x224, batch 1: every aten op's FLOPs",
        ),
        Benchmark("retinanet", "detector", "images", None, "not counted here"),
        Benchmark(
            "bert",
            "encoder",
            "sequences",
            _encoder_ops(_BERT_LAYERS, _BERT_HIDDEN, _BERT_FFN, _BERT_SEQ),
            "BERT-large (24 layers, hidden 1024, feed-forward 4096; Devlin et al. 2019, "
            "Table 1) at MLPerf's 384-token sequence, matmul MACs x2",
        ),
        Benchmark("llama2-70b", "llm", "tokens", None, "not counted here"),
        Benchmark("mixtral-8x7b", "llm", "tokens", None, "not counted here"),
        Benchmark("llama3.1-405b", "llm", "tokens", None, "not counted here"),
        Benchmark("gptj", "llm", "samples", None, "not counted here"),
        Benchmark("stable-diffusion-xl", "diffusion", "images", None, "not counted here"),
    )
}

_ALIASES = {
    "resnet50": "resnet50",
    "retinanet": "retinanet",
    "bert-99": "bert",
    "bert-99.9": "bert",
    "llama2-70b-99": "llama2-70b",
    "llama2-70b-99.9": "llama2-70b",
    "mixtral-8x7b": "mixtral-8x7b",
    "llama3_1-405b": "llama3.1-405b",
    "llama3.1-405b": "llama3.1-405b",  # v5.1 renamed the directory (most submitters)
    "gptj-99": "gptj",
    "gptj-99.9": "gptj",
    "stable-diffusion-xl": "stable-diffusion-xl",
}


def benchmark(directory: str) -> Benchmark:
    """The benchmark a results directory name (``llama2-70b-99.9``, ``bert-99``) stands for."""
    name = _ALIASES.get(directory)
    if name is None:
        raise BadInputError(
            f"unknown published benchmark {directory!r} (known: {', '.join(sorted(_ALIASES))})"
        )
    return BENCHMARKS[name]
