"""The CLI starts without torch: ``import accelscope.cli`` (which registers every command) and
the commands that need no model (``--help``, ``runs``, ``plan``, ``compare``, ``doctor
--trace``) leave torch unimported; the help and the runs list import neither numpy nor the llm
package either. Each case runs in a fresh interpreter, the way ``accelscope`` starts.

Covers: accelscope.cli, accelscope.cli._app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelscope.store.sqlite import ResultStore

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numpy", "accelscope.llm")
"""What the CLI's start must not import: torch (seconds, hundreds of MB), and what most of
the rest of its start went to (a command that computes may import numpy)."""
START = set(HEAVY)
COMPUTES = {"torch"}

_RUN = """
import json, sys
from accelscope.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "imported": [m for m in HEAVY if m in sys.modules]}))
"""


def _imported_by(args: list[str] | None, cwd: Path) -> tuple[object, list[str]]:
    """Run ``accelscope ARGS`` (``None``: only ``import accelscope.cli``) in a fresh
    interpreter; its exit code and which of :data:`HEAVY` it imported."""
    program = f"HEAVY = {HEAVY!r}\n" + (
        _RUN
        if args is not None
        else "import sys, json\nimport accelscope.cli\n"
        "print(json.dumps({'code': 0, 'imported': [m for m in HEAVY if m in sys.modules]}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, json.dumps(args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert last.startswith("{"), done.stdout + done.stderr
    report = json.loads(last)
    return report["code"], report["imported"]


def _trace(path: Path) -> Path:
    """A small torch.profiler trace: three steps of a kernel each."""
    gpu, host = 1, 2
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": gpu, "args": {"name": "GPU 0"}}
    ]
    for step in range(3):
        t0 = 1_000_000.0 + step * 10_000.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "ts": t0,
                "dur": 10_000.0,
                "pid": host,
                "tid": host,
            }
        )
        launch = {"device": 0, "stream": 7, "correlation": step + 1}
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": t0 + 5,
                "dur": 4,
                "pid": host,
                "tid": host,
                "args": {"correlation": step + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void gemm",
                "ts": t0 + 10,
                "dur": 9_000.0,
                "pid": gpu,
                "tid": 7,
                "args": launch,
            }
        )
    document = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9}],
        "traceEvents": events,
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_importing_the_cli_imports_no_torch(tmp_path: Path) -> None:
    code, imported = _imported_by(None, tmp_path)
    assert (code, imported) == (0, [])


PLAN_API = [
    "plan",
    "api",
    "--tokens-per-month",
    "2B",
    "--input-price",
    "0.5",
    "--output-price",
    "1.5",
    "--instance",
    "g6.xlarge",
    "--throughput",
    "800",
]


@pytest.mark.parametrize(
    ("args", "absent"),
    [
        (["--help"], START),
        (["bench", "--help"], START),
        (["llm", "--help"], START),
        (["compare", "--help"], START),
        (["plan", "--help"], START),
        (["runs", "list", "--store", "{store}"], START),
        (["runs", "list", "--store", "{store}", "--json"], START),
        (PLAN_API, COMPUTES),
        (["plan", "memory", "{config}", "--context", "32k"], COMPUTES),
        (["doctor", "--trace", "{trace}"], COMPUTES),
        (["doctor", "--trace", "{trace}", "--json"], COMPUTES),
    ],
    ids=lambda x: " ".join(a for a in x if "{" not in a)[:40] if isinstance(x, list) else "",
)
def test_commands_that_need_no_model_start_without_torch(
    args: list[str], absent: set[str], tmp_path: Path
) -> None:
    store = tmp_path / "results.db"
    ResultStore(store).close()
    values = {
        "{store}": str(store),
        "{trace}": str(_trace(tmp_path / "trace.json")),
        "{config}": str(REPO / "examples" / "plan" / "llama-3.1-8b-config.json"),
    }
    code, imported = _imported_by([values.get(a, a) for a in args], tmp_path)
    assert code == 0
    assert not absent & set(imported), f"accelscope {' '.join(args)} imported {imported}"
