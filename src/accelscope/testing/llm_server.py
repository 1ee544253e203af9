"""``python -m accelscope.testing.llm_server``: the scripted fake LLM server from a command line
(``tune``'s ``--server-command`` tests, and ``llm conformance``, which hosts every case in one such
process and reads what each served from ``--stamps-dir``).

The servers themselves live by concept: the fake in :mod:`accelscope.testing.fake_llm_server`, the
real ``transformers serve`` and vLLM in :mod:`accelscope.testing.real_llm_servers`. Their names are
re-exported here for code written against this module before the split."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from accelscope.files import write_atomic
from accelscope.llm.conformance.script import read_hosted_cases, stamps_json
from accelscope.testing.fake_llm_server import (
    KV_CACHE_TOKENS,
    FakeLLMServer,
    ReceivedRequest,
    StreamShape,
)
from accelscope.testing.real_llm_servers import CB_NUM_BLOCKS, TransformersServe, VllmServe

__all__ = [
    "CB_NUM_BLOCKS",
    "KV_CACHE_TOKENS",
    "FakeLLMServer",
    "ReceivedRequest",
    "StreamShape",
    "TransformersServe",
    "VllmServe",
    "main",
]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m accelscope.testing.llm_server --port P [...]``: serve a scripted fake on
    ``127.0.0.1:P`` until SIGTERM or SIGINT (a server a command line can start: ``tune``'s
    ``--server-command`` tests)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m accelscope.testing.llm_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--max-running", type=int, default=None)
    parser.add_argument("--corrupt-every", type=int, default=0)
    parser.add_argument("--fault", default="", help="a fault of FakeLLMServer, or none")
    parser.add_argument("--startup-s", type=float, default=0.0)
    parser.add_argument("--ignore-term", action="store_true", help="survive SIGTERM")
    parser.add_argument(
        "--cases",
        type=Path,
        default=None,
        help="a JSON list of conformance cases (name, port, script), each served on its port "
        "beside the one above (their scripts replace its timing options)",
    )
    parser.add_argument(
        "--stamps-dir",
        type=Path,
        default=None,
        help="on the way out, write what each case served to NAME.json here",
    )
    args = parser.parse_args(argv)
    if args.max_running is not None and args.max_running < 1:
        parser.error("--max-running must be at least 1")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait(args.startup_s)  # a slow start (a stop still ends it)
    server = FakeLLMServer(
        model=args.model,
        ttft_s=args.ttft_ms / 1000.0,
        itl_s=args.itl_ms / 1000.0,
        max_running=args.max_running,
        corrupt_every=args.corrupt_every,
        fault="" if args.fault == "none" else args.fault,
        port=args.port,
    )
    # one process hosts every case (an accelscope import costs seconds; a case's server, a
    # thread): each case's own server, on its own port, with its own stamps
    hosted = read_hosted_cases(args.cases.read_bytes()) if args.cases else []
    cases = {
        case.name: FakeLLMServer(model=args.model, port=case.port, **case.script.model_dump())
        for case in hosted
    }
    with contextlib.ExitStack() as running:
        for case_server in cases.values():
            running.enter_context(case_server)
        try:
            with server:
                print(f"fake LLM server on {server.url}", flush=True)
                while not stop.wait(0.1):
                    if server.closed:  # die-after: the process ends, as a crashed server's would
                        print("the fake server died (scripted)", flush=True)
                        sys.exit(1)
        finally:
            for name, case_server in cases.items():
                if args.stamps_dir is not None:
                    write_atomic(
                        args.stamps_dir / f"{name}.json", stamps_json(case_server.served())
                    )


if __name__ == "__main__":
    main()
