"""User eval data (.npz) gives a user's own model a real task metric in bench.

Covers: accelscope.models.eval_file, accelscope.commands.bench.workflow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from accelscope.testing import CliRunner, assert_one_line_error

FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
"""


def _labelled(tmp_path: Path) -> tuple[str, Path]:
    import torch

    source = tmp_path / "clf.py"
    source.write_text(FACTORY)
    namespace: dict[str, object] = {}
    exec(FACTORY, namespace)  # the same model the worker will build
    model = namespace["make"]()  # type: ignore[operator]
    x = np.random.default_rng(0).standard_normal((96, 4)).astype(np.float32)
    with torch.no_grad():
        labels = model(torch.from_numpy(x)).argmax(dim=-1).numpy()
    labels[:6] = (labels[:6] + 1) % 3  # 6 wrong labels: the fp32 reference scores 93.75 %
    path = tmp_path / "eval.npz"
    np.savez(path, x=x, labels=labels, calibration_x=x[:32])
    return f"{source}:make", path


def test_bench_scores_user_eval_data(tmp_path: Path, cli: CliRunner) -> None:
    model, data = _labelled(tmp_path)
    code, out, err = cli(
        "bench",
        model,
        "--input",
        "x:N,4",
        "--eval-data",
        str(data),
        "--backend",
        "eager",
        "--precision",
        "fp32,bf16",
        "--batch",
        "16",
        "--threads",
        "1",
        "--measure-budget",
        "0.3s",
        "--no-store",
        "--json",
        "--report",
        tmp_path / "r.html",
    )
    assert code == 0, err
    results = json.loads(out)["results"]
    fp32 = next(r for r in results if r["spec"]["precision"] == "fp32")
    assert fp32["accuracy"]["metric_name"] == "top1_accuracy"
    assert fp32["accuracy"]["metric_value"] == pytest.approx(90 / 96)
    assert fp32["accuracy"]["metric_source"] == "eval.npz (96 samples)"


@pytest.mark.parametrize("problem", ["no-labels", "wrong-shape", "pickled", "not-npz", "metric"])
def test_bad_eval_data_is_one_line_exit_2(tmp_path: Path, cli: CliRunner, problem: str) -> None:
    model, data = _labelled(tmp_path)
    extra: list[str] = []
    if problem == "no-labels":
        np.savez(data, x=np.zeros((8, 4), np.float32))
    elif problem == "wrong-shape":
        np.savez(data, x=np.zeros((8, 5), np.float32), labels=np.zeros(8, np.int64))
    elif problem == "pickled":
        np.savez(data, x=np.array([object()] * 8, dtype=object), labels=np.zeros(8, np.int64))
    elif problem == "not-npz":
        data.write_text("x,labels\n1,2\n")
    else:
        extra = ["--metric", "bleu"]
    code, _, err = cli(
        "bench",
        model,
        "--input",
        "x:N,4",
        "--eval-data",
        data,
        "--backend",
        "eager",
        "--store",
        tmp_path / "r.db",
        *extra,
    )
    assert_one_line_error(code, err)
    assert not (tmp_path / "r.db").exists()
