"""``accelscope llm``: a token-level benchmark of LLM serving.

One harness, three kinds of system under test (:class:`~accelscope.llm.records.Target`): any
OpenAI-compatible streaming endpoint (:class:`OpenAIEndpoint`: vLLM, SGLang, TGI, llama.cpp,
``transformers serve``), a Hugging Face model in this process (:class:`InProcessModel`, static
or continuous batching) and, for tests, the scripted fake server of
:mod:`accelscope.testing.llm_server`.

A workload (:mod:`~accelscope.llm.workload`: Poisson/gamma arrivals or a fixed concurrency,
input/output lengths, synthetic or JSONL prompts, prefix-cache scenarios) is sent by
:func:`run_trial`; :func:`summarise_trial` turns the per-request records into TTFT, TPOT, ITL
and E2E from the scheduled arrival, throughput, goodput under an :class:`Slo` and LoadGen tail
claims, each with its definition; :func:`search_capacity` finds the highest load that meets
the SLO; :func:`decode_floor` sets the measured TPOT against the memory-bandwidth floor; and
:class:`ServerMetricsScraper` reads the server's ``/metrics`` around each trial.
"""

from accelscope.llm.capacity import CapacityResult, TrialPoint, search_capacity, trial_passes
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.floor import decode_floor, decoding_batch, read_bytes_per_step
from accelscope.llm.inprocess import InProcessModel
from accelscope.llm.records import LlmRequest, RequestRecord, Target
from accelscope.llm.server_metrics import ServerMetricsScraper, parse_exposition
from accelscope.llm.summary import DEFINITIONS, Slo, steady_samples, summarise_trial
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import (
    Arrivals,
    Lengths,
    PrefixScenario,
    Workload,
    build_requests,
    read_prompts,
)

__all__ = [
    "DEFINITIONS",
    "Arrivals",
    "CapacityResult",
    "InProcessModel",
    "Lengths",
    "LlmRequest",
    "OpenAIEndpoint",
    "PrefixScenario",
    "RequestRecord",
    "ServerMetricsScraper",
    "Slo",
    "Target",
    "TrialInterrupted",
    "TrialPoint",
    "TrialRecords",
    "Workload",
    "build_requests",
    "decode_floor",
    "decoding_batch",
    "parse_exposition",
    "read_bytes_per_step",
    "read_prompts",
    "run_trial",
    "search_capacity",
    "steady_samples",
    "summarise_trial",
    "trial_passes",
]
