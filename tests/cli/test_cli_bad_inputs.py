"""Bad inputs through the real CLI, in-process: exit 2, one ``error:`` line, nothing written.

Every case runs ``accelscope.cli.main`` with ``--store <tmp>/r.db`` (where the command takes a
store) and checks that the store file was not created: a rejected input must leave no trace.
Models are tiny factory files or ONNX graphs written into ``tmp_path``, or the zoo's
``digits-cnn`` with its build-time training replaced by seeded random weights (the weights are
irrelevant to input validation, and training would cost tens of seconds on a busy machine).

Covers: accelscope.cli, accelscope.commands.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelscope.cli import main
from accelscope.commands.measure.workflow import MeasureRequest
from accelscope.errors import AccelscopeError, BadInputError, UnsafeModelError
from accelscope.models.zoo import DEFAULT_MODEL
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error, tiny_onnx_bytes

FAST = ("--budget", "0.2s")

TINY_INPUT = ("--input", "x:N,16:float32")

TINY_FACTORY = """\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Linear(16, 4)


def make_text():
    return "not a module"
"""


# --------------------------------------------------------------------------------------------
# helpers and fixtures


@pytest.fixture(autouse=True)
def _untrained_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the digits CNN's build-time training; every case here fails before it matters."""
    from accelscope.models.zoo import digits

    def seeded_state() -> dict[str, torch.Tensor]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = digits.DigitsCNN()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    monkeypatch.setattr(digits, "_trained_state", seeded_state)


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty directory so a stray default store (.accelscope/) would be noticed."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def assert_nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "r.db").exists()
    assert not (tmp_path / "r.db-wal").exists()
    assert not (tmp_path / "cwd" / ".accelscope").exists()


def tiny_factory(tmp: Path) -> str:
    path = tmp / "tiny.py"
    path.write_text(TINY_FACTORY)
    return f"{path}:make"


