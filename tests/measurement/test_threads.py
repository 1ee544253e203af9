"""Thread pinning: the settings recorded, and restored after the region."""

from __future__ import annotations

import os

import pytest
import torch

from accelscope.errors import BadInputError
from accelscope.measurement.threads import available_cores, pinned_threads


def test_threads_are_pinned_recorded_and_restored() -> None:
    before_threads = torch.get_num_threads()
    before_env = os.environ.get("OMP_NUM_THREADS")
    with pinned_threads(1) as settings:
        assert torch.get_num_threads() == 1
        assert os.environ["OMP_NUM_THREADS"] == "1"
        assert settings.intra_op == 1 and settings.requested == 1
        assert settings.available_cores == available_cores()
    assert torch.get_num_threads() == before_threads
    assert os.environ.get("OMP_NUM_THREADS") == before_env


def test_zero_threads_is_bad_input() -> None:
    with pytest.raises(BadInputError), pinned_threads(0):
        pass
