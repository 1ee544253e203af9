"""plan/projection/published.py: the shipped table of published results, and bad tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.projection.published import load_published

ROW = """
[[result]]
round = "v4.0"
repo = "mlcommons/inference_results_v4.0"
commit = "3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f"
submitter = "NVIDIA"
system = "DGX-H100_H100-SXM-80GBx1_TRT"
accelerator = "NVIDIA H100-SXM-80GB"
family = "nvidia-h100"
variant = "SXM"
accelerator_count = 1
benchmark = "resnet50"
scenario = "{scenario}"
metric = "samples_per_s"
value = {value}
value_label = "Samples per second"
valid = {valid}
path = "closed/NVIDIA/results/x/resnet50/Offline/performance/run_1/mlperf_log_summary.txt"
"""


def test_the_shipped_table_is_cited_and_holds_no_held_back_round() -> None:
    table = load_published()
    assert len(table.results) >= 40
    assert len(table.families()) >= 8
    for row in table.results:
        assert row.round in ("v4.0", "v4.1", "v5.0"), row.key  # v5.1 is held back
        assert re.fullmatch(r"[0-9a-f]{40}", row.commit), row.key
        assert row.path.endswith("mlperf_log_summary.txt"), row.key
        assert row.per_device == row.value / row.accelerator_count
        assert row.round in row.citation and row.path in row.citation
    classes = {a.family for a in table.absent}
    assert {"aws-inferentia2", "aws-trainium"} <= classes


def test_a_scenario_directory_in_lower_case_reads_as_the_scenario(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(ROW.format(scenario="offline", value=1.0, valid="true"))
    assert load_published(path).results[0].scenario == "Offline"


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("not toml [", ("not valid TOML",)),
        ("[[other]]\nx = 1\n", ("unknown top-level key 'other'",)),
        (ROW.format(scenario="Offline", value=-3.0, valid="true"), ("result #1", "value")),
        (ROW.format(scenario="Offline", value=1.0, valid="false"), ("valid", "VALID")),
        (ROW.format(scenario="Peak", value=1.0, valid="true"), ("scenario",)),
        (
            ROW.format(scenario="Offline", value=1.0, valid="true") * 2,
            ("listed twice",),
        ),
    ],
)
def test_a_bad_table_is_one_line_naming_the_problem(
    tmp_path: Path, text: str, mentions: tuple[str, ...]
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(BadInputError) as raised:
        load_published(path)
    message = str(raised.value)
    assert "\n" not in message
    for mention in mentions:
        assert mention in message, message


def test_the_shipped_training_table_is_cited_and_holds_no_held_back_round() -> None:
    """plan/data/published_training.toml (MLPerf Training v4.0-v5.0, for the training plan to
    come): every row names its files and the official-style score, and v5.1 stays out."""
    import tomllib
    from importlib import resources

    text = resources.files("accelscope.plan").joinpath("data", "published_training.toml")
    rows = tomllib.loads(text.read_text("utf-8"))["result"]
    assert len(rows) >= 10
    assert len({r["family"] for r in rows}) >= 5
    for row in rows:
        assert row["round"] in ("v4.0", "v4.1", "v5.0"), row["system"]
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"])
        assert row["paths"] and all(p.endswith(".txt") for p in row["paths"])
        assert row["score_minutes"] > 0 and row["accelerator_count"] >= 1
        assert min(row["runs_minutes"]) <= row["olympic_mean_minutes"] <= max(row["runs_minutes"])