class _Payload:
    """Unpickling this creates a directory at ``marker``: code from a data file has run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return (os.mkdir, (self.marker,))


def malicious_pt(tmp: Path) -> tuple[Path, Path]:
    marker = tmp / "PWNED"
    path = tmp / "evil.pt"
    torch.save(_Payload(marker), path)
    assert not marker.exists()
    return path, marker


# --------------------------------------------------------------------------------------------
# measure: one bad input each -> exit 2, one line naming the culprit, no store written

Case = Callable[[Path], tuple[list[str], str]]


def _missing_onnx(tmp: Path) -> tuple[list[str], str]:
    return ["measure", str(tmp / "nope.onnx")], "nope.onnx"


def _missing_pt2(tmp: Path) -> tuple[list[str], str]:
    return ["measure", str(tmp / "nope.pt2")], "nope.pt2"


def _missing_py(tmp: Path) -> tuple[list[str], str]:
    return ["measure", f"{tmp / 'nope.py'}:make", *TINY_INPUT], "nope.py"


def _missing_pt(tmp: Path) -> tuple[list[str], str]:
    return ["measure", str(tmp / "nope.pt"), *TINY_INPUT], "nope.pt"


def _directory_as_model(tmp: Path) -> tuple[list[str], str]:
    (tmp / "adir.onnx").mkdir()
    return ["measure", str(tmp / "adir.onnx")], "adir.onnx"


def _unknown_suffix(tmp: Path) -> tuple[list[str], str]:
    (tmp / "model.txt").write_text("hello")
    return ["measure", str(tmp / "model.txt")], "model.txt"


def _truncated_onnx(tmp: Path) -> tuple[list[str], str]:
    data = tiny_onnx_bytes()
    (tmp / "cut.onnx").write_bytes(data[: len(data) // 2])
    return ["measure", str(tmp / "cut.onnx"), "--backend", "onnxruntime"], "cut.onnx"


def _text_named_onnx(tmp: Path) -> tuple[list[str], str]:
    (tmp / "fake.onnx").write_text("this is not an ONNX protobuf, just text\n" * 20)
    return ["measure", str(tmp / "fake.onnx"), "--backend", "onnxruntime"], "fake.onnx"


def _onnx_input_names_differ(tmp: Path) -> tuple[list[str], str]:
    (tmp / "ok.onnx").write_bytes(tiny_onnx_bytes())
    args = ["measure", str(tmp / "ok.onnx"), "--backend", "onnxruntime", "--input", "z:N,16"]
    return args, "ok.onnx"


def _onnx_fixed_batch_other_batch(tmp: Path) -> tuple[list[str], str]:
    (tmp / "fixed.onnx").write_bytes(tiny_onnx_bytes(batch=2))
    return ["measure", str(tmp / "fixed.onnx"), "--backend", "onnxruntime", "--batch", "8"], "8"


def _weights_on_onnx(tmp: Path) -> tuple[list[str], str]:
    (tmp / "ok.onnx").write_bytes(tiny_onnx_bytes())
    torch.save(nn.Linear(16, 4).state_dict(), tmp / "w.pt")
    args = ["measure", str(tmp / "ok.onnx"), "--backend", "onnxruntime", "--weights"]
    return [*args, str(tmp / "w.pt")], "--weights"


def _corrupt_pt2(tmp: Path) -> tuple[list[str], str]:
    (tmp / "bad.pt2").write_bytes(b"PK\x03\x04 definitely not a torch.export archive")
    return ["measure", str(tmp / "bad.pt2")], "bad.pt2"


def _state_dict_as_model(tmp: Path) -> tuple[list[str], str]:
    torch.save(nn.Linear(16, 4).state_dict(), tmp / "sd.pt")
    return ["measure", str(tmp / "sd.pt"), *TINY_INPUT], "--weights"


def _weights_wrong_shape(tmp: Path) -> tuple[list[str], str]:
    torch.save(nn.Linear(3, 2).state_dict(), tmp / "wrong.pt")
    return ["measure", "digits-cnn", "--weights", str(tmp / "wrong.pt")], "wrong.pt"


def _weights_wrong_shape_safetensors(tmp: Path) -> tuple[list[str], str]:
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(4, 3), "bias": torch.zeros(4)}, tmp / "wrong.safetensors")
    args = ["measure", tiny_factory(tmp), *TINY_INPUT, "--weights"]
    return [*args, str(tmp / "wrong.safetensors")], "wrong.safetensors"


def _weights_missing(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--weights", str(tmp / "gone.pt")], "gone.pt"


def _weights_corrupt_safetensors(tmp: Path) -> tuple[list[str], str]:
    (tmp / "junk.safetensors").write_bytes(b"\x00\x01 junk")
    return ["measure", "digits-cnn", "--weights", str(tmp / "junk.safetensors")], "junk.safetensors"


def _weights_not_a_state_dict(tmp: Path) -> tuple[list[str], str]:
    torch.save([1, 2, 3], tmp / "list.pt")
    return ["measure", "digits-cnn", "--weights", str(tmp / "list.pt")], "list.pt"


def _factory_raises_on_import(tmp: Path) -> tuple[list[str], str]:
    (tmp / "boom.py").write_text("raise RuntimeError('kaboom at import')\n")
    return ["measure", f"{tmp / 'boom.py'}:make", *TINY_INPUT], "boom.py"


def _factory_syntax_error(tmp: Path) -> tuple[list[str], str]:
    (tmp / "syntax.py").write_text("def make(:\n    return 1\n")
    return ["measure", f"{tmp / 'syntax.py'}:make", *TINY_INPUT], "syntax.py"


def _factory_raises_when_called(tmp: Path) -> tuple[list[str], str]:
    (tmp / "late.py").write_text("def make():\n    raise ValueError('bad config\\nsecond line')\n")
    return ["measure", f"{tmp / 'late.py'}:make", *TINY_INPUT], "late.py"


def _factory_returns_non_module(tmp: Path) -> tuple[list[str], str]:
    tiny_factory(tmp)
    return ["measure", f"{tmp / 'tiny.py'}:make_text", *TINY_INPUT], "make_text"


def _factory_function_missing(tmp: Path) -> tuple[list[str], str]:
    tiny_factory(tmp)
    return ["measure", f"{tmp / 'tiny.py'}:nothing_here", *TINY_INPUT], "nothing_here"


def _factory_without_inputs(tmp: Path) -> tuple[list[str], str]:
    return ["measure", tiny_factory(tmp)], "--input"


def _module_missing(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "no_such_pkg_4f2a.models:make", *TINY_INPUT], "no_such_pkg_4f2a"


def _unknown_zoo_model(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "resnet5000"], "resnet5000"


def _unknown_backend(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--backend", "tensorrtx"], "tensorrtx"


def _backend_wrong_format(tmp: Path) -> tuple[list[str], str]:
    (tmp / "m.onnx").write_bytes(tiny_onnx_bytes())
    return ["measure", str(tmp / "m.onnx"), "--backend", "eager"], "eager"


def _unknown_precision(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--precision", "fp12"], "fp12"


def _unknown_device(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--device", "tpu"], "tpu"


def _fp16_on_cpu(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--precision", "fp16", "--device", "cpu"], "fp16"


def _zero_batch(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--batch", "0"], "0"


def _negative_batch(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--batch", "-4"], "-4"


def _non_integer_batch(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--batch", "8,x"], "'x'"


def _zero_threads(tmp: Path) -> tuple[list[str], str]:
    return ["measure", tiny_factory(tmp), *TINY_INPUT, "--threads", "0"], "threads"


def _text_threads(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--threads", "two"], "--threads"


def _input_spec_syntax(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--input", "pixels"], "pixels"


def _input_spec_bad_dim(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--input", "pixels:N,one,8,8"], "one"


def _input_spec_negative_dim(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--input", "pixels:N,1,-8,8"], "-8"


def _input_spec_bad_dtype(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--input", "pixels:N,1,8,8:complex64"], "complex64"


def _input_spec_bad_range(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--input", "ids:N,8:int64:9-1"], "ids"


def _bad_budget(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--budget", "ten seconds"], "ten seconds"


def _zero_budget(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--budget", "0s"], "0s"


def _bad_target_ci(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--target-ci", "150%"], "150%"


def _text_target_ci(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--target-ci", "tight"], "tight"


def _unknown_flag(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--frobnicate"], "--frobnicate"


def _flag_missing_value(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "digits-cnn", "--batch"], "--batch"


def _unknown_command(tmp: Path) -> tuple[list[str], str]:
    return ["measurex", "digits-cnn"], "measurex"


def _write_config(tmp: Path, text: str) -> str:
    path = tmp / "cfg.toml"
    path.write_text(text)
    return str(path)


def _config_missing(tmp: Path) -> tuple[list[str], str]:
    return ["measure", "--config", str(tmp / "absent.toml")], "absent.toml"


def _config_unknown_section(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[turbo]\nlevel = 11\n')
    return ["measure", "--config", cfg], "[turbo]"


def _config_unknown_key(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbatchsize = 8\n')
    return ["measure", "--config", cfg], "run.batchsize"


def _config_batch_bool(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbatch = true\n')
    return ["measure", "--config", cfg], "run.batch"


def _config_threads_text(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nthreads = "two"\n')
    return ["measure", "--config", cfg], "run.threads"


def _config_trust_text(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\ntrust_model_code = "yes"\n')
    return ["measure", "--config", cfg], "model.trust_model_code"


def _config_section_not_table(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, 'run = "fast"\n')
    return ["measure", "--config", cfg], "run"


def _config_bad_input_spec(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\ninputs = ["pixels:N,1,8,8:cplx"]\n')
    return ["measure", "--config", cfg], "cplx"


def _config_zero_batch(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbatch = [8, 0]\n')
    return ["measure", "--config", cfg], "run.batch"


def _config_nan_budget(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbudget = nan\n')
    return ["measure", "--config", cfg], "nan"


def _config_budget_bool(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbudget = true\n')
    return ["measure", "--config", cfg], "run.budget"


def _config_budget_text(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nbudget = "soon"\n')
    return ["measure", "--config", cfg], "run.budget"


def _config_threads_fraction(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nthreads = 1.5\n')
    return ["measure", "--config", cfg], "run.threads"


def _config_device_list(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\ndevice = ["cpu"]\n')
    return ["measure", "--config", cfg], "run.device"


def _config_options_not_list(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\noptions = "a=b"\n')
    return ["measure", "--config", cfg], "run.options"


def _config_store_number(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model]\nref = "digits-cnn"\n\n[run]\nstore = 5\n')
    return ["measure", "--config", cfg], "run.store"


def _config_invalid_toml(tmp: Path) -> tuple[list[str], str]:
    cfg = _write_config(tmp, '[model\nref = "digits-cnn"\n')
    return ["measure", "--config", cfg], "cfg.toml"


def _config_not_utf8(tmp: Path) -> tuple[list[str], str]:
    path = tmp / "latin.toml"
    path.write_bytes(b'[model]\nref = "caf\xe9"\n')
    return ["measure", "--config", str(path)], "latin.toml"


MEASURE_CASES: dict[str, Case] = {
    "missing-onnx": _missing_onnx,
    "missing-pt2": _missing_pt2,
    "missing-py-factory": _missing_py,
    "missing-pt": _missing_pt,
    "directory-as-model": _directory_as_model,
    "unknown-suffix": _unknown_suffix,
    "truncated-onnx": _truncated_onnx,
    "text-named-onnx": _text_named_onnx,
    "onnx-input-names-differ": _onnx_input_names_differ,
    "onnx-fixed-batch-other-batch": _onnx_fixed_batch_other_batch,
    "weights-on-onnx": _weights_on_onnx,
    "corrupt-pt2": _corrupt_pt2,
    "state-dict-as-model": _state_dict_as_model,
    "weights-wrong-shape": _weights_wrong_shape,
    "weights-wrong-shape-safetensors": _weights_wrong_shape_safetensors,
    "weights-missing": _weights_missing,
    "weights-corrupt-safetensors": _weights_corrupt_safetensors,
    "weights-not-a-state-dict": _weights_not_a_state_dict,
    "factory-raises-on-import": _factory_raises_on_import,
    "factory-syntax-error": _factory_syntax_error,
    "factory-raises-when-called": _factory_raises_when_called,
    "factory-returns-non-module": _factory_returns_non_module,
    "factory-function-missing": _factory_function_missing,
    "factory-without-inputs": _factory_without_inputs,
    "module-missing": _module_missing,
    "unknown-zoo-model": _unknown_zoo_model,
    "unknown-backend": _unknown_backend,
    "backend-wrong-format": _backend_wrong_format,
    "unknown-precision": _unknown_precision,
    "unknown-device": _unknown_device,
    "fp16-on-cpu-eager": _fp16_on_cpu,
    "zero-batch": _zero_batch,
    "negative-batch": _negative_batch,
    "non-integer-batch": _non_integer_batch,
    "zero-threads": _zero_threads,
    "text-threads": _text_threads,
    "input-spec-syntax": _input_spec_syntax,
    "input-spec-bad-dim": _input_spec_bad_dim,
    "input-spec-negative-dim": _input_spec_negative_dim,
    "input-spec-bad-dtype": _input_spec_bad_dtype,
    "input-spec-bad-range": _input_spec_bad_range,
    "bad-budget": _bad_budget,
    "zero-budget": _zero_budget,
    "bad-target-ci": _bad_target_ci,
    "text-target-ci": _text_target_ci,
    "unknown-flag": _unknown_flag,
    "flag-missing-value": _flag_missing_value,
    "unknown-command": _unknown_command,
    "config-missing": _config_missing,
    "config-unknown-section": _config_unknown_section,
    "config-unknown-key": _config_unknown_key,
    "config-batch-bool": _config_batch_bool,
    "config-threads-text": _config_threads_text,
    "config-trust-text": _config_trust_text,
    "config-section-not-table": _config_section_not_table,
    "config-bad-input-spec": _config_bad_input_spec,
    "config-zero-batch": _config_zero_batch,
    "config-nan-budget": _config_nan_budget,
    "config-budget-bool": _config_budget_bool,
    "config-budget-text": _config_budget_text,
    "config-threads-fraction": _config_threads_fraction,
    "config-device-list": _config_device_list,
    "config-options-not-list": _config_options_not_list,
    "config-store-number": _config_store_number,
    "config-invalid-toml": _config_invalid_toml,
    "config-not-utf8": _config_not_utf8,
}


OWN_BUDGET_CASES = {"config-nan-budget", "config-budget-bool", "config-budget-text"}


def _param(name: str) -> object:
    return pytest.param(MEASURE_CASES[name], id=name)


def _argv(name: str, args: list[str], store: Path) -> list[str]:
    """Store and the short budget go first, so a case's own later flags win (and a trailing
    flag with its value missing stays last); config cases that set the budget get no flag."""
    fast = [] if name in OWN_BUDGET_CASES else list(FAST)
    return [args[0], "--store", str(store), *fast, *args[1:]]


@pytest.mark.parametrize("case", [_param(name) for name in MEASURE_CASES])
def test_bad_measure_input_is_one_line_exit_2_and_writes_nothing(
    case: Case, request: pytest.FixtureRequest, tmp_path: Path, cli: CliRunner
) -> None:
    name = request.node.callspec.id
    args, mention = case(tmp_path)
    code, out, err = cli(*_argv(name, args, tmp_path / "r.db"))
    assert_one_line_error(code, err, mention)
    if name.startswith("config-") and name not in ("config-missing", "config-invalid-toml"):
        assert "cfg.toml" in err or "latin.toml" in err  # the line names the file
    assert out == ""
    assert_nothing_written(tmp_path)


# --------------------------------------------------------------------------------------------
# the config file feeds the flags (click's default_map): same conversion, flags win


class _Called(Exception):
    """Raised instead of measuring: carries the request the CLI built."""

    def __init__(self, request: MeasureRequest, command_line: str | None) -> None:
        super().__init__("measure called")
        self.request = request
        self.command_line = command_line


@pytest.fixture
def measure_request(monkeypatch: pytest.MonkeyPatch) -> Callable[..., MeasureRequest]:
    """Run ``accelscope measure ARGS`` up to the workflow call; return the request."""
    import accelscope.commands.measure.workflow as commands

    def fake_measure(request: MeasureRequest, **kwargs: Any) -> None:
        raise _Called(request, kwargs.get("command_line"))

    monkeypatch.setattr(commands, "measure", fake_measure)

    def run(*args: str) -> MeasureRequest:
        with pytest.raises(_Called) as called:
            main(["--debug", "measure", *args])
        return called.value.request

    return run


def test_measure_defaults_are_the_requests(
    measure_request: Callable[..., MeasureRequest],
) -> None:
    """No flag and no file: every default comes from MeasureRequest / TimerConfig alone."""
    assert measure_request() == MeasureRequest(model=DEFAULT_MODEL)


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        ('budget = "2s"', ["--budget", "2s"]),
        ("budget = 2", ["--budget", "2"]),
        ('target_ci = "5%"', ["--target-ci", "5%"]),
        ("target_ci = 0.05", ["--target-ci", "0.05"]),
        ("batch = [1, 8]", ["--batch", "1,8"]),
        ('batch = "1,8"', ["--batch", "1,8"]),
        ("batch = 4", ["--batch", "4"]),
        ('threads = "2"', ["--threads", "2"]),
        ('precision = "BF16"', ["--precision", "BF16"]),
        ('device = "cuda:0"', ["--device", "cuda:0"]),
        ('options = ["channels_last=true"]', ["--option", "channels_last=true"]),
        ('store = "elsewhere.db"', ["--store", "elsewhere.db"]),
    ],
)
def test_config_value_converts_exactly_like_the_flag(
    text: str,
    flags: list[str],
    tmp_path: Path,
    measure_request: Callable[..., MeasureRequest],
) -> None:
    cfg = _write_config(tmp_path, f'[model]\nref = "digits-cnn"\n[run]\n{text}\n')
    from_file = measure_request("--config", cfg)
    from_flag = measure_request("digits-cnn", *flags)
    assert from_file == from_flag
    assert from_file != MeasureRequest(model="digits-cnn") or "store" in text


def test_flags_win_over_the_config_file(
    tmp_path: Path, measure_request: Callable[..., MeasureRequest]
) -> None:
    cfg = _write_config(
        tmp_path,
        '[model]\nref = "digits-cnn"\ninputs = [{name = "x", shape = ["N", 16]}]\n'
        '[run]\nbatch = [2]\nbudget = "3s"\nthreads = 1\noptions = ["a=1"]\n',
    )
    request = measure_request("--config", cfg, "--batch", "5", "--option", "b=2", "tiny.py:make")
    assert request.model == "tiny.py:make" and request.batch_sizes == (5,)
    assert request.options == (("b", "2"),)
    assert request.timer.budget_s == 3.0 and request.threads == 1  # not overridden: the file's
    assert request.inputs is not None and request.inputs[0].shape == ("N", 16)


def test_config_wrong_type_names_file_section_and_key(tmp_path: Path, cli: CliRunner) -> None:
    cfg = _write_config(tmp_path, '[model]\nref = "digits-cnn"\n[run]\nthreads = "two"\n')
    code, out, err = cli("measure", "--config", cfg, "--threads", "1")
    # a bad file value is refused even where a flag overrides it
    assert_one_line_error(code, err, "cfg.toml", "run.threads", "two")
    assert out == ""


def test_command_line_is_passed_by_the_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import accelscope.commands.measure.workflow as commands

    seen: list[str | None] = []

    def fake_measure(request: MeasureRequest, **kwargs: Any) -> None:
        seen.append(kwargs.get("command_line"))
        raise _Called(request, kwargs.get("command_line"))

    monkeypatch.setattr(commands, "measure", fake_measure)
    monkeypatch.setattr("sys.argv", ["accelscope", "measure", "my model", "--batch", "2"])
    with pytest.raises(_Called):
        main(["--debug", "measure", "digits-cnn"])
    assert seen == ["accelscope measure 'my model' --batch 2"]


def test_model_failing_on_first_call_is_bad_input(tmp_path: Path, cli: CliRunner) -> None:
    """A Linear(16, 4) fed (N, 3): exit 2 with the input spec and torch's complaint."""
    args = ["measure", tiny_factory(tmp_path), "--input", "x:N,3:float32", "--batch", "2"]
    code, out, err = cli(*args, *FAST, "--store", str(tmp_path / "r.db"))
    assert_one_line_error(code, err, "tiny.py:make", "x:N,3:float32", "first call", "batch 2")
    assert out == ""
    assert not (tmp_path / "r.db").exists() or _store_is_empty(tmp_path / "r.db")


