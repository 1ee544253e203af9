"""What ``tune`` checks before any server starts: the engine's flags read from its own help
(argparse's usage, click's options), the space and its values typed by them, and every kind
of bad input as one line, exit 2, nothing started and nothing stored.

Covers: accelscope.tune.flags, accelscope.tune.space, accelscope.tune.failures,
accelscope.tune.search, accelscope.tune.engines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.tune.engines import TemplateEngine
from accelscope.tune.failures import FailureKind, classify_failure
from accelscope.tune.flags import convert, parse_help, render
from accelscope.tune.search import Budget, choose_strategy
from accelscope.tune.space import DEFAULTS_KEY, Config, Space

ARGPARSE = """usage: api_server.py [-h] [--max-num-seqs MAX_NUM_SEQS]
                     [--enable-prefix-caching | --no-enable-prefix-caching]
                     [--dtype {auto,bfloat16,float,float16,float32,half}]
                     [--gpu-memory-utilization GPU_MEMORY_UTILIZATION]
                     [--enforce-eager] [--quantization QUANTIZATION]
"""
CLICK = """Options:
  --continuous-batching / --no-continuous-batching
                                  Enable continuous batching.
  --cb-num-blocks INTEGER         Number of KV cache blocks.
  --cb-max-memory-percent FLOAT   Max GPU memory fraction.
  --reasoning [on|off|auto]       Reasoning mode.
  --dtype TEXT                    Override model dtype.
