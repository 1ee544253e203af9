"""``plan train --measured-run``: the user's step read from a stored ``doctor`` run of the
training loop (its median measured step, on the GPU the loop ran on), replayed from a live doctor
run recorded on a real H200; and every run that cannot give a training step as one line, exit 2.

Covers: accelscope.commands.plan.train, accelscope.plan.accelerators."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.hardware.fingerprint import Environment
from accelscope.plan.accelerators import load_accelerators
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "examples" / "plan" / "llama-3.1-8b-config.json"
H200_RUN = REPO / "tests" / "data" / "doctor-h200-runs" / "launch_bound.live.json.gz"
H200 = "NVIDIA H200 SXM 141GB"
H200_MEDIAN_STEP_S = 0.0218620775  # the 20 measured steps' median, read from the file


def _recorded() -> dict[str, Any]:
    with gzip.open(H200_RUN, "rt", encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def _store_doctor(
    store_path: Path, environment: Environment, documents: dict[str, Any], kind: str = "doctor"
) -> str:
    with ResultStore(store_path) as store:
        run_id = store.start_run(kind, "launch_bound.py", "accelscope doctor", environment)
        store.add_document(run_id, "diagnosis", documents["diagnosis"])
        if documents.get("telemetry") is not None:
            store.add_document(run_id, "telemetry", documents["telemetry"])
        store.finish_run(run_id, "complete")
    return run_id


def _bf16_peak(name: str) -> float:
    peak = load_accelerators().get(name).peak("bf16")
    assert peak is not None
    return peak


def _base(store: Path) -> tuple[Any, ...]:
    # 1 x 128 tokens of Llama-3.1-8B per step: an MFU the H200's 21.9 ms step can reach
    return (
        "plan", "train", CONFIG, "--accelerators", f"{H200},NVIDIA L4", "--micro-batch", "1",
        "--seq-len", "128", "--store", store, "--json",
    )  # fmt: skip


def test_the_h200_run_narrows_the_h200_family_from_its_own_device(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, _recorded())
    code, out, err = cli(*_base(store))
    assert code == 0, err
    before = {o["accelerator"]: o for o in json.loads(out)["options"]}
    code, out, err = cli(*_base(store), "--measured-run", "latest")
    assert code == 0, err
    doc = json.loads(out)
    after = {o["accelerator"]: o for o in doc["options"]}
    label = f"doctor run {run_id}'s step of {H200_MEDIAN_STEP_S:.4g} s (median of 20) on 1 x {H200}"
    assert after[H200]["basis"].endswith("+ " + label)
    assert any(a.startswith(label) for a in doc["assumptions"])
    tokens = 128.0
    assert doc["measured_mfu"] == pytest.approx(
        tokens * doc["flops_per_token"] / (_bf16_peak(H200) * H200_MEDIAN_STEP_S)
    )
    width = {k: v["time_high_s"] / v["time_low_s"] for k, v in after.items()}
    width_before = {k: v["time_high_s"] / v["time_low_s"] for k, v in before.items()}
    assert width[H200] < width_before[H200]
    assert "+ doctor run" not in after["NVIDIA L4"]["basis"]
    # the run by its id prefix reads the same; --measured-on overrides the run's device
    code, out, err = cli(*_base(store), "--measured-run", run_id[:8])
    assert code == 0 and json.loads(out)["measured_mfu"] == doc["measured_mfu"], err
    code, out, err = cli(
        *_base(store), "--measured-run", run_id, "--measured-on", "NVIDIA A100 SXM 80GB"
    )
    assert code == 0, err
    # the same step on the A100's bf16 peak
    ratio = _bf16_peak(H200) / _bf16_peak("NVIDIA A100 SXM 80GB")
    assert json.loads(out)["measured_mfu"] == pytest.approx(doc["measured_mfu"] * ratio)


def _with(documents: dict[str, Any], **profile: Any) -> dict[str, Any]:
    changed = copy.deepcopy(documents)
    changed["diagnosis"]["profile"].update(profile)
    return changed


def test_runs_that_cannot_give_a_training_step_are_one_line_and_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    recorded = _recorded()
    facts = recorded["diagnosis"]["profile"]["facts"]
    no_backward = _with(recorded, facts={**facts, "backward_seen": False})
    on_cpu = _with(recorded, gpu_memory=None)
    unknown_gpu = _with(
        recorded,
        gpu_memory={**recorded["diagnosis"]["profile"]["gpu_memory"], "device": "cuda:0 RTX 9"},
    )
    profile = recorded["diagnosis"]["profile"]
    no_steps = _with(recorded, steps=profile["steps"][: profile["warmup"]])
    cases = [
        (no_backward, "took no optimizer step"),
        (on_cpu, "used no CUDA device: give --measured-on"),
        (unknown_gpu, "ran on 'RTX 9' (no datasheet in the catalog): give --measured-on"),
        (no_steps, "measured no step"),
    ]
    for documents, mention in cases:
        store = tmp_path / f"{len(mention)}.db"
        _store_doctor(store, environment, documents)
        code, _, err = cli(*_base(store), "--measured-run", "latest")
        assert_one_line_error(code, err, mention)
    # the CPU run with the part named reads as that part's step
    store = tmp_path / "cpu.db"
    _store_doctor(store, environment, on_cpu)
    code, out, err = cli(*_base(store), "--measured-run", "latest", "--measured-on", H200)
    assert code == 0, err
    assert json.loads(out)["options"][0]["basis"].endswith(f"on 1 x {H200}")


def test_the_wrong_run_or_store_is_one_line_and_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    code, _, err = cli(*_base(store), "--measured-run", "latest")
    assert_one_line_error(code, err, "no results store")
    with ResultStore(store) as opened:
        other = opened.start_run("roofline", "resnet50", "accelscope roofline", environment)
        opened.finish_run(other, "complete")
    code, _, err = cli(*_base(store), "--measured-run", "latest")
    assert_one_line_error(code, err, "holds no doctor run")
    code, _, err = cli(*_base(store), "--measured-run", other)
    assert_one_line_error(code, err, "is a roofline run, not a doctor run")
    code, _, err = cli(*_base(store), "--measured-run", "nope")
    assert_one_line_error(code, err, "no run 'nope'")
    broken = copy.deepcopy(_recorded())
    del broken["diagnosis"]["profile"]["steps"]
    _store_doctor(store, environment, broken)
    code, _, err = cli(*_base(store), "--measured-run", "latest")
    assert_one_line_error(code, err, "unreadable doctor documents")
    _store_doctor(store, environment, _recorded())
    code, _, err = cli(*_base(store), "--measured-run", "latest", "--measured-step", "2s")
    assert_one_line_error(code, err, "give one measured step")