def _store_is_empty(path: Path) -> bool:
    with sqlite3.connect(path) as db:
        count = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    db.close()
    return int(count) == 0


def test_model_failing_on_first_call_creates_no_store(tmp_path: Path, cli: CliRunner) -> None:
    args = ["measure", tiny_factory(tmp_path), "--input", "x:N,3:float32"]
    code, _, err = cli(*args, *FAST, "--store", str(tmp_path / "r.db"))
    assert code == 2, err
    assert_nothing_written(tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_device_on_a_cpu_machine(tmp_path: Path, cli: CliRunner) -> None:
    args = ["measure", "digits-cnn", "--device", "cuda", *FAST, "--store", str(tmp_path / "r.db")]
    code, _, err = cli(*args)
    assert_one_line_error(code, err, "CUDA", "not available")
    assert_nothing_written(tmp_path)


# --------------------------------------------------------------------------------------------
# pickles: refused without --trust-model-code, and the payload provably did not run


def test_malicious_pickle_as_model_is_refused_and_does_not_run(
    tmp_path: Path, cli: CliRunner
) -> None:
    evil, marker = malicious_pt(tmp_path)
    args = ["measure", str(evil), *TINY_INPUT, *FAST, "--store", str(tmp_path / "r.db")]
    code, _, err = cli(*args)
    assert_one_line_error(code, err, "evil.pt", "--trust-model-code")
    assert not marker.exists(), "the pickle payload ran without --trust-model-code"
    assert_nothing_written(tmp_path)


def test_malicious_pickle_as_weights_is_refused_and_does_not_run(
    tmp_path: Path, cli: CliRunner
) -> None:
    evil, marker = malicious_pt(tmp_path)
    args = ["measure", "digits-cnn", "--weights", str(evil), *FAST]
    code, _, err = cli(*args, "--store", str(tmp_path / "r.db"))
    assert_one_line_error(code, err, "evil.pt", "--trust-model-code")
    assert not marker.exists(), "the pickle payload ran without --trust-model-code"
    assert_nothing_written(tmp_path)


def test_malicious_pickle_in_config_weights_is_refused(tmp_path: Path, cli: CliRunner) -> None:
    evil, marker = malicious_pt(tmp_path)
    cfg = _write_config(tmp_path, f'[model]\nref = "digits-cnn"\nweights = "{evil}"\n')
    args = ["measure", "--config", cfg, *FAST, "--store", str(tmp_path / "r.db")]
    code, _, err = cli(*args)
    assert_one_line_error(code, err, "--trust-model-code")
    assert not marker.exists()
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("where", ["model", "weights"])
def test_trust_model_code_is_the_gate(where: str, tmp_path: Path, cli: CliRunner) -> None:
    """With the flag the same file is unpickled (the payload runs): the flag is what gates it.

    The payload is not a model or a state dict, so the command still fails, cleanly.
    """
    evil, marker = malicious_pt(tmp_path)
    if where == "model":
        args = ["measure", str(evil), *TINY_INPUT]
    else:
        args = ["measure", "digits-cnn", "--weights", str(evil)]
    store = ["--store", str(tmp_path / "r.db")]
    code, _, err = cli(*args, "--trust-model-code", *FAST, *store)
    assert marker.exists(), "--trust-model-code did not let the file be unpickled"
    assert_one_line_error(code, err, "evil.pt")
    assert "--trust-model-code" not in err
    assert_nothing_written(tmp_path)


# --------------------------------------------------------------------------------------------
# the store path itself is bad


def test_store_path_under_a_regular_file(tmp_path: Path, cli: CliRunner) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("I am a file, not a directory\n")
    store = blocker / "r.db"
    args = ["measure", tiny_factory(tmp_path), *TINY_INPUT, *FAST, "--store", str(store)]
    code, out, err = cli(*args)
    assert_one_line_error(code, err, str(store))
    assert out == ""
    assert blocker.read_text() == "I am a file, not a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "cwd", "tiny.py"]


def test_store_path_is_a_directory(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "store.d"
    store.mkdir()
    args = ["measure", tiny_factory(tmp_path), *TINY_INPUT, *FAST, "--store", str(store)]
    code, out, err = cli(*args)
    assert_one_line_error(code, err, "store.d", "directory")
    assert out == ""
    assert list(store.iterdir()) == []


def test_store_path_is_a_text_file(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "notes.txt"
    text = "shopping list\n- milk\n- eggs\n" * 50
    store.write_text(text)
    args = ["measure", tiny_factory(tmp_path), *TINY_INPUT, *FAST, "--store", str(store)]
    code, out, err = cli(*args)
    assert_one_line_error(code, err, "notes.txt")
    assert out == ""
    assert store.read_text() == text
    assert not (tmp_path / "notes.txt-wal").exists()


def test_store_path_is_a_foreign_sqlite_file(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "other.db"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('ada')")
    db.close()
    before = store.read_bytes()
    args = ["measure", tiny_factory(tmp_path), *TINY_INPUT, *FAST, "--store", str(store)]
    code, out, err = cli(*args)
    assert_one_line_error(code, err, "other.db", "not an accelscope results store")
    assert out == ""
    with sqlite3.connect(store) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master")]
    db.close()
    assert tables == ["customers"]
    assert store.read_bytes() == before, "the foreign SQLite file was modified"


# --------------------------------------------------------------------------------------------
# runs list / show / export


@pytest.fixture
def empty_store(tmp_path: Path) -> Path:
    path = tmp_path / "existing.db"
    ResultStore(path).close()
    return path


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_runs_show_unknown_id(empty_store: Path, tmp_path: Path, cli: CliRunner) -> None:
    before = _snapshot(tmp_path)
    code, out, err = cli("runs", "show", "20990101-deadbeef", "--store", str(empty_store))
    assert_one_line_error(code, err, "20990101-deadbeef")
    assert out == ""
    assert _snapshot(tmp_path) == before


def test_runs_show_latest_of_an_empty_store(
    empty_store: Path, tmp_path: Path, cli: CliRunner
) -> None:
    before = _snapshot(tmp_path)
    code, _, err = cli("runs", "show", "latest", "--store", str(empty_store))
    assert_one_line_error(code, err, "existing.db", "no runs")
    assert _snapshot(tmp_path) == before


def test_runs_list_with_zero_limit(empty_store: Path, tmp_path: Path, cli: CliRunner) -> None:
    code, _, err = cli("runs", "list", "--limit", "0", "--store", str(empty_store))
    assert_one_line_error(code, err, "limit")


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["runs", "list"], id="list"),
        pytest.param(["runs", "show", "latest"], id="show"),
        pytest.param(["runs", "export", "latest"], id="export"),
    ],
)
def test_runs_on_a_store_that_does_not_exist(
    args: list[str], tmp_path: Path, cli: CliRunner
) -> None:
    code, out, err = cli(*args, "--store", str(tmp_path / "r.db"))
    assert_one_line_error(code, err, "r.db")
    assert out == ""
    assert_nothing_written(tmp_path)


def test_runs_export_unknown_format(tmp_path: Path, cli: CliRunner) -> None:
    target = tmp_path / "out.xml"
    args = ["runs", "export", "latest", "--format", "xml", "-o", str(target)]
    code, out, err = cli(*args, "--store", str(tmp_path / "r.db"))
    assert_one_line_error(code, err, "'xml'")
    assert out == ""
    assert not target.exists()
    assert_nothing_written(tmp_path)


def test_runs_export_unknown_format_on_existing_store(
    empty_store: Path, tmp_path: Path, cli: CliRunner
) -> None:
    before = _snapshot(tmp_path)
    args = ["runs", "export", "latest", "--format", "yaml", "--store", str(empty_store)]
    code, _, err = cli(*args)
    assert_one_line_error(code, err, "'yaml'")
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------------------------
# --debug


def test_debug_lets_the_error_propagate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "r.db"
    args = ["--debug", "measure", "resnet5000", *FAST, "--store", str(store)]
    with pytest.raises(BadInputError, match="resnet5000") as raised:
        main(args)
    assert isinstance(raised.value, AccelscopeError)
    assert raised.value.exit_code == 2
    assert capsys.readouterr().err == ""
    assert not store.exists()


def test_debug_propagates_unsafe_model_error(tmp_path: Path) -> None:
    evil, marker = malicious_pt(tmp_path)
    args = ["--debug", "measure", str(evil), *TINY_INPUT, *FAST, "--no-store"]
    with pytest.raises(UnsafeModelError, match="--trust-model-code"):
        main(args)
    assert not marker.exists()


def test_without_debug_the_same_error_returns_2(cli: CliRunner) -> None:
    code, _, err = cli("measure", "resnet5000", *FAST, "--no-store")
    assert_one_line_error(code, err, "resnet5000")


# --------------------------------------------------------------------------------------------
# error mapping around the parser


def test_ctrl_c_while_loading_is_exit_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    import accelscope.commands.measure.workflow as commands

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "measure", interrupted)
    code, _, err = cli("measure", "digits-cnn", "--store", str(tmp_path / "r.db"))
    assert code == 130
    assert err.strip() == "interrupted"
    assert_nothing_written(tmp_path)


def test_no_arguments_shows_help_without_an_internal_error(
    cli: CliRunner,
) -> None:
    code, out, err = cli()
    assert "Usage" in out + err
    assert "internal error" not in err
    assert code in (0, 2)
