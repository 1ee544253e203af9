"""``plan --run RUN --node-type INSTANCE=NODE_TYPE``: results a Ray sweep measured on a node
type are the measured capacity of the catalog entry it stands for; results of other node types
are never taken for this machine's.

Covers: accelscope.commands.plan.workflow, accelscope.plan.service."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.record import Measurement, StopReason
from accelscope.result import Result
from accelscope.spec import Precision, RunSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error, fake_result


def _result(environment: Environment, node_type: str, per_call_s: float) -> Result:
    spec = RunSpec(
        model="digits-cnn",
        backend="eager",
        precision=Precision.FP32,
        batch_size=8,
        threads=4,
        node_type=node_type,
    )
    measurement = Measurement(
        samples_s=(per_call_s,) * 50,
        items_per_call=8,
        first_call_s=per_call_s,
        warmup_samples_s=(),
        stop_reason=StopReason.BUDGET,
        budget_s=1.0,
    )
    return dataclasses.replace(
        fake_result(environment), spec=spec, measurement=measurement, accuracy=None
    )


def _store(tmp_path: Path, environment: Environment) -> tuple[Path, str]:
    store = tmp_path / "r.db"
    with ResultStore(store) as opened:
        run_id = opened.start_run("bench", "digits-cnn", "accelscope bench", environment, {})
        for node_type, per_call_s in (("cpu-a", 0.004), ("cpu-b", 0.002)):
            opened.add_result(run_id, _result(environment, node_type, per_call_s))
        opened.finish_run(run_id, "complete")
    return store, run_id


def test_each_node_type_is_the_measured_capacity_of_its_instance(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store, run_id = _store(tmp_path, environment)
    code, out, err = cli(
        "plan",
        "--run",
        run_id,
        "--traffic",
        "peak=10000qps",
        "--sla-p99",
        "50ms",
        "--node-type",
        "c7i.2xlarge=cpu-a,c6i.2xlarge=cpu-b",
        "--only",
        "c7i.2xlarge,c6i.2xlarge",
        "--store",
        store,
        "--no-store",
        "--json",
    )
    assert code == 0, err
    options = {o["name"]: o for o in json.loads(out)["options"]}
    assert set(options) == {"c7i.2xlarge", "c6i.2xlarge"}  # no "this machine" row
    assert options["c7i.2xlarge"]["capacity"]["qps_per_instance"] == 8 / 0.004
    assert options["c6i.2xlarge"]["capacity"]["qps_per_instance"] == 8 / 0.002
    assert options["c6i.2xlarge"]["capacity"]["basis"] == "bench"
    assert "@cpu-b" in " ".join(options["c6i.2xlarge"]["capacity"]["assumptions"])


def test_node_type_mapping_bad_input(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store, run_id = _store(tmp_path, environment)
    base = ("plan", "--traffic", "peak=10qps", "--sla-p99", "50ms", "--store", store)
    code, _, err = cli(*base, "--run", run_id, "--node-type", "c7i.2xlarge=gpu-pool")
    assert_one_line_error(code, err, "gpu-pool", "cpu-a, cpu-b")
    code, _, err = cli(*base, "--run", run_id, "--node-type", "c7i.2xlarge")
    assert_one_line_error(code, err, "CATALOG_TYPE=NODE_TYPE")
    code, _, err = cli(*base, "--model", "digits-cnn", "--node-type", "c7i.2xlarge=cpu-a")
    assert_one_line_error(code, err, "--run")
    code, _, err = cli(*base, "--run", run_id, "--node-type", "g6.xlarge=cpu-a")
    assert_one_line_error(code, err, "g6.xlarge is a gpu instance", "cpu")
