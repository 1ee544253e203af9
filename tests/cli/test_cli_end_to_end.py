"""End to end through the real CLI, in-process, on small real models.

Covers: accelscope.cli._measure, accelscope.cli._runs, accelscope.cli._env,
accelscope.commands.measure.workflow, accelscope.store.export."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from accelscope.testing import CliRunner, assert_one_line_error


def test_measure_store_show_export(tmp_path: Path, cli: CliRunner) -> None:
    store = str(tmp_path / "r.db")
    code, out, err = cli(
        "measure", "digits-cnn", "--batch", "4,16", "--budget", "0.5s", "--store", store
    )
    assert code == 0, err
    assert "digits-cnn" in out and "top1_accuracy" in out
    assert "stored run" in out
    code, out, _ = cli("runs", "list", "--store", store, "--json")
    runs = json.loads(out)
    assert code == 0 and len(runs) == 1 and runs[0]["result_count"] == 2
    run_id = runs[0]["id"]
    code, out, _ = cli("runs", "show", run_id[:12], "--store", store)
    assert code == 0 and "eager" in out and "fp32" in out
    code, out, _ = cli("runs", "show", "latest", "--store", store, "--json")
    document = json.loads(out)
    assert [r["spec"]["batch_size"] for r in document["results"]] == [4, 16]
    samples = document["results"][0]["measurement"]["samples_s"]
    assert len(samples) >= 2 and all(s > 0 for s in samples)
    target = tmp_path / "out.csv"
    code, _, err = cli("runs", "export", run_id, "--store", store, "-o", str(target))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [row["batch_size"] for row in rows] == ["4", "16"]
    assert float(rows[1]["items_per_s"]) > 0
    assert float(rows[0]["metric_value"]) >= 0.95


def test_bf16_has_fidelity_against_fp32_reference(tmp_path: Path, cli: CliRunner) -> None:
    code, out, err = cli(
        "measure",
        "digits-cnn",
        "--precision",
        "bf16",
        "--budget",
        "0.3s",
        "--json",
        "--no-store",
    )
    assert code == 0, err
    result = json.loads(out)["results"][0]
    fidelity = result["accuracy"]["fidelity"]
    assert 0 < fidelity["rel_l2"] < 0.05  # bf16 really ran (not bit-identical), and is close
    assert fidelity["top1_agreement"] >= 0.75
    assert result["accuracy"]["reference_metric_value"] >= 0.95


def test_onnx_model_through_onnxruntime(tmp_path: Path, cli: CliRunner) -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(
        model,
        (torch.randn(2, 16),),
        str(path),
        input_names=["x"],
        dynamic_axes={"x": {0: "batch"}},
        dynamo=False,
    )
    code, out, err = cli(
        "measure",
        str(path),
        "--backend",
        "onnxruntime",
        "--batch",
        "3",
        "--budget",
        "0.3s",
        "--json",
        "--no-store",
    )
    assert code == 0, err
    result = json.loads(out)["results"][0]
    assert result["spec"]["backend"] == "onnxruntime"
    assert result["measurement"]["items_per_call"] == 3


def test_factory_model_with_input_flag(tmp_path: Path, cli: CliRunner) -> None:
    source = tmp_path / "mine.py"
    source.write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())\n"
    )
    code, out, err = cli(
        "measure",
        f"{source}:make",
        "--input",
        "img:N,3,32,32",
        "--budget",
        "0.3s",
        "--threads",
        "1",
        "--json",
        "--no-store",
    )
    assert code == 0, err
    result = json.loads(out)["results"][0]
    assert result["threads"]["intra_op"] == 1
    assert result["spec"]["model_digest"]


def test_config_file_sets_flags_and_flags_win(tmp_path: Path, cli: CliRunner) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(
        '[model]\nref = "digits-cnn"\n[run]\nbatch = [2]\nbudget = "0.3s"\nthreads = 1\n'
    )
    code, out, err = cli("measure", "--config", str(config), "--batch", "5", "--json", "--no-store")
    assert code == 0, err
    spec = json.loads(out)["results"][0]["spec"]
    assert spec["batch_size"] == 5 and spec["threads"] == 1 and spec["model"] == "digits-cnn"


def test_env_and_models_commands(cli: CliRunner) -> None:
    code, out, _ = cli("env", "--json")
    document = json.loads(out)
    assert code == 0 and document["cpu"]["model_name"]
    assert {(s["device"], s["precision"]) for s in document["precision_support"]} >= {
        ("cpu", "fp32"),
        ("cpu", "bf16"),
    }
    code, out, _ = cli("env")
    assert code == 0 and "precision fast paths" in out
    code, out, _ = cli("models", "--json")
    names = [m["name"] for m in json.loads(out)["models"]]
    assert code == 0 and "resnet50" in names and "digits-cnn" in names


def test_version(cli: CliRunner) -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("accelscope ")


def test_measure_with_backend_option(tmp_path: Path, cli: CliRunner) -> None:
    code, out, err = cli(
        "measure",
        "digits-cnn",
        "--option",
        "channels_last=true",
        "--budget",
        "0.3s",
        "--json",
        "--no-store",
    )
    assert code == 0, err
    assert json.loads(out)["results"][0]["spec"]["options"] == [["channels_last", "true"]]
    code, _, err = cli("measure", "digits-cnn", "--option", "channels_last=maybe", "--no-store")
    assert_one_line_error(code, err, "maybe")
