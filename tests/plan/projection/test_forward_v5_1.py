"""The forward check on MLPerf Inference v5.1 (held out of the package): the held-out file reads
through the package's own loader, cites every file, and both inference projections, fitted on
the shipped v4.0-v5.0 table alone, keep their accuracy on it (benchmarks/plan_forward_v5_1.py
projects the rows of the later round).

Covers: accelscope.plan.projection.published, accelscope.plan.projection.calibration,
accelscope.plan.projection.llm_serving."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

from accelscope.plan.accelerators import load_accelerators
from accelscope.plan.projection.calibration import shipped_calibration, spec_for
from accelscope.plan.projection.llm_serving import shipped_serving_calibration
from accelscope.plan.projection.published import PublishedTable, load_published
from accelscope.plan.projection.validation import summarise

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "plan_forward_v5_1.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_forward_v5_1", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["plan_forward_v5_1"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


fw = _load()


@pytest.fixture(scope="module")
def held_out() -> PublishedTable:
    return load_published(fw.HELD_OUT)


def _raw_rows(text: str) -> list[dict[str, object]]:
    rows = tomllib.loads(text)["result"]
    assert isinstance(rows, list)
    return rows


def test_the_held_out_file_has_the_shipped_tables_schema(held_out: PublishedTable) -> None:
    """It loads through load_published (the same validation as the package table), and every
    field it uses is one the shipped table uses, with the same type."""
    shipped_text = resources.files("accelscope.plan").joinpath("data", "published_inference.toml")
    shipped = _raw_rows(shipped_text.read_text("utf-8"))
    types: dict[str, set[type]] = {}
    for row in shipped:
        for key, value in row.items():
            types.setdefault(key, set()).add(type(value))
    held = _raw_rows(fw.HELD_OUT.read_text("utf-8"))
    assert len(held) == len(held_out.results) >= 200
    for row in held:
        assert set(row) <= set(types), set(row) - set(types)
        for key, value in row.items():
            assert type(value) in types[key], (key, value)


def test_every_row_is_v5_1_and_cites_the_files_it_was_read_from(
    held_out: PublishedTable,
) -> None:
    shipped_keys = {r.key for r in load_published().results}
    assert {r.round for r in load_published().results} == {"v4.0", "v4.1", "v5.0"}
    raw = {
        f"v5.1/{r['submitter']}/{r['system']}/{r['benchmark']}/{r['scenario']}": r
        for r in _raw_rows(fw.HELD_OUT.read_text("utf-8"))
    }
    for row in held_out.results:
        assert row.round == "v5.1" and row.key not in shipped_keys
        assert row.repo == "mlcommons/inference_results_v5.1"
        assert re.fullmatch(r"[0-9a-f]{40}", row.commit), row.commit
        prefix = f"closed/{row.submitter}/results/{row.system}/{row.benchmark}/"
        assert row.path.startswith(prefix), row.path
        assert row.path.endswith("/performance/run_1/mlperf_log_summary.txt"), row.path
        system_path = raw[row.key]["system_path"]
        assert system_path == f"closed/{row.submitter}/systems/{row.system}.json"
        if row.metric == "tokens_per_s":
            assert row.samples_value is not None, row.key


def test_a_row_without_a_datasheet_is_a_family_marked_new(held_out: PublishedTable) -> None:
    accelerators = load_accelerators()
    shipped_families = set(load_published().families())
    for row in held_out.results:
        if spec_for(row, accelerators) is None:
            assert row.family not in shipped_families, row.key
            assert "NEW FAMILY" in row.notes, row.key
    assert len({r.family for r in held_out.results} & shipped_families) >= 8


def test_the_capacity_projection_holds_forward_in_time(held_out: PublishedTable) -> None:
    """Measured 2026-11-28: 190 rows with a datasheet and a known benchmark, median |error|
    10.5 %, 80 % coverage 83 % (detector 65 %, diffusion 97 %, llm 85 %), median hi/lo 1.57;
    with the v5.1 spelling ``llama3.1-405b`` known to workloads.py, 222 rows, 10.5 %, 79 %.
    The floor: coverage at least 72 %, median |error| at most 14 %."""
    forward = fw.capacity_forward(shipped_calibration(), held_out, load_accelerators())
    assert len(forward.holdouts) >= 180
    assert all(why for _, why in forward.left_out)
    (total,) = summarise(forward.holdouts)
    assert total.coverage >= 0.72, total
    assert total.median_abs_error <= 0.14, total
    assert total.median_width < 2.0, total


def test_the_serving_projection_holds_forward_in_time(held_out: PublishedTable) -> None:
    """Measured 2026-11-29 (the three benchmarks' Server rows, the sourced prompt lengths,
    the all-reduce priced): 69 rows of 44 systems, median |error| 10.7 %, 80 % coverage 77 %,
    median hi/lo 1.46. Llama-2-70B 40 rows: 10.6 %, 92 %; Mixtral 10: 18.3 %, 100 %;
    Llama-3.1-405B 19: 23.1 %, 32 %, its 13 misses all B200 systems on fp4 weights running
    NVIDIA's one code (155-160 tokens/s per GPU against 119 [97-147] projected from the fp8
    rows of v5.0). The floor: coverage at least 70 % (85 % on Llama-2-70B), median |error|
    at most 12 %, and every Llama-3.1-405B miss a B200."""
    forward = fw.serving_forward(shipped_serving_calibration(), held_out, load_accelerators())
    assert len(forward.holdouts) >= 60
    (total,) = summarise(forward.holdouts)
    assert total.coverage >= 0.70, total
    assert total.median_abs_error <= 0.12, total
    by = {s.label: s for s in summarise(forward.holdouts, lambda h: h.workload_class)}
    assert set(by) == {"llama2-70b", "mixtral-8x7b", "llama3.1-405b"}
    assert by["llama2-70b"].coverage >= 0.85 and by["llama2-70b"].median_abs_error <= 0.12
    missed = [h for h in forward.holdouts if h.workload_class == "llama3.1-405b" and not h.covered]
    assert missed and all(h.family == "nvidia-b200" for h in missed)


def test_a_miss_names_what_the_data_show(held_out: PublishedTable) -> None:
    """The largest misses carry the facts beside them: an H200 NVL row is projected on the SXM
    datasheet, and fp4 weights are named where the submission states them."""
    calibration = shipped_calibration()
    earlier = [(r.result, r.spec) for r in calibration.rows]
    forward = fw.capacity_forward(calibration, held_out, load_accelerators())
    reasons = {h.key: fw.visible_reasons(*forward.rows[h.key], earlier) for h in forward.holdouts}
    nvl = [k for k, (r, _) in forward.rows.items() if r.variant == "NVL"]
    assert nvl and all(any("NVL part projected on" in x for x in reasons[k]) for k in nvl)
    fp4 = [k for k, (r, _) in forward.rows.items() if "weight_data_types 'fp4'" in r.notes]
    assert fp4 and all("fp4 weights" in reasons[k] for k in fp4)
    misses = fw.largest_misses(forward, earlier)
    assert len(misses) == fw.MISSES
    assert len({(h.family, fw.group_label(h)) for h, _ in misses}) == fw.MISSES
