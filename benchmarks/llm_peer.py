"""GuideLLM 0.8.1 as a peer of ``accelscope llm``: run it, parse its JSON, say what it measures.

:func:`run_guidellm` runs ``guidellm run`` (from its own virtual environment; it is never
imported here) against an OpenAI-compatible server's streaming ``/v1/completions`` at a fixed
open-loop rate, for a fixed number of requests of synthetic prompts, and returns its medians in
seconds beside how GuideLLM defines them (:data:`DEFINITIONS`, read from its source).

What GuideLLM 0.8.1 does, from its source and from runs against
:class:`accelscope.testing.llm_server.FakeLLMServer` and ``transformers serve``:

- Options are typed registries, each a JSON object (or ``key=value,...``): ``--backend
  {"kind": "openai_http", "target": URL, "model": NAME, "request_format": "/v1/completions"}``
  (the default format is chat), ``--profile {"kind": "poisson"|"constant", "rate": R}``,
  ``--constraint {"kind": "max_requests", "count": N}``, ``--tokenizer {"kind":
  "huggingface_auto", "model": DIR}`` (else the served model name is loaded as a tokenizer),
  ``--data {"kind": "synthetic_text", "prompt_tokens": P, "output_tokens": O}``, ``--output
  {"kind": "json", "path": FILE}`` (replaces the default JSON and CSV outputs in the working
  directory). Without a model it asks ``GET /v1/models``; it checks ``GET /health`` first.
- Each streamed completion asks ``max_tokens = O``, ``ignore_eos: true`` and ``stream_options:
  {"include_usage": true, "continuous_usage_stats": true}``; ``stop: null`` is dropped. Output
  tokens are ``usage.completion_tokens`` when the server sends usage, else the number of
  chunks that carried text.
- ``transformers serve`` (5.x) refuses every such request: ``422 {"detail": "Unexpected
  fields in the request: {'ignore_eos'}"}`` (GuideLLM records only ``HTTPStatusError(... 422
  Unprocessable Entity ...)`` and still exits 0). ``send_ignore_eos=False`` sets the backend's
  documented ``extras`` to ``{"body": {"ignore_eos": null}}``: GuideLLM drops ``None`` fields
  from the body, so the field is not sent (the rest, ``continuous_usage_stats`` included, is
  accepted). Only for servers that stop at ``max_tokens`` anyway, as the tiny test model does.
- Synthetic prompts are Faker text cut to P tokens of the local tokenizer and *decoded* (special
  tokens skipped); the server re-tokenizes that text, so its prompt count can differ from P
  (a tokenizer that maps characters to ``<unk>``, like the tiny test model's, loses them: 21-27
  tokens for P = 32). ``prompt_tokens_median`` is what the server reported.
- It starts ``GUIDELLM__MAX_WORKER_PROCESSES`` (default 10) spawned worker processes; on a
  small machine ``worker_processes=2`` saves a third of a ~30-50 s run. Environment variables
  ``GUIDELLM__*`` and a ``.env`` file in the working directory configure it, so the run is given
  a clean environment and ``out_dir`` as its working directory.
- Its ``poisson`` profile does not pace requests in 0.8.1: the arrival targets start from the
  initial value (-1.0) of the offset the workers share, not from the benchmark's start time (a
  Unix time), so every request is overdue and leaves at once: 20 requests "at 2 req/s" left
  within 0.15 s (its targeted_start values read -0.49, 0.02, 0.03, ... 6.1). Its ``constant``
  profile paces them (0.50 s apart, the first 1/rate after the start; sent 3-23 ms after
  target). So ``arrivals="constant"`` is the default, and ``sent_rate_per_s`` (from the
  requests' send times) shows what was really offered.
- In 1 run of about 10, the last request's completion never reached the report (19 of 20
  completed, none errored or incomplete; the server had answered all 20): compare
  ``requests_completed`` with ``requests`` before trusting a run.

Run this file to check GuideLLM against the fake server's script::

    .venv/bin/python benchmarks/llm_peer.py [--guidellm /tmp/peer/bin/guidellm]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

__all__ = ["DEFINITIONS", "TOOL", "run_guidellm"]

TOOL = "guidellm 0.8.1"
DEFAULT_GUIDELLM = Path("/tmp/peer/bin/guidellm")
TAIL_CHARS = 4000

DEFINITIONS: dict[str, str] = {
    "clock": (
        "time.time() (wall clock) in the worker process. request_start: when httpx starts "
        "writing the request headers (trace hook 'send_request_headers.started'), so TCP "
        "connect time is excluded; a token iteration: when an SSE 'data:' line whose "
        "choices[0].text is non-empty has been read (empty-text, usage-only and [DONE] lines "
        "are not token iterations)."
    ),
    "ttft": (
        "time_to_first_token_ms = first_token_iteration - request_start: until the first "
        "chunk carrying text is read."
    ),
    "tpot": (
        "time_per_output_token_ms = (last_token_iteration - request_start) / output_tokens: "
        "it INCLUDES the first token (the TTFT is spread over all output tokens), unlike "
        "vLLM's TPOT. output_tokens = usage.completion_tokens when the server reports usage, "
        "else the number of text chunks."
    ),
    "itl": (
        "inter_token_latency_ms = (last_token_iteration - first_token_iteration) / "
        "(output_tokens - 1): the first token excluded (this is vLLM's TPOT); a per-request "
        "mean, not the gaps between chunks."
    ),
    "e2e": (
        "request_latency = request_end - request_start, request_end taken after the stream "
        "ends ([DONE] or end of body), so it includes the final and usage chunks."
    ),
    "aggregation": (
        "One value per request; the median is the first value whose cumulative weight reaches "
        "1/2 (numpy searchsorted on the CDF; no interpolation: the lower middle of an even "
        "count). TTFT and e2e weigh requests equally; TPOT weighs each request by its "
        "output_tokens and ITL by output_tokens - 1 (token-weighted). Only successful "
        "requests; TTFT/ITL keep requests whose first token falls inside the benchmark window "
        "(all of them without warmup or cooldown)."
    ),
}


def _tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no output)"


def _median(metrics: dict[str, Any], name: str, scale: float) -> float | None:
    summary = metrics.get(name, {}).get("successful")
    if not summary or not summary.get("count"):
        return None
    return float(summary["median"]) * scale


def run_guidellm(
    guidellm: Path,
    *,
    url: str,
    model: str,
    tokenizer_dir: Path,
    rate_per_s: float,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    out_dir: Path,
    timeout_s: float = 600,
    arrivals: Literal["constant", "poisson"] = "constant",
    send_ignore_eos: bool = True,
    worker_processes: int | None = None,
) -> dict[str, Any]:
    """Run ``guidellm run`` against ``url`` and return its medians (seconds) and definitions.

    ``arrivals``: GuideLLM's open-loop profile at ``rate_per_s``: ``"constant"`` (evenly
    spaced, the first at start + 1/rate) or ``"poisson"`` (exponential gaps, seed 42: what
    ``accelscope llm --rate`` offers at burstiness 1, but GuideLLM 0.8.1 sends them all at
    once, see the module; check ``sent_rate_per_s``). ``send_ignore_eos=False``
    keeps ``ignore_eos`` out of the requests (for ``transformers serve``, which refuses it).
    ``worker_processes`` sets ``GUIDELLM__MAX_WORKER_PROCESSES`` (``None``: its default, 10).
    The JSON report and the console output go to ``out_dir`` (``guidellm.json``,
    ``guidellm.log``). :class:`RuntimeError` (with the output's tail and the first request
    errors) when GuideLLM fails, times out, writes no report, or completes no request.
    """
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path = out_dir / "guidellm.json"
    log_path = out_dir / "guidellm.log"
    raw_path.unlink(missing_ok=True)

    backend: dict[str, Any] = {
        "kind": "openai_http",
        "target": url,
        "model": model,
        "request_format": "/v1/completions",
        "stream": True,
    }
    if not send_ignore_eos:
        backend["extras"] = {"body": {"ignore_eos": None}}
    options: list[tuple[str, dict[str, Any]]] = [
        ("--backend", backend),
        ("--profile", {"kind": arrivals, "rate": rate_per_s}),
        ("--constraint", {"kind": "max_requests", "count": requests}),
        ("--tokenizer", {"kind": "huggingface_auto", "model": str(Path(tokenizer_dir).resolve())}),
        (
            "--data",
            {
                "kind": "synthetic_text",
                "prompt_tokens": prompt_tokens,
                "output_tokens": output_tokens,
            },
        ),
        ("--output", {"kind": "json", "path": str(raw_path)}),
    ]
    command = [str(guidellm), "run"]
    for flag, value in options:
        command += [flag, json.dumps(value, separators=(",", ":"))]
    command.append("--disable-console-interactive")

    env = {key: value for key, value in os.environ.items() if not key.startswith("GUIDELLM__")}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env |= {"TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1", "COLUMNS": "200"}
    if worker_processes is not None:
        env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(worker_processes)

    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=out_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its worker processes share its group: stop them all
        )
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RuntimeError(
                f"guidellm did not finish within {timeout_s:g} s; output tail:\n{_tail(log_path)}"
            ) from None
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    if code != 0 or not raw_path.is_file():
        raise RuntimeError(
            f"guidellm exited with code {code}"
            + ("" if raw_path.is_file() else f", no report at {raw_path}")
            + f"; output tail:\n{_tail(log_path)}"
        )

    report = json.loads(raw_path.read_text())
    benchmark = report["benchmarks"][0]
    metrics = benchmark["metrics"]
    totals = metrics["request_totals"]
    errors = sorted(
        {
            str(item["info"].get("error"))
            for item in benchmark.get("requests", {}).get("errored", [])
            if item.get("info", {}).get("error")
        }
    )[:3]
    starts = sorted(
        item["info"]["timings"]["request_start"]
        for group in ("successful", "errored", "incomplete")
        for item in benchmark.get("requests", {}).get(group, [])
        if item.get("info", {}).get("timings", {}).get("request_start") is not None
    )
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    sent_rate = (len(starts) - 1) / span if span > 0 else None
    if not totals.get("successful"):
        raise RuntimeError(
            f"guidellm completed no request ({totals}); request errors: {errors}; "
            f"output tail:\n{_tail(log_path)}"
        )
    return {
        "tool": TOOL,
        "command": command,
        "arrivals": arrivals,
        "sent_rate_per_s": sent_rate,
        "ttft_median_s": _median(metrics, "time_to_first_token_ms", 1e-3),
        "tpot_median_s": _median(metrics, "time_per_output_token_ms", 1e-3),
        "itl_median_s": _median(metrics, "inter_token_latency_ms", 1e-3),
        "e2e_median_s": _median(metrics, "request_latency", 1.0),
        "prompt_tokens_median": _median(metrics, "prompt_token_count", 1.0),
        "output_tokens_median": _median(metrics, "output_token_count", 1.0),
        "requests_completed": int(totals.get("successful", 0)),
        "requests_errored": int(totals.get("errored", 0)),
        "requests_incomplete": int(totals.get("incomplete", 0)),
        "requests_created": int(benchmark["scheduler_state"].get("created_requests", 0)),
        "errors": errors,
        "definitions": dict(DEFINITIONS),
        "raw_path": str(raw_path),
    }


def _check_against_fake(guidellm: Path, *, worker_processes: int | None) -> None:
    """GuideLLM on the scripted fake server (TTFT 100 ms, ITL 20 ms, 16 tokens, 2 req/s)."""
    from accelscope.testing.llm_model import build_tiny_llama
    from accelscope.testing.llm_server import FakeLLMServer

    ttft, itl, tokens, rate, count = 0.1, 0.02, 16, 2.0, 20
    with tempfile.TemporaryDirectory(prefix="llm-peer-") as scratch:
        tokenizer = build_tiny_llama(Path(scratch) / "model")
        with FakeLLMServer(ttft_s=ttft, itl_s=itl, model="fake-model") as server:
            result = run_guidellm(
                guidellm,
                url=server.url,
                model=server.model,
                tokenizer_dir=tokenizer,
                rate_per_s=rate,
                requests=count,
                prompt_tokens=32,
                output_tokens=tokens,
                out_dir=Path(scratch) / "out",
                worker_processes=worker_processes,
            )
            sent = [r for r in server.requests if r.method == "POST" and r.sent_s]
        # what the server really did (its chunks can leave a little late on a busy machine)
        seen = {
            "ttft": statistics.median(r.sent_s[0] - r.received_s for r in sent),
            "itl": statistics.median(
                (r.sent_s[-1] - r.sent_s[0]) / (len(r.sent_s) - 1) for r in sent
            ),
            "tpot": statistics.median((r.sent_s[-1] - r.received_s) / len(r.sent_s) for r in sent),
            "e2e": statistics.median(r.sent_s[-1] - r.received_s for r in sent),
        }
        script = {
            "ttft": ttft,
            "itl": itl,
            "tpot": (ttft + (tokens - 1) * itl) / tokens,  # GuideLLM's TPOT counts the first
            "e2e": ttft + (tokens - 1) * itl,
        }
        print(" ".join(result["command"]))
        print(
            f"requests: {len(sent)} served, {result['requests_completed']} completed, "
            f"{result['requests_errored']} errored ({result['arrivals']} at {rate:g} req/s, "
            f"sent at {result['sent_rate_per_s'] or float('nan'):.2f} req/s)"
        )
        print(f"{'median (ms)':<12}{'guidellm':>10}{'script':>10}{'server':>10}")
        for name in ("ttft", "tpot", "itl", "e2e"):
            value = result[f"{name}_median_s"]
            shown = "-" if value is None else f"{value * 1e3:.2f}"
            print(f"{name:<12}{shown:>10}{script[name] * 1e3:>10.2f}{seen[name] * 1e3:>10.2f}")


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and check GuideLLM against the fake server."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--guidellm", type=Path, default=DEFAULT_GUIDELLM)
    parser.add_argument("--workers", type=int, default=2, help="GuideLLM worker processes")
    args = parser.parse_args(argv)
    if not args.guidellm.is_file():
        sys.exit(f"{args.guidellm} not found (GuideLLM 0.8.1 in its own virtual environment)")
    _check_against_fake(args.guidellm, worker_processes=args.workers)


if __name__ == "__main__":
    main()
