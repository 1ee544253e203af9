"""The CPU each LLM benchmark client spends per streamed request: accelscope's and every peer
installed (``vllm bench serve`` from ``.venv-vllm``; GuideLLM, AIPerf, inference-perf from
``make peers``), against the same scripted server (the conformance suite's, in its own process:
its CPU is not the client's), at one open-loop rate.

Each client runs the same 64-token stream (``--api``, chat by default; GuideLLM 0.8.1 fails
on completions here: "Cannot compile GenerativeMetrics: No measurement start or end times
available"), 10 ms between tokens, at ``--rate`` requests a second, twice: ``--small`` and
``--large`` requests. A peer is a subprocess (its CPU: this process's ``RUSAGE_CHILDREN``, every
process it waited for included); accelscope runs in this process, through the conformance
suite's harness (``RUSAGE_SELF``). The difference of the two sizes over the difference of their
requests is the CPU per request, the fixed costs (imports, start-up, a peer's report)
cancelling. Clients alternate within each round; the figure is the median over rounds. A peer
sends its requests on its own schedule (a Poisson one for most): the rate is the same, the
arrivals are not.

    .venv/bin/python benchmarks/llm_peer_cpu.py --rounds 3 \\
        --out benchmarks/results/llm_peer_cpu.json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelscope.llm.conformance.cases import Case
from accelscope.llm.conformance.clients import CLIENTS, Endpoint
from accelscope.llm.conformance.script import HostedCase, StreamScript, hosted_cases_json
from accelscope.llm.conformance.suite import MODEL, SERVER_MODULE
from accelscope.llm.conformance.tokenizer import write_word_tokenizer
from accelscope.llm.server_process import ServerProcess
from accelscope.processes import free_port


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0, help="requests a second")
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1400)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--clients", default="", help="names, comma-separated (default: all)")
    parser.add_argument("--api", choices=("completions", "chat"), default="chat")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    wanted = [c for c in args.clients.split(",") if c] or list(CLIENTS)
    clients = [CLIENTS[name] for name in wanted]
    ran = [c for c in clients if c.unavailable() is None]
    for client in clients:
        if client not in ran:
            print(f"{client.name}: {client.unavailable()}", file=sys.stderr)
    script = StreamScript(ttft_s=0.01, itl_s=args.itl_ms / 1e3, output_tokens=args.tokens)

    def case(requests: int) -> Case:
        return Case(
            name="cpu",
            about="the client's CPU per request",
            script=script,
            figures=(),
            api=args.api,
            requests=requests,
            input_tokens=16,
            max_tokens=args.tokens,
            rate_per_s=args.rate,
            client_threads=256,
        )

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llm-peer-cpu-") as scratch:
        workdir = Path(scratch)
        tokenizer_dir = write_word_tokenizer(workdir / "tokenizer")
        hosted = HostedCase(name="cpu", port=free_port(), script=script)
        (workdir / "cases.json").write_bytes(hosted_cases_json([hosted]))
        (workdir / "stamps").mkdir()
        command = [sys.executable, "-m", SERVER_MODULE, "--port", "{port}", "--model", MODEL]
        command += ["--cases", str(workdir / "cases.json")]
        command += ["--stamps-dir", str(workdir / "stamps")]
        with ServerProcess(command, name="scripted LLM server", startup_timeout_s=120.0):
            for client in ran:  # in-process, accelscope's first run pays its imports: not kept
                if client.name == "accelscope":
                    (workdir / "warm-up").mkdir()
                    warm_up = Endpoint(
                        url=f"http://127.0.0.1:{hosted.port}",
                        model=MODEL,
                        tokenizer_dir=tokenizer_dir,
                        workdir=workdir / "warm-up",
                    )
                    client.run(case(args.small), warm_up)
            for number in range(args.rounds):
                order = ran if number % 2 == 0 else list(reversed(ran))
                for client in order:
                    cpu: dict[int, float] = {}
                    errors: dict[int, str] = {}
                    for size in (args.small, args.large):
                        place = workdir / f"{client.name}-{number}-{size}"
                        place.mkdir()
                        endpoint = Endpoint(
                            url=f"http://127.0.0.1:{hosted.port}",
                            model=MODEL,
                            tokenizer_dir=tokenizer_dir,
                            workdir=place,
                        )
                        who = (
                            resource.RUSAGE_SELF
                            if client.name == "accelscope"
                            else resource.RUSAGE_CHILDREN
                        )
                        before = _cpu_s(who)
                        run = client.run(case(size), endpoint)
                        cpu[size] = _cpu_s(who) - before
                        errors[size] = run.error
                    row = {
                        "round": number,
                        "client": client.name,
                        "cpu_s": cpu,
                        "errors": errors,
                        "cpu_ms_per_request": (cpu[args.large] - cpu[args.small])
                        / (args.large - args.small)
                        * 1e3,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    medians = {
        client.name: statistics.median(
            r["cpu_ms_per_request"] for r in rows if r["client"] == client.name
        )
        for client in ran
    }
    print(json.dumps(medians, indent=2))
    if args.out:
        found = {"args": vars(args), "rows": rows, "medians_ms_per_request": medians}
        args.out.write_text(json.dumps(found, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
