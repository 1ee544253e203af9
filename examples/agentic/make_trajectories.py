"""Write ``trajectories.jsonl``: 24 coding-agent sessions in the trajectory format of
``accelscope.llm.agentic`` (OpenAI chat messages, one session per line, ``latency_s`` on each
tool result), generated from a fixed seed so the file is the same on every machine.

Every session opens with the same system prompt (a prefix a server's cache can share across
sessions), then a task; the agent reads files, searches and runs tests (1 to 3 tool calls a
turn, each with a recorded latency), and ends with a summary. Contexts grow turn by turn.

    python examples/agentic/make_trajectories.py            # rewrites trajectories.jsonl
    python examples/agentic/make_trajectories.py --check    # fails when the file differs
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 42
SESSIONS = 24
HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "trajectories.jsonl"

_WORDS_TEXT = (
    "function module test error value return import class config path file line buffer "
    "request response server client cache token batch queue thread lock timeout retry "
    "parse check build run fix patch diff branch commit log trace stack frame index"
)
WORDS = tuple(_WORDS_TEXT.split())

SYSTEM = (
    "You are a coding agent working in a Python repository. Use the tools to read files, "
    "search the code and run the tests. Make the smallest change that fixes the task, run "
    "the tests after every change, and finish with a short summary of what you changed. "
    + " ".join(WORDS[i % len(WORDS)] for i in range(60))
)

TOOLS = {
    "read_file": (0.02, 0.15),
    "grep": (0.05, 0.6),
    "run_tests": (1.5, 6.0),
    "apply_patch": (0.03, 0.2),
}


def words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def session(rng: random.Random, number: int) -> dict[str, object]:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Task {number}: fix the {words(rng, 8, 30)}"},
    ]
    call = 0
    for _ in range(rng.randint(2, 5)):
        calls = []
        for _ in range(rng.randint(1, 3)):
            call += 1
            name = rng.choice(sorted(TOOLS))
            arguments = json.dumps({"query": words(rng, 2, 6)})
            calls.append(
                {
                    "id": f"call_{number}_{call}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        messages.append(
            {
                "role": "assistant",
                "content": words(rng, 5, 40),
                "reasoning_content": words(rng, 10, 60),
                "tool_calls": calls,
            }
        )
        for made in calls:
            function = made["function"]
            assert isinstance(function, dict)
            low, high = TOOLS[function["name"]]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": made["id"],
                    "content": words(rng, 20, 120),
                    "latency_s": round(rng.uniform(low, high), 3),
                }
            )
    messages.append({"role": "assistant", "content": "Done: " + words(rng, 20, 80)})
    return {"id": f"agent-{number:02d}", "messages": messages}


def render() -> str:
    rng = random.Random(SEED)
    return "".join(json.dumps(session(rng, n), sort_keys=True) + "\n" for n in range(SESSIONS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the file differs")
    args = parser.parse_args()
    text = render()
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUTPUT} differs: run without --check")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {SESSIONS} sessions to {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