"""

SERVER = (
    f"{sys.executable} -m accelscope.testing.llm_server --port {{port}} "
    "--max-running {max_running}"
)


def test_flags_are_read_from_both_help_formats() -> None:
    vllm = parse_help(ARGPARSE, {"max-num-seqs": "int", "gpu-memory-utilization": "float"})
    assert vllm["max-num-seqs"].kind == "int"
    assert vllm["enable-prefix-caching"].kind == "bool"
    assert vllm["enforce-eager"].kind == "bool"
    assert vllm["dtype"].choices == ("auto", "bfloat16", "float", "float16", "float32", "half")
    assert vllm["gpu-memory-utilization"].kind == "float"
    assert vllm["quantization"].kind == "text"
    transformers = parse_help(CLICK)
    assert transformers["continuous-batching"].kind == "bool"
    assert transformers["cb-num-blocks"].kind == "int"
    assert transformers["cb-max-memory-percent"].kind == "float"
    assert transformers["reasoning"].choices == ("on", "off", "auto")
    assert transformers["dtype"].kind == "text"


def test_values_are_typed_and_rendered() -> None:
    flags = parse_help(ARGPARSE, {"max-num-seqs": "int"})
    assert convert(flags["max-num-seqs"], "8", "vllm") == 8
    assert convert(flags["enable-prefix-caching"], "off", "vllm") is False
    assert convert(flags["dtype"], "float32", "vllm") == "float32"
    assert render("enable-prefix-caching", False) == ["--no-enable-prefix-caching"]
    assert render("max-num-seqs", 8) == ["--max-num-seqs", "8"]
    for flag, text, mention in (
        ("max-num-seqs", "eight", "takes an integer"),
        ("enable-prefix-caching", "maybe", "give on or off"),
        ("dtype", "fp64", "takes one of auto, bfloat16"),
    ):
        with pytest.raises(BadInputError, match=mention):
            convert(flags[flag], text, "vllm")


def test_space_grid_candidates_and_reference() -> None:
    def conv(name: str, text: str) -> object:
        return int(text) if name == "max-num-seqs" else text

    space = Space.parse(
        ["max-num-seqs=1,8", "dtype=bfloat16,float32"],
        ["max-num-seqs=4"],
        "max-num-seqs=8,dtype=bfloat16",
        conv,  # type: ignore[arg-type]
    )
    keys = [c.key for c in space.configurations()]
    assert keys[0] == "max-num-seqs=8,dtype=bfloat16"  # the reference first, measured once
    assert keys[1:] == [
        "max-num-seqs=1,dtype=bfloat16",
        "max-num-seqs=1,dtype=float32",
        "max-num-seqs=8,dtype=float32",
        "max-num-seqs=4",
    ]
    assert Config().key == DEFAULTS_KEY
    assert Config((("dtype", "float32"),)).differs_in(Config()) == {"dtype"}
    with pytest.raises(BadInputError, match="the space is empty"):
        Space.parse([], [], None, conv)  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="given twice"):
        Space.parse(["max-num-seqs=1", "max-num-seqs=2"], [], None, conv)  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="none empty"):
        Space.parse(["max-num-seqs=1,,2"], [], None, conv)  # type: ignore[arg-type]


def test_template_engine_fills_its_placeholders() -> None:
    engine = TemplateEngine("m", template=SERVER)
    config = Config((("max-running", "4"),))
    command = engine.command(config)
    assert command[-2:] == ["--max-running", "4"] and "{port}" in command
    assert "--port 8000" in engine.launch_line(config)
    with pytest.raises(BadInputError, match="has no value"):
        engine.command(Config())
    with pytest.raises(BadInputError, match=r"needs \{port\}"):
        TemplateEngine("m", template="serve --max {max_running}")
    with pytest.raises(BadInputError, match=r"has no \{batch\}"):
        engine.convert("batch", "4")


def test_failures_are_kinds() -> None:
    assert (
        classify_failure(1, "torch.OutOfMemoryError: CUDA out of memory", timed_out=False)
        is FailureKind.OUT_OF_MEMORY
    )
    assert classify_failure(-9, "", timed_out=False) is FailureKind.OUT_OF_MEMORY
    assert (
        classify_failure(2, "error: argument --max-num-seqs: invalid int value", timed_out=False)
        is FailureKind.INVALID
    )
    assert (
        classify_failure(1, "ValueError: max_num_batched_tokens must be at least", timed_out=False)
        is FailureKind.INVALID
    )
    assert classify_failure(1, "Segmentation fault", timed_out=False) is FailureKind.EXITED
    assert classify_failure(None, "", timed_out=True) is FailureKind.TIMEOUT


def test_strategy_and_budget() -> None:
    assert choose_strategy(4).name == "grid"
    screen = choose_strategy(20, grid_max=8, finalists=2)
    assert screen.name == "screen" and "the best 2" in screen.why
    assert choose_strategy(20, "grid").name == "grid"
    budget = Budget(100.0)
    assert budget.fits("full")
    budget.record("full", 60.0)
    budget.began -= 50.0  # 50 s spent
    assert not budget.fits("full")  # 50 + 60 > 100
    with pytest.raises(BadInputError):
        Budget(0.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["--engine", "sglang"], ["--engine 'sglang'", "vllm, transformers, template"]),
        (["--engine", "template"], ["--server-command"]),
        (["--engine", "template", "--server-command", "serve --max {max_running}"], ["{port}"]),
        (["--engine", "template", "--server-command", SERVER], ["the space is empty"]),
        (
            ["--engine", "template", "--server-command", SERVER, "--space", "max-running="],
            ["none empty"],
        ),
        (
            ["--engine", "template", "--server-command", SERVER, "--space", "batch=1,2"],
            ["no {batch}"],
        ),
        (
            [
                "--engine",
                "template",
                "--server-command",
                SERVER,
                "--space",
                "max-running=1",
                "--no-slo",
            ],
            ["--slo"],
        ),
        (["--engine", "transformers", "--space", "no-such-flag=1"], ["no --no-such-flag"]),
        (["--engine", "transformers", "--space", "cb-num-blocks=many"], ["takes an integer"]),
        (["--engine", "transformers", "--space", "continuous-batching=maybe"], ["on or off"]),
        (
            ["--engine", "vllm", "--vllm-python", "/no/such/python", "--space", "max-num-seqs=1"],
            ["no such interpreter"],
        ),
        (
            [
                "--engine",
                "template",
                "--server-command",
                SERVER,
                "--space",
                "max-running=1",
                "--port-range",
                "99999-100000",
            ],
            ["--port-range"],
        ),
        (
            [
                "--engine",
                "template",
                "--server-command",
                SERVER,
                "--space",
                "max-running=1",
                "--rate",
                "1",
                "--concurrency",
                "2",
            ],
            ["not both"],
        ),
    ],
)
def test_bad_input_starts_nothing(
    cli: CliRunner, tmp_path: Path, args: list[str], mentions: list[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    slo = [] if "--no-slo" in args else ["--slo", "ttft=1s"]
    code, _, err = cli(
        "tune", "--model-dir", model, *[a for a in args if a != "--no-slo"], *slo,
        "--store", tmp_path / "s.db",
    )  # fmt: skip
    assert_one_line_error(code, err, *mentions)
    assert not (tmp_path / "s.db").exists()
    assert not (tmp_path / "servers").exists()


def test_a_model_that_is_not_a_directory(cli: CliRunner, tmp_path: Path) -> None:
    code, _, err = cli(
        "tune", "--engine", "transformers", "--model-dir", tmp_path / "nothing",
        "--space", "continuous-batching=on,off", "--slo", "ttft=1s", "--store", tmp_path / "s.db",
    )  # fmt: skip
    assert_one_line_error(code, err, "not a model directory")


def test_model_has_one_meaning_across_commands(cli: CliRunner, tmp_path: Path) -> None:
    # llm's --model is the name a server serves; tune's directory is --model-dir
    code, _, err = cli(
        "tune", "--engine", "vllm", "--model", tmp_path, "--space", "max-num-seqs=1,8",
        "--slo", "ttft=1s", "--store", tmp_path / "s.db",
    )  # fmt: skip
    assert_one_line_error(code, err, "--model-dir", "served name")
    code, _, err = cli("tune", "--engine", "vllm", "--slo", "ttft=1s", "--store", tmp_path / "s")
    assert_one_line_error(code, err, "give --model-dir DIR")
    assert not (tmp_path / "s.db").exists()


def test_a_port_range_with_nothing_free(cli: CliRunner, tmp_path: Path) -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, _, err = cli(
            "tune", "--engine", "template", "--model-dir", "m", "--server-command", SERVER,
            "--space", "max-running=1", "--slo", "ttft=1s", "--port-range", f"{port}-{port}",
            "--store", tmp_path / "s.db",
        )  # fmt: skip
    assert_one_line_error(code, err, "no free port")
