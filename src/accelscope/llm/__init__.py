"""``accelscope llm``: a token-level benchmark of LLM serving.

One harness (:class:`Harness`), three kinds of system under test
(:class:`~accelscope.llm.records.Target`): any OpenAI-compatible streaming endpoint
(:class:`OpenAIEndpoint`: vLLM, SGLang, TGI, llama.cpp, ``transformers serve``), a Hugging Face
model in this process (:class:`InProcessModel`, static or continuous batching) and, for tests,
the scripted fake server of :mod:`accelscope.testing.fake_llm_server`.

A workload (:data:`WORKLOADS`: synthetic single-turn requests with prefix scenarios, synthetic
multi-turn sessions, ShareGPT conversations, a Mooncake trace, agent trajectories) becomes
sessions of one or more turns that :func:`run_trial` sends open loop (a rate, a trace's
timestamps) or closed loop (a concurrency); :func:`summarise_trial` turns the records into
TTFT, TPOT, ITL and E2E from the
scheduled arrival, throughput, goodput under an :class:`Slo`, LoadGen tail claims and per-turn
TTFT, each with its definition; :class:`ServerMetricsScraper` reads the server's ``/metrics``
(a timeline, and the configuration it publishes) around each trial; :func:`slo_breaks` sets
the moment an SLO term broke against the server's state; :func:`search_capacity` finds the
highest load that meets the SLO; :func:`decode_floor` sets the measured TPOT against the
memory-bandwidth floor. The documents (:mod:`accelscope.llm.documents`) are typed.
"""

from accelscope.llm.agentic import AgenticWorkload, read_trajectories
from accelscope.llm.capacity import CapacityResult, TrialPoint, search_capacity, trial_passes
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.conversations import ConversationWorkload, read_conversations
from accelscope.llm.documents import Arrivals, LlmRun, LlmTrial, RequestRecord, Slo
from accelscope.llm.floor import decode_floor, decoding_batch, read_bytes_per_step
from accelscope.llm.harness import Harness
from accelscope.llm.inprocess import InProcessModel
from accelscope.llm.metrics_scraper import ServerMetricsScraper
from accelscope.llm.prometheus_text import parse_exposition
from accelscope.llm.records import LlmRequest, Target
from accelscope.llm.summary import DEFINITIONS, steady_samples, summarise_trial
from accelscope.llm.timeline import slo_breaks
from accelscope.llm.trace import TraceWorkload, read_trace
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import (
    WORKLOADS,
    Lengths,
    PrefixScenario,
    Session,
    SessionWorkload,
    ThinkTime,
    Workload,
    build_requests,
    read_prompts,
)

__all__ = [
    "DEFINITIONS",
    "WORKLOADS",
    "AgenticWorkload",
    "Arrivals",
    "CapacityResult",
    "ConversationWorkload",
    "Harness",
    "InProcessModel",
    "Lengths",
    "LlmRequest",
    "LlmRun",
    "LlmTrial",
    "OpenAIEndpoint",
    "PrefixScenario",
    "RequestRecord",
    "ServerMetricsScraper",
    "Session",
    "SessionWorkload",
    "Slo",
    "Target",
    "ThinkTime",
    "TraceWorkload",
    "TrialInterrupted",
    "TrialPoint",
    "TrialRecords",
    "Workload",
    "build_requests",
    "decode_floor",
    "decoding_batch",
    "parse_exposition",
    "read_bytes_per_step",
    "read_conversations",
    "read_prompts",
    "read_trace",
    "read_trajectories",
    "run_trial",
    "search_capacity",
    "slo_breaks",
    "steady_samples",
    "summarise_trial",
    "trial_passes",
]
