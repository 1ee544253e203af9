"""``accelscope ceilings`` / ``roofline`` through the real CLI, in-process: bad input is one
line and exit 2 with nothing written; a tiny model end to end against cached ceilings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.roofline.cache import cache_path, save_cached
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from roofline_helpers import make_ceilings

FACTORY = """\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4), torch.nn.Softmax(dim=-1))
"""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.py").write_text(FACTORY, encoding="utf-8")
    return tmp_path


def _cache_file(store: Path) -> Path:
    env = collect_environment()
    return cache_path(store.parent / "ceilings", env.fingerprint(), "cpu", available_cores())


MODEL = ("tiny.py:make", "--input", "x:N,16:float32")


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (("roofline", "no-such-model"), "no-such-model"),
        (("roofline", *MODEL, "--precision", "fp64"), "precision"),
        (("roofline", *MODEL, "--precision", "int8"), "not available"),
        (("roofline", *MODEL, "--batch", "0"), "--batch must be a positive integer"),
        (("roofline", *MODEL, "--batch", "two"), "--batch must be a positive integer"),
        (("roofline", *MODEL, "--threads", "-1"), "threads"),
        (("roofline", *MODEL, "--backend", "compile"), "not available"),
        (("roofline", *MODEL, "--device", "tpu"), "device"),
        (("ceilings", "--budget", "soon"), "duration"),
        (("ceilings", "--device", "cuda"), "not available"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    work: Path, cli: CliRunner, args: tuple[str, ...], mention: str
) -> None:
    if args[:3] == ("ceilings", "--device", "cuda") and collect_environment().gpus:
        pytest.skip("this machine has a GPU")  # the refusal is only for GPU-less machines
    code, _, err = cli(*args, "--store", str(work / "s" / "r.db"))
    assert_one_line_error(code, err)
    assert mention.lower() in err.lower(), err
    assert not (work / "s").exists()


def test_corrupt_cache_is_one_line_naming_the_fix(work: Path, cli: CliRunner) -> None:
    store = work / "r.db"
    path = _cache_file(store)
    path.parent.mkdir(parents=True)
    path.write_text("{broken", encoding="utf-8")
    code, _, err = cli("roofline", *MODEL, "--store", str(store))
    assert_one_line_error(code, err, "corrupt ceilings cache", "--refresh")
    assert not store.exists()
    code, _, err = cli("ceilings", "--store", str(store))
    assert_one_line_error(code, err, "corrupt ceilings cache")


def test_roofline_end_to_end_against_cached_ceilings(work: Path, cli: CliRunner) -> None:
    store = work / "r.db"
    env = collect_environment()
    save_cached(make_ceilings(environment_fingerprint=env.fingerprint()), _cache_file(store))
    report = work / "roof.html"
    code, out, err = cli(
        "roofline",
        *MODEL,
        "--batch",
        "4",
        "--measure-budget",
        "0.2s",
        "--store",
        str(store),
        "--report",
        str(report),
        "-q",
    )
    assert code == 0, err
    assert "linear" in out and "floor" in out and "MFU" in out
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.kind == "roofline" and run.status == "complete"
    (doc,) = run.documents_of("roofline")
    assert doc["batch_size"] == 4 and doc["backend"] == "eager" and doc["precision"] == "fp32"
    names = {op["name"] for op in doc["operators"]}
    assert {"aten::linear", "aten::gelu", "aten::layer_norm", "aten::softmax"} <= names
    linear = next(op for op in doc["operators"] if op["name"] == "aten::linear")
    # Linear(16,32) + Linear(32,4) on batch 4: 2*4*32*16 + 4*32 + 2*4*4*32 + 4*4 = 5264
    assert linear["calls"] == 2 and linear["flops"] == 5264
    assert all(op["measured_time_s"] > 0 for op in doc["operators"])
    assert doc["ceilings"]["environment_fingerprint"] == env.fingerprint()
    assert "Plotly.newPlot" in report.read_text(encoding="utf-8")
    code, out, _ = cli("runs", "show", "latest", "--store", str(store))
    assert code == 0 and "roofline" in out and "layer_norm" in out
    code, out, _ = cli("ceilings", "--store", str(store), "--json")
    assert code == 0 and json.loads(out)["bandwidth_bytes_per_s"] == 1e10
