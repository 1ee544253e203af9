"""Fixtures shared by the backend tests: a private export cache per module, the digits model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.backends.onnx_export import CACHE_ENV
from accelscope.models.base import LoadedModel
from accelscope.models.loading import load_model


@pytest.fixture(scope="module", autouse=True)
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every export and conversion of a test module goes to one private cache directory."""
    path = tmp_path_factory.mktemp("exports")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def digits() -> LoadedModel:
    return load_model("digits-cnn")
