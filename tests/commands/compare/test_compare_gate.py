"""``accelscope gate``: rounds alternate, the decision stops the rounds, faults stop the gate
with one line, variants come from two files, a git revision or two interpreters; one real run
end to end through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.compare.gate import GateRequest, Variant, gate
from accelscope.compare.gate import GateStatus
from accelscope.errors import AccelscopeError, BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.spec import TensorSpec
from accelscope.store.sqlite import ResultStore
from accelscope.sweep.executor import WorkerOutcome
from accelscope.sweep.worker import InterleaveTask, WorkerTask
from accelscope.testing import CliRunner, assert_one_line_error, fake_result

MODEL = """
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)
"""
INPUTS = (TensorSpec(name="x", shape=("N", 4), dtype="float32"),)
QUICK = (
    *("--input", "x:N,4:float32", "--batch", "2", "--threads", "1"),
    *("--rounds", "2", "--max-rounds", "2", "--budget", "50ms"),
)
"""A real gate in a few seconds: two rounds of 50 ms per side on a Linear(4, 2)."""


def _models(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "a.py").write_text(MODEL)
    (tmp_path / "b.py").write_text(MODEL + "\n# the candidate\n")
    return f"{tmp_path / 'a.py'}:build", f"{tmp_path / 'b.py'}:build"


class ScriptedExecutor:
    """Answers an interleave task with per-call times: ``factor(model_ref, round)`` times 1 ms."""

    def __init__(self, factor: Any) -> None:
        self.factor = factor
        self.tasks: list[WorkerTask | InterleaveTask] = []

    def run(self, task: WorkerTask | InterleaveTask, on_progress: Any = None) -> WorkerOutcome:
        self.tasks.append(task)
        assert isinstance(task, InterleaveTask)
        round_index = sum(isinstance(t, InterleaveTask) for t in self.tasks) - 1
        calls = []
        for model in task.models:
            value = 1e-3 * self.factor(model.model_ref, round_index)
            calls.append([50e-3] * 4 + [value] * 20)  # 2 warm-up blocks of 2 calls, dropped
        return WorkerOutcome(
            None,
            interleaved={
                "keys": [s.key for s in task.specs],
                "calls_per_block": [2, 2],
                "block_s_per_item": [[], []],
                "call_s_per_item": calls,
            },
        )


def _request(tmp_path: Path, **changes: Any) -> GateRequest:
    baseline, candidate = _models(tmp_path)
    fields: dict[str, Any] = {
        "baseline": Variant(model=baseline, batch_size=2, threads=1),
        "candidate": Variant(model=candidate, batch_size=2, threads=1),
        "inputs": INPUTS,
        "rounds": 4,
        "max_rounds": 8,
    }
    fields.update(changes)
    return GateRequest(**fields)


def test_rounds_alternate_the_first_side_and_a_slower_candidate_is_a_regression(
    tmp_path: Path, environment: Environment
) -> None:
    executor = ScriptedExecutor(lambda ref, r: 1.2 + 0.001 * r if "b.py" in ref else 1.0)
    outcome = gate(
        _request(tmp_path),
        store_path=tmp_path / "runs.sqlite",
        environment=environment,
        executors={"baseline": executor, "candidate": executor},
    )
    assert outcome.decision.status is GateStatus.REGRESSION
    assert outcome.decision.exit_code == 1
    assert len(executor.tasks) == 4  # settled at the minimum number of rounds
    firsts = [t.models[0].model_ref for t in executor.tasks if isinstance(t, InterleaveTask)]
    assert ["b.py" in ref for ref in firsts] == [False, True, False, True]
    assert outcome.decision.time.ratio == pytest.approx(1.2015, rel=1e-3)
    assert outcome.run_id is not None
    with ResultStore(tmp_path / "runs.sqlite") as store:
        run = store.get_run(outcome.run_id)
    assert run.kind == "gate" and run.status == "complete"
    assert len(run.documents_of("gate_round")) == 4
    (stored,) = run.documents_of("gate")
    assert stored["decision"]["status"] == "regression"
    assert stored["settings"]["isolation"] == "shared"


def test_identical_sides_pass_and_noise_keeps_going_to_max_rounds_then_inconclusive(
    tmp_path: Path, environment: Environment
) -> None:
    same = ScriptedExecutor(lambda ref, r: 1.0 + 0.001 * (r % 2))
    outcome = gate(
        _request(tmp_path),
        store_path=None,
        environment=environment,
        executors={"baseline": same, "candidate": same},
    )
    assert outcome.decision.status is GateStatus.PASS and outcome.decision.exit_code == 0
    assert outcome.run_id is None
    jitter = [1.0, 1.12, 0.98, 1.15, 0.97, 1.1, 1.0, 1.13]
    noisy = ScriptedExecutor(lambda ref, r: jitter[r] if "b.py" in ref else 1.0)
    outcome = gate(
        _request(tmp_path),
        store_path=None,
        environment=environment,
        executors={"baseline": noisy, "candidate": noisy},
    )
    assert len(noisy.tasks) == 8
    assert outcome.decision.status is GateStatus.INCONCLUSIVE
    assert outcome.decision.exit_code == 3
    assert outcome.decision.rounds_needed is not None and outcome.decision.rounds_needed > 8


class FailingExecutor:
    def run(self, task: Any, on_progress: Any = None) -> WorkerOutcome:
        return WorkerOutcome(None, "crashed: killed by SIGKILL")


def test_a_worker_that_dies_stops_the_gate_in_one_line_and_marks_the_run_failed(
    tmp_path: Path, environment: Environment
) -> None:
    good = ScriptedExecutor(lambda ref, r: 1.0)
    store = tmp_path / "runs.sqlite"
    request = _request(tmp_path, isolation="process")

    class Process:
        def __init__(self) -> None:
            self.calls = 0

        def run(self, task: Any, on_progress: Any = None) -> WorkerOutcome:
            self.calls += 1
            if self.calls > 1:
                return WorkerOutcome(None, "crashed: killed by SIGKILL")
            return WorkerOutcome(fake_result(environment, batch=2))

    with pytest.raises(AccelscopeError) as caught:
        gate(
            request,
            store_path=store,
            environment=environment,
            executors={"baseline": Process(), "candidate": FailingExecutor()},
        )
    message = caught.value.message
    assert "\n" not in message
    assert "the candidate" in message and "round 1" in message and "SIGKILL" in message
    with ResultStore(store) as opened:
        (run,) = opened.list_runs()
    assert run.status == "failed"  # the baseline's process was kept
    del good


def test_the_baseline_can_be_the_model_file_at_a_git_revision(
    tmp_path: Path, environment: Environment
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    model = repo / "model.py"
    model.write_text(MODEL)

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "model.py")
    git("commit", "-qm", "v1")
    model.write_text(MODEL + "\n# working tree change\n")
    seen: dict[str, str] = {}

    def factor(ref: str, _: int) -> float:
        seen[ref] = Path(ref.rsplit(":", 1)[0]).read_text()
        return 1.0

    executor = ScriptedExecutor(factor)
    request = GateRequest(
        baseline=Variant(model=f"{model}:build", git_ref="HEAD", batch_size=2, threads=1),
        candidate=Variant(model=f"{model}:build", batch_size=2, threads=1),
        inputs=INPUTS,
        rounds=2,
        max_rounds=2,
    )
    gate(
        request,
        store_path=None,
        environment=environment,
        executors={"baseline": executor, "candidate": executor},
    )
    contents = sorted(seen.values())
    assert contents == sorted([MODEL, MODEL + "\n# working tree change\n"])
    bad = GateRequest(
        baseline=Variant(model=f"{model}:build", git_ref="no-such-ref", batch_size=2),
        candidate=Variant(model=f"{model}:build", batch_size=2),
        inputs=INPUTS,
    )
    with pytest.raises(BadInputError, match="at git revision no-such-ref"):
        gate(bad, store_path=None, environment=environment)


def test_bad_gate_flags_are_one_line_exit_2(tmp_path: Path, cli: CliRunner) -> None:
    baseline, candidate = _models(tmp_path)
    no_accelscope = tmp_path / "python"
    no_accelscope.write_text("#!/bin/sh\necho \"No module named 'accelscope'\" >&2\nexit 1\n")
    no_accelscope.chmod(0o755)
    common = ["--input", "x:N,4:float32", "--batch", "2", "--no-store"]
    cases = [
        (["--baseline", baseline, "--baseline-ref", "HEAD"], "not both"),
        (["--baseline", baseline, "--rounds", "1"], "at least 2 rounds"),
        (["--baseline", baseline, "--rounds", "6", "--max-rounds", "3"], "--max-rounds"),
        (["--baseline", baseline, "--isolation", "threads"], "unknown isolation"),
        (
            ["--baseline", baseline, "--isolation", "shared", "--baseline-python", sys.executable],
            "one interpreter",
        ),
        (["--baseline", baseline, "--max-slowdown", "150%"], "fraction"),
        (["--baseline", str(tmp_path / "missing.py:build")], "does not exist"),
        (["--baseline-ref", "HEAD"], "git"),
        (["--baseline-ref", "--output=x"], "bad git revision"),
        (["--baseline", baseline, "--markdown", str(tmp_path / "no" / "c.md")], "does not exist"),
        (["--baseline", baseline, "--baseline-python", str(tmp_path / "nope")], "cannot run"),
        (["--baseline", baseline, "--baseline-python", str(no_accelscope)], "No module named"),
        (
            [
                "--baseline",
                baseline,
                "--baseline-python",
                sys.executable,
                "--eval-data",
                str(tmp_path / "e.npz"),
            ],
            "--eval-data",
        ),
    ]
    for extra, mention in cases:
        code, _, err = cli("gate", candidate, *common, *extra)
        assert_one_line_error(code, err, mention)


@pytest.mark.slow
def test_a_real_gate_end_to_end_with_the_candidate_under_another_interpreter(
    tmp_path: Path, cli: CliRunner
) -> None:
    baseline, candidate = _models(tmp_path)
    store = tmp_path / "runs.sqlite"
    markdown = tmp_path / "comment.md"
    code, out, err = cli(
        "gate",
        candidate,
        "--baseline",
        baseline,
        "--candidate-python",
        sys.executable,
        *QUICK,
        "--max-slowdown",
        "50%",
        "--store",
        store,
        "--markdown",
        markdown,
        "--json",
    )
    assert code in (0, 1, 3), err
    data = json.loads(out)
    assert data["settings"]["isolation"] == "process"
    assert data["decision"]["rounds"] == 2
    assert data["decision"]["exit_code"] == code
    assert {p["side"] for p in data["processes"]} == {"baseline", "candidate"}
    assert all(p["samples"] >= 2 and p["median_s"] > 0 for p in data["processes"])
    assert markdown.read_text().startswith("### accelscope gate")
    code, out, err = cli("runs", "show", "latest", "--store", store)
    assert code == 0, err
    assert "gate rounds" in out and "candidate:" in out


def test_a_real_shared_gate_times_both_sides_in_one_worker_per_round(
    tmp_path: Path, cli: CliRunner
) -> None:
    baseline, candidate = _models(tmp_path)
    code, out, err = cli(
        "gate",
        candidate,
        "--baseline",
        baseline,
        *QUICK,
        "--no-store",
    )
    assert code in (0, 1, 3), err
    assert "gate: " in out and "alternating blocks" in out
    assert err.count("round ") == 2  # one progress line per round on stderr


@pytest.mark.slow
def test_with_eval_data_both_sides_are_scored_once_and_the_drop_is_gated(
    tmp_path: Path, cli: CliRunner
) -> None:
    import numpy as np

    baseline, candidate = _models(tmp_path)
    rng = np.random.default_rng(0)
    eval_file = tmp_path / "eval.npz"
    np.savez(
        eval_file,
        x=rng.standard_normal((16, 4)).astype("float32"),
        labels=rng.integers(0, 2, 16),
    )
    code, out, err = cli(
        "gate",
        candidate,
        "--baseline",
        baseline,
        *QUICK,
        "--eval-data",
        eval_file,
        "--no-store",
        "--json",
    )
    assert code in (0, 3), err  # same weights: never an accuracy regression
    decision = json.loads(out)["decision"]
    assert decision["accuracy_baseline"] is not None
    assert decision["accuracy_baseline"] == decision["accuracy_candidate"]
    assert decision["accuracy_drop"] == 0.0
    assert any("accuracy metric" in reason for reason in decision["reasons"])


def test_ctrl_c_keeps_the_rounds_done_and_names_the_run(
    tmp_path: Path, environment: Environment
) -> None:
    from accelscope.errors import InterruptedRunError

    scripted = ScriptedExecutor(lambda ref, r: 1.0)

    class Interrupting:
        def run(self, task: Any, on_progress: Any = None) -> WorkerOutcome:
            if len(scripted.tasks) >= 2:
                raise KeyboardInterrupt
            return scripted.run(task, on_progress)

    store = tmp_path / "runs.sqlite"
    executor = Interrupting()
    with pytest.raises(InterruptedRunError) as caught:
        gate(
            _request(tmp_path),
            store_path=store,
            environment=environment,
            executors={"baseline": executor, "candidate": executor},
        )
    with ResultStore(store) as opened:
        (listed,) = opened.list_runs()
        run = opened.get_run(listed.id)
    assert listed.id in caught.value.message
    assert run.status == "interrupted"
    assert len(run.documents_of("gate_round")) == 2


def test_runs_show_prints_the_rounds_of_an_interrupted_gate(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    from accelscope.errors import InterruptedRunError

    scripted = ScriptedExecutor(lambda ref, r: 1.0)

    class Interrupting:
        def run(self, task: Any, on_progress: Any = None) -> WorkerOutcome:
            if len(scripted.tasks) >= 3:
                raise KeyboardInterrupt
            return scripted.run(task, on_progress)

    store = tmp_path / "runs.sqlite"
    with pytest.raises(InterruptedRunError):
        gate(
            _request(tmp_path),
            store_path=store,
            environment=environment,
            executors={"baseline": Interrupting(), "candidate": Interrupting()},
        )
    code, out, err = cli("runs", "show", "latest", "--store", store)
    assert code == 0, err
    assert "no decision" in out
    assert out.count("A B") + out.count("B A") == 3
