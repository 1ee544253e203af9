"""Agent trajectories (OpenAI chat messages with tool calls, one session per JSONL line) read
into sessions of turns: prompts that grow by the recorded answers and tool results, recorded
tool waits, expected output tokens; every malformed session refused in one line naming the
line, session and turn, or skipped and counted per reason; examples/agentic's file; the replay
through the harness and the ``--agentic`` flags.

Covers: accelscope.llm.agentic, accelscope.llm.workload, accelscope.cli._llm_options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelscope.documents import Slo
from accelscope.errors import BadInputError
from accelscope.llm.agentic import (
    AgenticWorkload,
    AgentMessage,
    AgentTurn,
    SkipReason,
    read_trajectories,
)
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals
from accelscope.llm.harness import Harness
from accelscope.llm.jobs import ValidityBounds, assess_jobs
from accelscope.llm.workload import WORKLOADS
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fake_llm_server import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]

_SESSION_A: dict[str, Any] = {
    "id": "A",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "ok",
            "reasoning_content": "think hard",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a b c", "latency_s": 0.5},
        {"role": "tool", "tool_call_id": "c2", "content": "d", "latency_s": 1.25},
        {"role": "assistant", "content": "done now"},
    ],
}


def _write(tmp_path: Path, *rows: Any, raw: str = "") -> Path:
    path = tmp_path / "trajectories.jsonl"
    lines = [json.dumps(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines) + raw, encoding="utf-8")
    return path


def test_turns_prompts_waits_and_tokens_hand_counted(tmp_path: Path) -> None:
    # Words are tokens (no tokenizer); a message is "<|role|>" + its text + its tool calls:
    # system 3, user 3, first answer 4 (its reasoning left out), tool results 4 and 2.
    found = read_trajectories(_write(tmp_path, _SESSION_A))
    (session,) = found.sessions
    assert (session.line, session.name) == (1, "A")
    first, second = session.turns
    assert (first.number, first.prompt_messages, first.prompt_tokens) == (1, 2, 6)
    assert first.output_tokens == 5  # "think hard", "ok", ls({}), cat({})
    assert first.wait_s == pytest.approx(1.75) and first.wait_recorded  # 0.5 + 1.25
    assert (second.number, second.prompt_messages, second.prompt_tokens) == (2, 5, 16)
    assert second.output_tokens == 2
    assert (second.wait_s, second.wait_recorded) == (0.0, False)
    assert [m.role for m in session.prompt(second)] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]
    # The next prompt extends the previous one by the recorded answer: a cache reuses it all.
    grown = session.prompt_ids(second)
    assert grown[: first.prompt_tokens] == session.prompt_ids(first)
    answer = session.answer_ids(first)
    assert grown[first.prompt_tokens : first.prompt_tokens + len(answer)] == answer
    assert found.skipped == {} and found.skipped_total == 0


def test_reasoning_is_counted_as_output_but_never_sent_back(tmp_path: Path) -> None:
    (session,) = read_trajectories(_write(tmp_path, _SESSION_A)).sessions
    reasoning = session.turns[0].answer.reasoning
    assert reasoning == "think hard"
    later = " ".join(m.rendered() for m in session.prompt(session.turns[1]))
    assert "think" not in later and "ok" in later


def test_a_tokenizer_counts_the_tokens(tmp_path: Path) -> None:
    class Chars:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [ord(c) for c in text]

        def decode(self, ids: Any) -> str:
            return "".join(chr(i) for i in ids)

    (session,) = read_trajectories(_write(tmp_path, _SESSION_A), tokenizer=Chars()).sessions
    system = len("<|system|>\nbe brief")
    user = len("<|user|>\nlist files")
    assert session.turns[0].prompt_tokens == system + user
    assert session.turns[0].output_tokens == len("think hard\nok\nls({})\ncat({})")


def test_a_user_message_after_an_answer_is_a_wait_too(tmp_path: Path) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more", "latency_s": 3},
            {"role": "assistant", "content": "sure"},
        ]
    }
    (session,) = read_trajectories(_write(tmp_path, row)).sessions
    assert session.name == "1"  # no id: the line number
    assert session.turns[0].wait_s == 3.0 and session.turns[0].wait_recorded


def test_a_bare_list_and_content_parts_are_read(tmp_path: Path) -> None:
    row = [
        {"role": "user", "content": [{"type": "text", "text": "a b"}]},
        {"role": "assistant", "content": None, "tool_calls": [_call("k", {"x": 1})]},
        {"role": "tool", "tool_call_id": "k", "content": "r"},
        {"role": "assistant", "content": "end"},
    ]
    (session,) = read_trajectories(_write(tmp_path, row)).sessions
    assert session.messages[0].content == "a b"
    assert session.messages[1].tool_calls[0].arguments == '{"x": 1}'
    assert len(session.turns) == 2


def _call(ident: str, arguments: Any = "{}") -> dict[str, Any]:
    return {"id": ident, "type": "function", "function": {"name": "f", "arguments": arguments}}


_BAD: list[tuple[str, str, SkipReason, tuple[str, ...]]] = [
    (
        "tool result with no call",
        json.dumps(
            {
                "id": "s1",
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "y", "tool_calls": [_call("c1")]},
                    {"role": "tool", "tool_call_id": "c9", "content": "z"},
                ],
            }
        ),
        SkipReason.UNMATCHED_TOOL_RESULT,
        (":1", "session s1", "turn 2", "'c9'", "open: c1"),
    ),
    (
        "a second result for one call",
        json.dumps(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y", "tool_calls": [_call("c1")]},
                {"role": "tool", "tool_call_id": "c1", "content": "z"},
                {"role": "tool", "tool_call_id": "c1", "content": "z"},
            ]
        ),
        SkipReason.UNMATCHED_TOOL_RESULT,
        ("session 1", "turn 2", "message 3"),
    ),
    (
        "unknown role",
        json.dumps({"id": "r", "messages": [{"role": "robot", "content": "beep"}]}),
        SkipReason.UNKNOWN_ROLE,
        ("session r", "turn 1", "unknown role 'robot'"),
    ),
    (
        "not JSON",
        '{"messages": [oops',
        SkipReason.NOT_JSON,
        ("session 1", "not JSON"),
    ),
    (
        "no answer",
        json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
        SkipReason.EMPTY,
        ("session 1", "no assistant message"),
    ),
    (
        "no messages",
        json.dumps({"messages": []}),
        SkipReason.EMPTY,
        ("no assistant message",),
    ),
    (
        "not a session",
        "42",
        SkipReason.NOT_A_SESSION,
        ('"messages" list',),
    ),
    (
        "negative latency",
        json.dumps(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y", "tool_calls": [_call("c1")]},
                {"role": "tool", "tool_call_id": "c1", "content": "z", "latency_s": -1},
            ]
        ),
        SkipReason.BAD_FIELD,
        ("turn 2", '"latency_s"'),
    ),
    (
        "an answer first",
        json.dumps([{"role": "assistant", "content": "y"}]),
        SkipReason.BAD_FIELD,
        ("turn 1", "no prompt"),
    ),
    (
        "a tool call without a name",
        json.dumps(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]},
            ]
        ),
        SkipReason.BAD_FIELD,
        ("turn 1", "tool call 0"),
    ),
]


@pytest.mark.parametrize(
    ("line", "reason", "mentions"),
    [case[1:] for case in _BAD],
    ids=[case[0] for case in _BAD],
)
def test_each_bad_session_is_one_line_naming_where(
    tmp_path: Path, line: str, reason: SkipReason, mentions: tuple[str, ...]
) -> None:
    path = _write(tmp_path, raw=line + "\n")
    with pytest.raises(BadInputError) as caught:
        read_trajectories(path)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(str(path)), text
    for mention in mentions:
        assert mention in text, (mention, text)
    # lenient: a good session beside it is kept, the bad one counted under its reason
    path.write_text(json.dumps(_SESSION_A) + "\n" + line + "\n", encoding="utf-8")
    found = read_trajectories(path, lenient=True)
    assert [s.name for s in found.sessions] == ["A"]
    assert found.skipped == {reason: 1}


def test_a_turn_over_the_context_names_its_turn(tmp_path: Path) -> None:
    path = _write(tmp_path, _SESSION_A)
    assert len(read_trajectories(path, context_tokens=18).sessions) == 1  # 16 + 2 fits
    with pytest.raises(BadInputError) as caught:
        read_trajectories(path, context_tokens=17)
    assert str(caught.value) == (
        f"{path}:1 (session A), turn 2, message 5: 16 prompt + 2 output tokens exceed the "
        "context of 17"
    )
    with pytest.raises(BadInputError, match=r"no session to replay \(skipped: 1 turn over"):
        read_trajectories(path, context_tokens=17, lenient=True)
    with pytest.raises(BadInputError, match="context length 1: give at least 2"):
        read_trajectories(path, context_tokens=1)


def test_lenient_counts_skips_per_reason(tmp_path: Path) -> None:
    lines = [json.dumps(_SESSION_A)] + [case[1] for case in _BAD] + [json.dumps(_SESSION_A)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = read_trajectories(path, lenient=True)
    assert [s.line for s in found.sessions] == [1, len(lines)]
    assert found.skipped == {
        SkipReason.UNMATCHED_TOOL_RESULT: 2,
        SkipReason.UNKNOWN_ROLE: 1,
        SkipReason.NOT_JSON: 1,
        SkipReason.EMPTY: 2,
        SkipReason.NOT_A_SESSION: 1,
        SkipReason.BAD_FIELD: 3,
    }
    assert found.skipped_total == len(_BAD)
    assert "2 sessions skipped: no turn" in found.skip_notes()


def test_files_that_hold_nothing_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(BadInputError, match="trajectory file is empty"):
        read_trajectories(empty)
    with pytest.raises(BadInputError, match="no such trajectory file"):
        read_trajectories(tmp_path / "missing.jsonl")


def test_the_types_refuse_what_cannot_be() -> None:
    with pytest.raises(ValueError, match="latency_s"):
        AgentMessage(role="tool", content="", tool_call_id="c", latency_s=-0.1)
    with pytest.raises(ValueError, match="tool_call_id"):
        AgentMessage(role="tool", content="")
    answer = AgentMessage(role="assistant", content="x")
    with pytest.raises(ValueError, match="wait_s"):
        AgentTurn(
            number=1,
            prompt_messages=1,
            prompt_tokens=1,
            answer=answer,
            output_tokens=1,
            wait_s=-1.0,
            wait_recorded=True,
        )


def test_the_example_file_is_generated_and_readable() -> None:
    script = ROOT / "examples" / "agentic" / "make_trajectories.py"
    checked = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = read_trajectories(ROOT / "examples" / "agentic" / "trajectories.jsonl")
    assert len(found.sessions) >= 20
    assert all(len(s.turns) >= 3 for s in found.sessions)
    waits = [t.wait_s for s in found.sessions for t in s.turns[:-1]]
    assert all(t.wait_recorded for s in found.sessions for t in s.turns[:-1])
    assert min(waits) > 0.0


# -- replay: the workload, against the fake server ---------------------------------------------


def _replayable(tmp_path: Path, sessions: int = 3) -> Path:
    """``sessions`` trajectories of 3 turns: a shared system prompt, two tool rounds with
    waits of 50 ms then 30 + 20 ms."""
    rows = []
    for s in range(sessions):
        rows.append(
            {
                "id": f"job{s}",
                "messages": [
                    {"role": "system", "content": "you are an agent with tools"},
                    {"role": "user", "content": f"task {s} fix the bug"},
                    {
                        "role": "assistant",
                        "content": "look first",
                        "reasoning_content": "where is it",
                        "tool_calls": [_call(f"a{s}", '{"q": "bug"}')],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": f"a{s}",
                        "content": "x y z",
                        "latency_s": 0.05,
                    },
                    {
                        "role": "assistant",
                        "content": "now patch",
                        "tool_calls": [_call(f"b{s}"), _call(f"c{s}")],
                    },
                    {"role": "tool", "tool_call_id": f"b{s}", "content": "ok", "latency_s": 0.03},
                    {"role": "tool", "tool_call_id": f"c{s}", "content": "ok", "latency_s": 0.02},
                    {"role": "assistant", "content": "fixed it"},
                ],
            }
        )
    return _write(tmp_path, *rows)


@pytest.mark.parametrize("answers", ["server", "recorded"])
def test_replay_waits_the_recorded_tool_latency_and_sends_the_conversation(
    tmp_path: Path, answers: str
) -> None:
    workload = AgenticWorkload.from_file(_replayable(tmp_path), answers=answers, seed=3)
    assert WORKLOADS["agentic"] is AgenticWorkload
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002) as server:
        target = OpenAIEndpoint(server.url, server.model, api="chat")
        harness = Harness(target=target, workload=workload, metrics_url=server.url)
        trial = harness.trial(Arrivals(concurrency=2))
        sent = [r.body["messages"] for r in server.requests if r.path == "/v1/chat/completions"]
    records = trial.records
    assert len(records) == 9 and all(r.ok for r in records)
    by_session: dict[int, list[Any]] = {}
    for record in records:
        by_session.setdefault(record.session or 0, []).append(record)
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn or 0)
        first, second, third = turns
        # the next turn is scheduled when the answer ended plus the recorded tool latency
        assert second.scheduled_s == pytest.approx(first.end_s + 0.05, abs=1e-6)
        assert third.scheduled_s == pytest.approx(second.end_s + 0.05, abs=1e-6)
    # max_tokens: the recorded answer's words (reasoning, text, tool calls)
    assert sorted({r.body["max_tokens"] for r in server.requests if r.body}) == [2, 4, 7]
    last = max(sent, key=len)
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert last[0]["content"].startswith("[trial 3]\nyou are an agent with tools\n\ntask")
    assert last[2]["content"].startswith("[tool result a")
    assert "[tool result b" in last[4]["content"] and "[tool result c" in last[4]["content"]
    if answers == "recorded":
        assert last[1]["content"] == 'look first\nf({"q": "bug"})'  # no reasoning sent back
        assert last[3]["content"] == "now patch\nf({})\nf({})"
    else:  # the fake server's own tokens
        assert last[1]["content"].startswith(" tok0")
    summary = workload.summary()
    assert summary.kind == "agentic" and summary.entries == 3 and summary.sessions == 3
    assert f"answers sent back: the {answers}'s" in summary.notes
    assert any(n.startswith("optimal prefix-cache hit rate") for n in summary.notes)

    report = assess_jobs(
        records,
        expected_turns={s: 3 for s in by_session},
        slo=Slo(ttft_s=2.0, tpot_s=1.0),
        bounds=ValidityBounds(lag_limit_s=1.0),  # a shared 2-core machine: the gate's lag apart
    )
    assert report.metrics is not None
    assert (report.metrics.jobs, report.metrics.completed) == (3, 3)


def test_a_trial_tag_keeps_trials_apart_and_sessions_together(tmp_path: Path) -> None:
    workload = AgenticWorkload.from_file(_replayable(tmp_path), seed=9)
    first = workload.sessions(Arrivals(concurrency=1), 4)
    second = workload.sessions(Arrivals(concurrency=1), 4, seed_offset=1)
    assert [s.turns[0].text.split("\n")[0] for s in first] == ["[trial 9]"] * 4
    assert second[0].turns[0].text.startswith("[trial 10]\n")
    assert first[3].turns == first[0].turns  # a fourth session: the first one again
    assert first[0].think_s == (0.05, 0.05)
    assert workload.default_count() == 3 and workload.mean_turns() == 3.0
    prompts, asked = workload.recorded_sizes(first)
    recorded = workload.trajectories.sessions[0].turns
    assert sorted(prompts) == list(range(12))  # 4 sessions of 3 turns, numbered turn by turn
    assert [prompts[i] for i in (0, 1, 2)] == [t.prompt_tokens for t in recorded]
    assert [prompts[i] for i in (9, 10, 11)] == [t.prompt_tokens for t in recorded]
    assert [asked[i] for i in (0, 1, 2)] == [7, 4, 2]


def test_cli_replays_trajectories_and_refuses_bad_ones_in_one_line(
    cli: CliRunner, tmp_path: Path
) -> None:
    path = _replayable(tmp_path, sessions=2)
    store = tmp_path / "store.db"
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        code, out, err = cli(
            "llm", server.url, "--model", server.model, "--api", "chat", "--agentic", path,
            "--agentic-answers", "recorded", "--concurrency", "2", "--store", store,
            "--report", tmp_path / "r.html",
        )  # fmt: skip
    assert code == 0, err
    assert "per turn at concurrency 2" in out
    with ResultStore(store) as opened:
        [first] = opened.list_runs()
        [summary] = opened.get_run(first.id).documents_of("llm")
    assert summary["workload"]["kind"] == "agentic"
    assert [t["turn"] for t in summary["trials"][0]["summary"]["turns"]] == [1, 2, 3]

    bad = tmp_path / "bad.jsonl"
    robot = json.dumps({"id": "s7", "messages": [{"role": "robot", "content": "x"}]})
    bad.write_text(robot + "\n", encoding="utf-8")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(path.read_text(encoding="utf-8") + robot + "\n{oops\n", encoding="utf-8")
    with FakeLLMServer(ttft_s=0.005, itl_s=0.001) as server:
        code, _, err = cli(
            "llm", server.url, "--model", server.model, "--api", "chat", "--agentic", mixed,
            "--agentic-skip-bad", "--concurrency", "1", "--store", store,
            "--report", tmp_path / "r2.html",
        )  # fmt: skip
    assert code == 0, err
    with ResultStore(store) as opened:  # the other run (two in one second: ids do not order)
        [latest] = [r for r in opened.list_runs() if r.id != first.id]
        [summary] = opened.get_run(latest.id).documents_of("llm")
    assert summary["workload"]["skipped"] == 2
    assert "1 session skipped: not JSON" in summary["workload"]["notes"]
    assert "1 session skipped: unknown role" in summary["workload"]["notes"]
    cases = [
        (["--agentic", bad], [str(bad), "session s7", "turn 1", "unknown role"]),
        (["--agentic", path, "--turns", "3"], ["--turns does not apply to --agentic"]),
        (["--agentic", path, "--agentic-answers", "mine"], ["--agentic-answers 'mine'"]),
        (["--agentic-answers", "server"], ["--agentic-answers applies to --agentic"]),
        (["--agentic-skip-bad"], ["--agentic-skip-bad applies to --agentic"]),
        (["--agentic", mixed], [str(mixed), ":3 (session s7), turn 1"]),
        (["--agentic", path, "--trace", path], ["give one workload file"]),
    ]
    for args, mentions in cases:
        code, _, err = cli("llm", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
                           *args, "--store", tmp_path / "s.db")  # fmt: skip
        assert_one_line_error(code, err, *mentions)
    assert not (tmp_path / "s.db").exists()
