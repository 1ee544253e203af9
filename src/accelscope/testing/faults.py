"""Backends that fail on purpose, inside the worker process: segfault, hang, MemoryError.

Imported as a bench ``--plugin`` (in the parent and in every worker); importing it registers
``fault-segv``, ``fault-hang``, ``fault-memory`` and ``fault-oom-big``. For tests only, so
nothing imports it: it is selected only by name, ``--plugin accelscope.testing.faults``
(``plugins=("accelscope.testing.faults",)`` through the API)."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

from accelscope.backends.base import Batch, Runner
from accelscope.backends.eager import EagerBackend
from accelscope.backends.registry import register_backend
from accelscope.models.base import LoadedModel
from accelscope.spec import RunSpec


class SegfaultBackend(EagerBackend):
    name = "fault-segv"

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        os.kill(os.getpid(), signal.SIGSEGV)
        ctypes.string_at(0)  # in case the signal is handled
        raise AssertionError("unreachable")


class HangBackend(EagerBackend):
    name = "fault-hang"

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        time.sleep(3600)
        raise AssertionError("unreachable")


class _MemoryErrorRunner(Runner):
    def __init__(self, inner: Runner) -> None:
        super().__init__(inner.spec)
        self._inner = inner
        self._calls = 0

    def feed(self, batch: Batch) -> Any:
        return self._inner.feed(batch)

    def run(self, feed: Any) -> Any:
        self._calls += 1
        if self._calls > 3:
            raise MemoryError
        return self._inner.run(feed)

    def outputs(self, raw: Any) -> Any:
        return self._inner.outputs(raw)


class MemoryErrorBackend(EagerBackend):
    name = "fault-memory"

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        return _MemoryErrorRunner(super().prepare(model, spec, calibration))


for backend in (SegfaultBackend(), HangBackend(), MemoryErrorBackend()):
    register_backend(backend)


class BigBatchOomBackend(EagerBackend):
    """Runs out of memory (MemoryError in prepare) from batch 4 up."""

    name = "fault-oom-big"

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if spec.batch_size >= 4:
            raise MemoryError
        return super().prepare(model, spec, calibration)


register_backend(BigBatchOomBackend())
