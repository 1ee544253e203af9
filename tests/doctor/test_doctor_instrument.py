"""The torch patches, in this process: what is counted, what is not, and that uninstall
leaves torch exactly as it was; what-if injections on a real DataLoader.

Covers: accelscope.doctor.inprocess.instrument, accelscope.doctor.inprocess.inject."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from accelscope.doctor.inprocess.inject import Injector
from accelscope.doctor.inprocess.instrument import Instrumentation
from accelscope.doctor.inprocess.recorder import Recorder


class Noisy(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((4,), float(index)) + torch.rand(4)  # random: not cacheable


def _loop(loader: DataLoader[torch.Tensor], steps: int) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, batch in enumerate(loader):
        batch = batch.to("cpu")  # a CPU->CPU .to is a no-op, not a copy
        loss = criterion(model(batch), torch.zeros(batch.shape[0], 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()
        if step + 1 == steps:
            break


def test_training_loop_phases_and_clean_uninstall() -> None:
    before = {name: torch.Tensor.__dict__.get(name) for name in ("item", "to", "backward")}
    rec = Recorder()
    inst = Instrumentation(rec)
    inst.install()
    try:
        _loop(DataLoader(Noisy(), batch_size=8), steps=4)
    finally:
        inst.uninstall()
    assert rec.mode == "optimizer" and len(rec.steps) == 4
    steps = rec.steps_payload()
    for step in steps:
        assert step["counts"]["syncs"] == 1 and step["counts"]["copies"] == 0
        assert step["counts"]["items"] == 8
        assert step["phases_s"]["input"] > 0 and step["phases_s"]["backward"] > 0
    assert inst.narrowed and inst.loaders[0]["batch_size"] == 8
    assert inst.main_facts["parameters"] == 4 * 8 + 8 + 8 + 1
    assert {name: torch.Tensor.__dict__.get(name) for name in before} == before
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_dataloader_what_ifs_are_injected() -> None:
    for spec, check in (
        ({"kind": "dataloader", "set": {"num_workers": 1}}, lambda dl: dl.num_workers == 1),
        ({"kind": "batch", "factor": 2}, lambda dl: dl.batch_size == 16),
    ):
        injector = Injector(spec, needed_steps=4)
        inst = Instrumentation(Recorder(), full=False, injector=injector)
        inst.install()
        try:
            loader = DataLoader(Noisy(), batch_size=8)
        finally:
            inst.uninstall()
        assert check(loader) and injector.applied


def test_cache_what_if_flags_random_samples() -> None:
    injector = Injector({"kind": "cache"}, needed_steps=2)
    inst = Instrumentation(Recorder(), full=False, injector=injector)
    inst.install()
    try:
        loader = DataLoader(Noisy(), batch_size=8)
    finally:
        inst.uninstall()
    assert len(loader.dataset) == 32  # (2 + 2) batches of 8 materialised  # type: ignore[arg-type]
    assert injector.details["deterministic"] is False
    assert any("changes results" in note for note in injector.notes)
