"""The recorder's accounting with a scripted clock: exclusive phases, boundaries, stop, probe."""

from __future__ import annotations

from typing import Any

import pytest

from accelscope.doctor.inprocess.recorder import FORWARD, N_SYNC, SYNC, Recorder


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def tick(self, us: float) -> None:
        self.now += int(us * 1000)


class Probe:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self, recorder: Any) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")


def _train_step(rec: Recorder, clock: Clock, sync_us: float = 0.0) -> None:
    rec.input_begin()
    clock.tick(300)
    rec.input_end()
    rec.forward_begin(True, 16)
    clock.tick(100)
    if sync_us:  # a readback inside the forward counts as sync, not forward
        start = clock()
        clock.tick(sync_us)
        rec.leaf(SYNC, start, clock())
        rec.count(N_SYNC)
    rec.forward_end(True)
    rec.backward_begin()
    clock.tick(200)
    rec.backward_end()
    rec.optimizer_begin()
    clock.tick(50)
    rec.optimizer_end(True)
    clock.tick(25)  # logging after the step: "other" of the next step


def test_exclusive_phases_and_optimizer_boundaries() -> None:
    clock = Clock()
    done: list[int] = []
    rec = Recorder(target_steps=3, clock_ns=clock, on_done=lambda: done.append(1))
    for _ in range(3):
        _train_step(rec, clock, sync_us=40)
    assert rec.mode == "optimizer" and len(rec.steps) == 3 and done == [1]
    payload = rec.steps_payload()
    first, second = payload[0], payload[1]
    assert first["phases_s"]["forward"] == pytest.approx(100e-6)
    assert first["phases_s"]["sync"] == pytest.approx(40e-6)
    assert first["phases_s"]["input"] == pytest.approx(300e-6)
    assert first["duration_s"] == pytest.approx(690e-6)
    assert second["duration_s"] == pytest.approx(715e-6)  # includes the 25 us of "other"
    assert sum(second["phases_s"].values()) == pytest.approx(690e-6)
    assert first["counts"]["syncs"] == 1 and first["counts"]["items"] == 16


def test_forward_boundaries_for_inference_and_dataloader_boundaries() -> None:
    clock = Clock()
    rec = Recorder(clock_ns=clock)
    for _ in range(4):
        rec.forward_begin(True, 1)
        clock.tick(50)
        rec.forward_end(True)
        rec.forward_begin(False, 0)  # a parameter-free module (a loss) drives nothing
        clock.tick(5)
        rec.forward_end(False)
        clock.tick(10)
    assert rec.mode == "forward" and len(rec.steps) == 3  # the 4th ends at the next forward
    assert rec.steps_payload()[0]["duration_s"] == pytest.approx(65e-6)
    loader_only = Recorder(clock_ns=clock)
    for _ in range(3):
        loader_only.input_begin()
        clock.tick(10)
        loader_only.input_end()
    assert loader_only.mode == "dataloader" and len(loader_only.steps) == 2


def test_probe_runs_over_the_last_warmup_step_and_traces_only_measured_steps() -> None:
    clock = Clock()
    probe = Probe()
    rec = Recorder(target_steps=5, warmup=2, clock_ns=clock, probe=probe, trace_steps=2)
    for index in range(5):
        _train_step(rec, clock)
        if index == 0:  # step 1, the last warm-up step, has just started
            assert probe.calls == ["start"]
        if index == 1:
            assert probe.calls == ["start", "stop"]
    assert probe.calls == ["start", "stop"]
    spans = rec.spans_payload()
    assert [s["name"] for s in spans].count("step") == 2
    assert {s["name"] for s in spans} >= {"input", "forward", "backward", "optimizer"}


def test_manual_mode_ignores_automatic_boundaries() -> None:
    clock = Clock()
    rec = Recorder(clock_ns=clock, manual=True)
    rec.manual_step()
    _train_step(rec, clock)
    _train_step(rec, clock)
    assert rec.steps == []
    rec.manual_step()
    assert len(rec.steps) == 1 and rec.mode == "manual"
    assert rec.steps_payload()[0]["phases_s"]["forward"] == pytest.approx(200e-6)
    assert FORWARD == 2
