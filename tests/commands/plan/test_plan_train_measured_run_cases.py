"""``plan train --measured-run DOCTOR_RUN``, case by case from docs/plan.md ("Or read the step
from a stored ``doctor`` run"): the device names drivers report read as their datasheet, the
step read from a doctor run equal to the same step given by hand (``--measured-step``, on one
device unless ``--measured-devices`` says more), ``--measured-on`` over the run's device, a run
by its id, a unique prefix or ``latest`` (the newest doctor run), the median of the measured
steps only, and each run or flag that cannot give a training step as one line, exit 2.

Built on the live doctor run recorded on an H200 (``tests/data/doctor-h200-runs/``), changed
where a case needs another device or other steps.

Covers: accelscope.commands.plan.train, accelscope.plan.accelerators."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from test_plan_train_measured_run import CONFIG, H200, _recorded, _store_doctor

from accelscope.hardware.fingerprint import Environment
from accelscope.plan.accelerators import load_accelerators
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error

L4 = "NVIDIA L4"
RECORDED = _recorded()
PROFILE = RECORDED["diagnosis"]["profile"]
MEDIAN_STEP_S = statistics.median(s["duration_s"] for s in PROFILE["steps"][PROFILE["warmup"] :])
MEASURED = len(PROFILE["steps"]) - PROFILE["warmup"]


def _store_other(store_path: Path, environment: Environment, kind: str) -> str:
    with ResultStore(store_path) as store:
        run_id = store.start_run(kind, "model", f"accelscope {kind}", environment)
        store.finish_run(run_id, "complete")
    return run_id


def _on_device(device: str, total_bytes: int | None) -> dict[str, Any]:
    """The recorded run as if its loop had run on ``device`` (the name the CUDA memory record
    holds) with ``total_bytes`` of memory."""
    changed = copy.deepcopy(RECORDED)
    memory = changed["diagnosis"]["profile"]["gpu_memory"]
    memory["device"] = device
    memory["total_bytes"] = total_bytes
    return changed


def _step(template: dict[str, Any], duration_s: float) -> dict[str, Any]:
    """``template`` lasting ``duration_s``, its phases scaled alike (they are parts of it: a
    stored step whose phases sum over it is refused as unreadable)."""
    factor = duration_s / template["duration_s"]
    phases = {k: v * factor for k, v in template["phases_s"].items()}
    return {**template, "duration_s": duration_s, "phases_s": phases}


def _with_steps(durations: list[float], warmup: list[float] | None = None) -> dict[str, Any]:
    """The recorded run with these measured step durations (after ``warmup``'s, default the
    recorded warm-up steps)."""
    changed = copy.deepcopy(RECORDED)
    profile = changed["diagnosis"]["profile"]
    template = profile["steps"][profile["warmup"]]
    warm = (
        profile["steps"][: profile["warmup"]]
        if warmup is None
        else [_step(template, d) for d in warmup]
    )
    profile["steps"] = list(warm) + [_step(template, d) for d in durations]
    profile["warmup"] = len(warm)
    profile["target_steps"] = len(profile["steps"])
    return changed


def _scaled(factor: float) -> dict[str, Any]:
    """The recorded run with every step ``factor`` times as long."""
    changed = copy.deepcopy(RECORDED)
    steps = changed["diagnosis"]["profile"]["steps"]
    steps[:] = [_step(step, step["duration_s"] * factor) for step in steps]
    return changed


def _args(store: Path, accelerators: str, seq_len: int = 128, *more: str) -> tuple[Any, ...]:
    return (
        "plan", "train", CONFIG, "--accelerators", accelerators, "--micro-batch", "1",
        "--seq-len", str(seq_len), "--store", store, "--json", *more,
    )  # fmt: skip


def _plan(cli: CliRunner, *args: Any) -> dict[str, Any]:
    code, out, err = cli(*args)
    assert code == 0, err
    loaded: dict[str, Any] = json.loads(out)
    return loaded


def _options(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["accelerator"]: o for o in doc["options"]}


def _bf16_peak(name: str) -> float:
    peak = load_accelerators().get(name).peak("bf16")
    assert peak is not None
    return peak


def _label(run_id: str, step_s: float, steps: int, part: str, devices: int = 1) -> str:
    return f"doctor run {run_id}'s step of {step_s:.4g} s (median of {steps}) on {devices} x {part}"


def _common_prefix(first: str, second: str) -> str:
    length = next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
        min(len(first), len(second)),
    )
    return first[:length]


def _width(option: dict[str, Any]) -> float:
    return float(option["time_high_s"]) / float(option["time_low_s"])


@pytest.mark.parametrize(
    ("device", "total_bytes", "part", "seq_len"),
    [
        # the name states no form factor: the family's SXM part
        ("cuda:0 NVIDIA H100 80GB HBM3", 85_045_460_992, "NVIDIA H100 SXM 80GB", 128),
        # SXM stated, two SXM A100s: the one within 10 % of the memory the device reports
        ("cuda:1 NVIDIA A100-SXM4-40GB", 42_505_273_344, "NVIDIA A100 SXM 40GB", 32),
        ("cuda:0 NVIDIA A100-SXM4-80GB", 85_198_045_184, "NVIDIA A100 SXM 80GB", 32),
        # the form factor the name states picks that part
        ("cuda:0 NVIDIA H100 PCIe", 85_520_809_984, "NVIDIA H100 PCIe 80GB", 128),
        ("cuda:0 NVIDIA H100 NVL", 99_857_989_632, "NVIDIA H100 NVL 94GB", 128),
        # the model word is a word of the name: L4 is not L40S, H200 is not GH200
        ("cuda:0 NVIDIA L4", 23_580_639_232, L4, 16),
        ("cuda:0 NVIDIA L40S", 47_697_362_944, "NVIDIA L40S", 64),
        ("cuda:0 NVIDIA GH200 480GB", 102_005_473_280, "NVIDIA GH200 96GB", 128),
    ],
)
def test_a_driver_device_name_reads_as_its_datasheet(
    tmp_path: Path,
    environment: Environment,
    cli: CliRunner,
    device: str,
    total_bytes: int,
    part: str,
    seq_len: int,
) -> None:
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, _on_device(device, total_bytes))
    accelerators = f"{part},{H200}"
    before = _options(_plan(cli, *_args(store, accelerators, seq_len)))
    doc = _plan(cli, *_args(store, accelerators, seq_len, "--measured-run", "latest"))
    after = _options(doc)
    label = _label(run_id, MEDIAN_STEP_S, MEASURED, part)
    assert after[part]["basis"].endswith("+ " + label), after[part]["basis"]
    assert doc["measured_mfu"] == pytest.approx(
        seq_len * doc["flops_per_token"] / (_bf16_peak(part) * MEDIAN_STEP_S), rel=1e-9
    )
    assert 0 < doc["measured_mfu"] < 1
    assert _width(after[part]) < _width(before[part])  # that family's interval narrows
    # the H200 family is not the one measured: not narrowed by the run
    assert "doctor run" not in after[H200]["basis"]


def test_a_tesla_t4_reads_as_the_t4_and_its_missing_bf16_peak_is_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    documents = _scaled(10.0)  # a T4 in fp32: a step ten times the H200's
    documents["diagnosis"]["profile"]["gpu_memory"].update(
        device="cuda:0 Tesla T4", total_bytes=15_828_320_256
    )
    run_id = _store_doctor(store, environment, documents)
    step = MEDIAN_STEP_S * 10.0
    doc = _plan(
        cli, *_args(store, "NVIDIA T4", 16, "--precision", "fp32", "--measured-run", run_id)
    )
    t4 = _options(doc)["NVIDIA T4"]
    assert t4["basis"].endswith("+ " + _label(run_id, step, MEASURED, "NVIDIA T4"))
    fp32 = load_accelerators().get("NVIDIA T4").peak("fp32")
    assert fp32 is not None
    assert doc["measured_mfu"] == pytest.approx(16 * doc["flops_per_token"] / (fp32 * step))
    # bf16 mixed on a part with no bf16 rate: as --measured-step on the T4 answers, one line
    code, _, err = cli(*_args(store, "NVIDIA T4", 16, "--measured-run", run_id))
    assert_one_line_error(code, err, "NVIDIA T4")


def test_a_device_no_datasheet_tells_apart_asks_for_measured_on(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    """Two SXM A100s, and a device memory within 10 % of neither."""
    store = tmp_path / "runs.db"
    run_id = _store_doctor(
        store, environment, _on_device("cuda:0 NVIDIA A100-SXM4", 64_000_000_000)
    )
    part = "NVIDIA A100 SXM 80GB"
    code, _, err = cli(*_args(store, part, 32, "--measured-run", run_id))
    assert_one_line_error(code, err, "--measured-on")
    doc = _plan(cli, *_args(store, part, 32, "--measured-run", run_id, "--measured-on", part))
    assert _options(doc)[part]["basis"].endswith(
        "+ " + _label(run_id, MEDIAN_STEP_S, MEASURED, part)
    )


@pytest.mark.parametrize("devices", [None, 1, 4])
def test_the_doctor_step_is_the_same_step_given_by_hand(
    tmp_path: Path, environment: Environment, cli: CliRunner, devices: int | None
) -> None:
    """``--measured-run`` reads S and PART from the run; the plan is then the plan of
    ``--measured-step S --measured-on PART`` with the same device count (1 by default, not
    ``--devices``)."""
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, RECORDED)
    spans = () if devices is None else ("--measured-devices", str(devices))
    read = _plan(cli, *_args(store, f"{H200},{L4}", 128, "--measured-run", run_id, *spans))
    by_hand = _plan(
        cli,
        *_args(
            store, f"{H200},{L4}", 128, "--measured-step", f"{MEDIAN_STEP_S * 1e3!r}ms",
            "--measured-on", H200, "--measured-devices", str(devices or 1),
        ),
    )  # fmt: skip
    assert read["measured_mfu"] == pytest.approx(by_hand["measured_mfu"], rel=1e-9)
    for name, option in _options(read).items():
        hand = _options(by_hand)[name]
        for key in ("time_s", "time_low_s", "time_high_s", "mfu", "mfu_low", "mfu_high"):
            assert option[key] == pytest.approx(hand[key], rel=1e-9), (name, key)
    basis = _options(read)[H200]["basis"]
    assert basis.endswith("+ " + _label(run_id, MEDIAN_STEP_S, MEASURED, H200, devices or 1))
    assert read["devices"] == 8  # --devices is the planned run's, not the measured step's


def test_measured_on_overrides_the_device_the_run_ran_on(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, RECORDED)
    both = f"{H200},{L4}"
    doc = _plan(cli, *_args(store, both, 16, "--measured-run", run_id, "--measured-on", L4))
    options = _options(doc)
    assert options[L4]["basis"].endswith("+ " + _label(run_id, MEDIAN_STEP_S, MEASURED, L4))
    assert "doctor run" not in options[H200]["basis"]
    assert doc["measured_mfu"] == pytest.approx(
        16 * doc["flops_per_token"] / (_bf16_peak(L4) * MEDIAN_STEP_S)
    )
    code, _, err = cli(*_args(store, both, 16, "--measured-run", run_id, "--measured-on", "RTX 9"))
    assert_one_line_error(code, err, "RTX 9")


def test_a_run_by_its_id_or_a_unique_prefix_and_an_ambiguous_prefix_is_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    older = _store_doctor(store, environment, _scaled(2.0))
    newer = _store_doctor(store, environment, RECORDED)
    shared = _common_prefix(older, newer)
    unique = older[: len(shared) + 1]
    assert not newer.startswith(unique)
    for given in (older, unique):
        doc = _plan(cli, *_args(store, H200, 128, "--measured-run", given))
        label = _label(older, 2.0 * MEDIAN_STEP_S, MEASURED, H200)
        assert _options(doc)[H200]["basis"].endswith("+ " + label)
    latest = _plan(cli, *_args(store, H200, 128, "--measured-run", "latest"))
    assert newer in _options(latest)[H200]["basis"]
    assert latest["measured_mfu"] == pytest.approx(2.0 * doc["measured_mfu"])
    code, out, err = cli(*_args(store, H200, 128, "--measured-run", shared))
    assert_one_line_error(code, err)
    assert out == ""


def test_latest_is_the_newest_doctor_run_whatever_its_id_and_whatever_came_after(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    ids = [_store_doctor(store, environment, _scaled(1.5))]
    # stored within a second, runs' ids sort by a random tail: store more until the newest
    # does not have the largest id, so an order by id would pick another
    for k in range(40):
        ids.append(_store_doctor(store, environment, _scaled(1.0 + 0.01 * (k + 1))))
        if ids[-1] != max(ids):
            break
    newest = ids[-1]
    assert newest != max(ids)  # the case the test is for
    factor = 1.0 + 0.01 * (len(ids) - 1)
    _store_other(store, environment, "roofline")  # newer still, but not a doctor run
    doc = _plan(cli, *_args(store, H200, 128, "--measured-run", "latest"))
    label = _label(newest, factor * MEDIAN_STEP_S, MEASURED, H200)
    assert _options(doc)[H200]["basis"].endswith("+ " + label)
    assert doc["measured_mfu"] == pytest.approx(
        128 * doc["flops_per_token"] / (_bf16_peak(H200) * factor * MEDIAN_STEP_S)
    )


def test_a_run_whose_measured_steps_are_all_equal_reads_that_step(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, _with_steps([0.05] * 20))
    before = _options(_plan(cli, *_args(store, f"{H200},{L4}", 128)))
    doc = _plan(cli, *_args(store, f"{H200},{L4}", 128, "--measured-run", run_id))
    h200 = _options(doc)[H200]
    assert h200["basis"].endswith("+ " + _label(run_id, 0.05, 20, H200))
    assert "step of 0.05 s (median of 20)" in h200["basis"]
    assert doc["measured_mfu"] == pytest.approx(
        128 * doc["flops_per_token"] / (_bf16_peak(H200) * 0.05)
    )
    # no spread among the steps is no reason for a zero-width (or broken) interval
    assert 0 < h200["time_low_s"] < h200["time_s"] < h200["time_high_s"]
    assert _width(h200) < _width(before[H200])


def test_the_step_is_the_median_of_the_measured_steps_not_the_warm_up(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    measured = [0.06, 0.02, 0.05, 0.03, 0.04]  # median 0.04; with the warm-up it would be 1.0
    run_id = _store_doctor(store, environment, _with_steps(measured, warmup=[1.0] * 8))
    doc = _plan(cli, *_args(store, H200, 128, "--measured-run", run_id))
    assert _options(doc)[H200]["basis"].endswith("+ " + _label(run_id, 0.04, 5, H200))
    assert doc["measured_mfu"] == pytest.approx(
        128 * doc["flops_per_token"] / (_bf16_peak(H200) * 0.04)
    )


def test_a_step_that_would_beat_the_datasheet_is_one_line_and_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, _scaled(1e-3))  # 21.9 us for 128 tokens of 8B
    # the MFU such a step claims: far above 1
    flops = _plan(cli, *_args(store, H200, 128))["flops_per_token"]
    assert 128 * flops / (_bf16_peak(H200) * MEDIAN_STEP_S * 1e-3) > 1
    for more in ((), ("--measured-on", L4)):
        code, out, err = cli(*_args(store, f"{H200},{L4}", 128, "--measured-run", run_id, *more))
        assert_one_line_error(code, err, "cannot beat the datasheet")
        assert out == ""


@pytest.mark.parametrize(
    "more",
    [
        ("--measured-step", "2s"),
        ("--measured-step", "2s", "--measured-on", H200),
    ],
)
def test_measured_run_with_measured_step_is_one_line_and_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner, more: tuple[str, ...]
) -> None:
    store = tmp_path / "runs.db"
    _store_doctor(store, environment, RECORDED)
    code, out, err = cli(*_args(store, H200, 128, "--measured-run", "latest", *more))
    assert_one_line_error(code, err)
    assert out == ""


def test_a_store_that_does_not_exist_is_one_line_and_is_not_created(
    tmp_path: Path, cli: CliRunner
) -> None:
    for store in (tmp_path / "runs.db", tmp_path / "no" / "such" / "dir" / "runs.db"):
        code, out, err = cli(*_args(store, H200, 128, "--measured-run", "latest"))
        assert_one_line_error(code, err, "no results store")
        assert out == ""
        assert not store.exists()  # reading a run creates no store
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("kind", ["llm", "plan", "audit", "bench"])
def test_a_run_of_another_kind_is_one_line_and_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner, kind: str
) -> None:
    store = tmp_path / "runs.db"
    other = _store_other(store, environment, kind)
    code, _, err = cli(*_args(store, H200, 128, "--measured-run", other))
    assert_one_line_error(code, err, other, f"{kind} run", "not a doctor run")
    code, _, err = cli(*_args(store, H200, 128, "--measured-run", "latest"))
    assert_one_line_error(code, err, "holds no doctor run")
    # a run of another kind holding a doctor's documents is still not a doctor run
    disguised = _store_doctor(store, environment, RECORDED, kind=kind)
    code, _, err = cli(*_args(store, H200, 128, "--measured-run", disguised))
    assert_one_line_error(code, err, "not a doctor run")


def test_a_loop_that_ran_backward_but_took_no_optimizer_step_is_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    documents = copy.deepcopy(RECORDED)
    documents["diagnosis"]["profile"]["facts"]["optimizer_seen"] = False
    run_id = _store_doctor(store, environment, documents)
    code, _, err = cli(*_args(store, H200, 128, "--measured-run", run_id))
    assert_one_line_error(code, err, "took no optimizer step")


def test_a_doctor_run_with_no_diagnosis_is_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    with ResultStore(store) as opened:  # a doctor run that stopped before its diagnosis
        run_id = opened.start_run("doctor", "train.py", "accelscope doctor", environment)
        opened.finish_run(run_id, "failed")
    code, out, err = cli(*_args(store, H200, 128, "--measured-run", run_id))
    assert_one_line_error(code, err, run_id)
    assert out == ""


def test_measured_devices_below_one_is_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.db"
    _store_doctor(store, environment, RECORDED)
    for devices in ("0", "-2"):
        code, out, err = cli(
            *_args(store, H200, 128, "--measured-run", "latest", "--measured-devices", devices)
        )
        assert_one_line_error(code, err, "--measured-devices")
        assert out == ""


def test_a_stored_device_memory_that_is_not_a_number_is_unreadable_in_one_line(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    """The doctor records the device's memory from the driver (always a number): a stored run
    whose memory is null was not written by it, and is refused as unreadable, even with
    ``--measured-on``."""
    store = tmp_path / "runs.db"
    run_id = _store_doctor(store, environment, _on_device("cuda:0 NVIDIA A100-SXM4", None))
    part = "NVIDIA A100 SXM 80GB"
    for extra in ((), ("--measured-on", part)):
        code, _, err = cli(*_args(store, part, 32, "--measured-run", run_id, *extra))
        assert_one_line_error(code, err, "unreadable doctor documents")
