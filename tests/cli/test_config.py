"""The ``[load]`` section of the config file: it feeds ``accelscope load``'s flags (click's
``default_map``), converted and validated exactly like the flags; flags win over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import accelscope.commands.load.workflow as load_workflow
from accelscope.cli import main
from accelscope.commands.load.workflow import LoadRequest
from accelscope.load.summary import Scenario
from accelscope.spec import Precision
from accelscope.testing import CliRunner, assert_one_line_error

GOOD = """
[model]
ref = "resnet50"

[load]
scenario = "server"
sla_p99 = "100ms"
backend = "compile"
precision = "int8"
batch = 8
threads = 2
options = ["channels_last=true"]
rate = 40.5
batching = false
max_delay = "5ms"
min_duration = "10s"
min_queries = 1000
burstiness_cv = 1.5
report = "load.html"
"""


class _Called(Exception):
    """Raised instead of running the load: carries the request the CLI built."""

    def __init__(self, request: LoadRequest) -> None:
        super().__init__("load called")
        self.request = request


@pytest.fixture(autouse=True)
def _no_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def fake_load(request: LoadRequest, **kwargs: Any) -> None:
        raise _Called(request)

    monkeypatch.setattr(load_workflow, "load", fake_load)
    monkeypatch.chdir(tmp_path)


def _request(*args: str) -> LoadRequest:
    with pytest.raises(_Called) as called:
        main(["--debug", "load", *args])
    return called.value.request


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_load_section_sets_the_request(tmp_path: Path) -> None:
    request = _request("--config", _config(tmp_path, GOOD))
    assert request.model == "resnet50" and request.scenario is Scenario.SERVER
    assert request.sla_p99_s == pytest.approx(0.1) and request.backend == "compile"
    assert request.precision is Precision.INT8
    assert request.max_batch == 8 and request.threads == 2
    assert request.options == (("channels_last", "true"),)
    assert request.rate_per_s == 40.5 and request.batching is False
    assert request.max_delay_s == pytest.approx(0.005) and request.min_duration_s == 10.0
    assert request.min_queries == 1000 and request.burstiness_cv == 1.5
    assert request.report_path == Path("load.html")


def test_defaults_are_the_requests() -> None:
    """No flag and no file: every default comes from LoadRequest alone."""
    assert _request("m") == LoadRequest(model="m")


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    request = _request(
        "other",
        "--config",
        _config(tmp_path, GOOD),
        "--rate",
        "7",
        "--sla-p99",
        "250ms",
        "--option",
        "channels_last=false",
        "--batch",
        "4",
    )
    assert request.model == "other" and request.rate_per_s == 7.0
    assert request.sla_p99_s == pytest.approx(0.25) and request.max_batch == 4
    assert request.options == (("channels_last", "false"),)
    assert request.backend == "compile" and request.batching is False  # from the file


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        ('sla_p99 = "2s"', ["--sla-p99", "2s"]),
        ("sla_p99 = 2", ["--sla-p99", "2"]),
        ("min_duration = 0", ["--min-duration", "0"]),
        ('max_delay = "0s"', ["--max-delay", "0s"]),
        ('batch = "8"', ["--batch", "8"]),
        ('rate = "12.5"', ["--rate", "12.5"]),
        ("rate = 12", ["--rate", "12"]),
        ('scenario = "Offline"', ["--scenario", "Offline"]),
        ('precision = "BF16"', ["--precision", "BF16"]),
        ("batching = false", ["--no-batching"]),
        ("search = true", ["--search"]),
        ('query_timeout = "1m"', ["--query-timeout", "1m"]),
    ],
)
def test_file_value_converts_exactly_like_the_flag(
    tmp_path: Path, text: str, flags: list[str]
) -> None:
    from_file = _request("m", "--config", _config(tmp_path, f"[load]\n{text}\n"))
    from_flag = _request("m", *flags)
    assert from_file == from_flag != LoadRequest(model="m")


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ("[load]\nwarp = 1\n", "load.warp"),
        ("[load]\nbatch = 8.5\n", "load.batch"),
        ("[load]\nbatch = 'eight'\n", "load.batch"),
        ("[load]\nsearch = 1\n", "load.search"),
        ("[load]\nbatching = 'no'\n", "load.batching"),
        ("[load]\noptions = [1]\n", "load.options"),
        ("[load]\noptions = 'a=b'\n", "load.options"),
        ("[load]\nsla_p99 = true\n", "load.sla_p99"),
        ("[load]\nsla_p99 = 'soon'\n", "load.sla_p99"),
        ("[load]\nscenario = 'bursty'\n", "load.scenario"),
        ("[load]\nreport = 5\n", "load.report"),
        ("[load]\nrate = [1, 2]\n", "load.rate"),
        ("[model]\ninputs = [{shape = []}]\n", "model.inputs"),
        ("[model]\nref = true\n", "model.ref"),
        ("[load]\nquiet = true\n", "load.quiet"),  # a per-run switch, not a file key
    ],
)
def test_bad_value_is_one_line_naming_file_and_key(
    tmp_path: Path, cli: CliRunner, text: str, mention: str
) -> None:
    code, _, err = cli("load", "m", "--rate", "5", "--config", _config(tmp_path, text))
    assert_one_line_error(code, err, "c.toml", mention)


@pytest.mark.parametrize(
    ("text", "mention"),
    [("[load\n", "not valid TOML"), ("[warp]\nx = 1\n", "[warp]"), ("load = 1\n", "[load]")],
)
def test_bad_file_is_one_line(tmp_path: Path, cli: CliRunner, text: str, mention: str) -> None:
    code, _, err = cli("load", "m", "--config", _config(tmp_path, text))
    assert_one_line_error(code, err, mention)


def test_other_commands_sections_are_left_alone(tmp_path: Path) -> None:
    """One file can serve measure, bench and load: each reads [model] and its own section."""
    text = GOOD + '\n[run]\nbatch = [1, 8]\n\n[bench]\nbackends = ["eager"]\n'
    assert _request("--config", _config(tmp_path, text)).max_batch == 8
