"""``accelscope compare``: stored runs resolved by id, latest~N or store file, compared with
statistics, printed as a table, JSON or markdown; bad references are one line and exit 2.

Covers: accelscope.commands.compare.workflow, accelscope.commands.compare.view,
accelscope.compare.analysis, accelscope.cli._compare."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np

from accelscope.hardware.fingerprint import Environment
from accelscope.result import Result
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error, fake_result

DATA = Path(__file__).resolve().parents[2] / "data"


def _result(
    environment: Environment, scale: float, *, seed: int, model: str = "resnet50", batch: int = 8
) -> Result:
    base = fake_result(environment, batch=batch)
    rng = np.random.default_rng(seed)
    samples = tuple(float(x) for x in scale * 0.010 * (1.0 + 0.01 * rng.standard_normal(200)))
    assert base.measurement is not None
    return dataclasses.replace(
        base,
        spec=dataclasses.replace(base.spec, model=model),
        measurement=dataclasses.replace(base.measurement, samples_s=samples),
    )


def _add_run(
    store_path: Path,
    environment: Environment,
    results: list[Result],
    kind: str = "measure",
    model: str = "resnet50",
) -> str:
    with ResultStore(store_path) as store:
        run_id = store.start_run(kind, model, "accelscope test", environment)
        for result in results:
            store.add_result(run_id, result)
        store.finish_run(run_id, "complete")
    return run_id


def test_one_run_per_side_cannot_tell_and_says_what_would(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    # Was "slower" (from the samples within each run). One process per side does not measure
    # the drift between processes, so the rule between processes answers "cannot tell".
    store = tmp_path / "runs.sqlite"
    _add_run(store, environment, [_result(environment, 1.0, seed=1)])
    _add_run(store, environment, [_result(environment, 1.2, seed=2)])
    code, out, err = cli("compare", "latest~1", "latest", "--store", store)
    assert code == 0, err
    assert "cannot tell" in out and "slower" not in out
    assert "~+20" in out  # the ratio of medians, ~1.2, shown but marked as no claim
    assert "none (1 vs 1 runs)" in out
    assert "one run per side" in out
    assert "A1,A2,A3 B1,B2,B3" in out and "accelscope gate" in out
    assert "Holm" in out


def test_json_and_markdown_carry_the_rows_and_the_rule(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.sqlite"
    first = _add_run(store, environment, [_result(environment, 1.0, seed=1)])
    second = _add_run(store, environment, [_result(environment, 1.0, seed=2)])
    markdown = tmp_path / "comment.md"
    code, out, err = cli(
        "compare", first, second, "--store", store, "--json", "--markdown", markdown
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["baseline_runs"] == [first] and data["candidate_runs"] == [second]
    assert "never assumed zero" in data["rule"]
    assert "accelscope gate" in data["what_would_tell"]
    p50 = next(row for row in data["rows"] if row["metric"] == "time/item p50")
    assert p50["verdict"] == "cannot tell"  # was "no change" from the within-run bootstrap
    assert p50["estimate"] is None
    assert p50["between_processes"]["claimable"] is False
    assert 0.98 < p50["ratio"] < 1.02
    text = markdown.read_text()
    assert text.startswith("### accelscope compare")
    assert "| Configuration | Metric |" in text
    assert "cannot tell" in text and "A1,A2,A3 B1,B2,B3" in text


def test_several_runs_per_side_make_the_run_the_unit(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.sqlite"
    before = [_add_run(store, environment, [_result(environment, 1.0, seed=s)]) for s in (1, 2, 3)]
    after = [_add_run(store, environment, [_result(environment, 1.3, seed=s)]) for s in (4, 5, 6)]
    code, out, err = cli("compare", ",".join(before), ",".join(after), "--store", store, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["statistical_unit"].startswith("runs (3 vs 3")
    assert data["what_would_tell"] is None
    p50 = next(row for row in data["rows"] if row["metric"] == "time/item p50")
    assert "Welch" in p50["estimate"]["method"]
    assert p50["verdict"] == "slower"
    assert p50["between_processes"]["claimable"] is True
    code, out, err = cli("compare", ",".join(before), ",".join(after), "--store", store)
    assert code == 0, err
    assert "slower" in out and "cannot tell" not in out


def test_a_store_file_and_store_colon_run_name_runs_in_other_stores(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    old = tmp_path / "old.sqlite"
    new = tmp_path / "new.sqlite"
    old_id = _add_run(old, environment, [_result(environment, 1.0, seed=1)])
    _add_run(new, environment, [_result(environment, 0.8, seed=2)])
    code, out, err = cli(
        "compare", f"{old}:{old_id}", str(new), "--store", tmp_path / "x.sqlite", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["baseline_runs"] == [old_id]
    p50 = next(row for row in data["rows"] if row["metric"] == "time/item p50")
    assert abs(p50["ratio"] - 0.8) < 0.01
    assert p50["verdict"] == "cannot tell"  # was "faster": one run per side


def test_an_older_store_is_read_after_its_upgrade(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "v1.sqlite"
    shutil.copy(DATA / "store-v1.sqlite", store)
    old_run = "20261120-221000-c3d4"  # one result, written by the first store layout
    with ResultStore(store) as opened:
        (old,) = opened.get_run(old_run).results
    assert old.measurement is not None
    slower = dataclasses.replace(
        old,
        measurement=dataclasses.replace(
            old.measurement, samples_s=tuple(s * 1.5 for s in old.measurement.samples_s)
        ),
    )
    new_run = _add_run(store, old.environment, [slower])
    code, out, err = cli("compare", old_run, new_run, "--store", store, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["kind"] == "measure"
    p50 = next(row for row in data["rows"] if row["metric"] == "time/item p50")
    assert abs(p50["ratio"] - 1.5) < 1e-9


def test_a_newer_store_is_refused_in_one_line(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "future.sqlite"
    shutil.copy(DATA / "store-v1.sqlite", store)
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '99')")
    code, _, err = cli("compare", "latest~1", "latest", "--store", store)
    assert_one_line_error(code, err, "newer")


def test_bad_references_and_incomparable_runs_are_one_line_exit_2(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.sqlite"
    measured = _add_run(store, environment, [_result(environment, 1.0, seed=1)])
    other_model = _add_run(
        store, environment, [_result(environment, 1.0, seed=2, model="bert")], model="bert"
    )
    other_batch = _add_run(store, environment, [_result(environment, 1.0, seed=3, batch=32)])
    doctor = _add_run(store, environment, [], kind="doctor")
    bench = _add_run(store, environment, [_result(environment, 1.0, seed=4)], kind="bench")
    cases = {
        "no run": ("nope", measured),
        "models": (measured, other_model),
        "nothing in common": (measured, other_batch),
        "doctor": (doctor, measured),
        "mixed kinds": (bench, measured),
        "same run": (measured, measured),
        "latest~9": ("latest~9", measured),
        "latest~x": ("latest~x", measured),
        "latest~2 superscript": ("latest~\u00b2", measured),
        "empty": (f"{measured},", measured),
    }
    expected = {
        "no run": "no run 'nope'",
        "models": "different models",
        "nothing in common": "no measured configuration in common",
        "doctor": "is a doctor run",
        "mixed kinds": "cannot compare a bench run with a measure run",
        "same run": "more than once",
        "latest~9": "holds only",
        "latest~x": "latest~N",
        "latest~2 superscript": "latest~N",
        "empty": "empty run reference",
    }
    for name, (baseline, candidate) in cases.items():
        code, _, err = cli("compare", baseline, candidate, "--store", store)
        assert_one_line_error(code, err, expected[name])
    code, _, err = cli("compare", measured, measured, "--store", tmp_path / "missing.sqlite")
    assert_one_line_error(code, err, "no results store")


def test_another_machine_is_refused_unless_allowed_and_then_named(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.sqlite"
    elsewhere = dataclasses.replace(
        environment, cpu=dataclasses.replace(environment.cpu, model_name="Other CPU 9000")
    )
    first = _add_run(store, environment, [_result(environment, 1.0, seed=1)])
    moved = _result(elsewhere, 1.0, seed=2)
    second = _add_run(store, elsewhere, [moved])
    code, _, err = cli("compare", first, second, "--store", store)
    assert_one_line_error(code, err, "different machines", "--allow-env-change")
    code, out, err = cli("compare", first, second, "--store", store, "--allow-env-change")
    assert code == 0, err
    assert "Other CPU 9000" in out


def test_a_changed_model_file_still_matches_and_is_noted(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "runs.sqlite"
    first = _add_run(store, environment, [_result(environment, 1.0, seed=1)])
    changed = _result(environment, 1.0, seed=2)
    changed = dataclasses.replace(
        changed, spec=dataclasses.replace(changed.spec, model_digest="sha256:feedface0000")
    )
    second = _add_run(store, environment, [changed])
    code, out, err = cli("compare", first, second, "--store", store)
    assert code == 0, err
    assert "model file changed" in out


def test_two_real_measure_runs_compare_end_to_end(tmp_path: Path, cli: CliRunner) -> None:
    model = tmp_path / "model.py"
    model.write_text("import torch\n\n\ndef build():\n    return torch.nn.Linear(8, 8)\n")
    store = tmp_path / "runs.sqlite"
    for _ in range(2):
        code, _, err = cli(
            "measure",
            f"{model}:build",
            "--input",
            "x:N,8:float32",
            "--batch",
            "4",
            "--threads",
            "1",
            "--budget",
            "100ms",
            "--store",
            store,
            "--quiet",
        )
        assert code == 0, err
    code, out, err = cli("compare", "latest~1", "latest", "--store", store, "--json")
    assert code == 0, err
    data = json.loads(out)
    metrics = {row["metric"] for row in data["rows"]}
    assert {"time/item p50", "time/item p99", "peak memory"} <= metrics
    p50 = next(row for row in data["rows"] if row["metric"] == "time/item p50")
    # two real processes, one run each: whatever their figures, no difference is claimed
    assert p50["ratio"] > 0 and p50["estimate"] is None
    assert {row["verdict"] for row in data["rows"]} == {"cannot tell"}
