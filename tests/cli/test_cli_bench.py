"""``accelscope bench`` through the CLI: a real small sweep, runs show, config file, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.engine.probe import cache_path
from accelscope.hardware.fingerprint import collect_environment
from accelscope.serialise import dump
from accelscope.spec import Precision
from accelscope.testing import CliRunner, assert_one_line_error, fake_probe_table


@pytest.mark.slow
def test_bench_digits_table_verdict_report_and_runs_show(tmp_path: Path, cli: CliRunner) -> None:
    store, report = tmp_path / "r.db", tmp_path / "report.html"
    config = tmp_path / "bench.toml"
    config.write_text(
        '[model]\nref = "digits-cnn"\n'
        '[bench]\nbackends = ["eager"]\nprecisions = ["fp32", "bf16", "int8"]\nbatch = [16]\n'
        'threads = 1\nmeasure_budget = "0.5s"\nmax_accuracy_drop = "1%"\nsla_p99 = "1s"\n'
    )
    # what the bf16 probe measured is scripted (the cache next to the store): 1.5x fp32, so bf16
    # is measured on any CPU; int8 is listed as not available (eager has no int8 path)
    env = collect_environment()
    table = fake_probe_table(env, {("torch", Precision.BF16): 1.5}, threads=1)
    cached = cache_path(tmp_path / "probes", env.fingerprint(), 1)
    cached.parent.mkdir()
    cached.write_text(json.dumps(dump(table)))
    code, out, err = cli(
        "bench",
        "--config",
        str(config),
        "--store",
        str(store),
        "--report",
        str(report),
        "--quiet",
    )
    assert code == 0, err
    assert "★" in out and "Fastest within the 1000 ms p99 SLA" in out
    assert "eager fp32 (95 % CI" in out or "Fastest within the 1000 ms p99 SLA: eager/fp32" in out
    assert "eager/int8/b16/t1: not available" in out  # listed, not silently dropped
    assert "top1_accuracy" in out
    html = report.read_text()
    assert "digits-cnn" in html and "<script src" not in html
    code, shown, _ = cli("runs", "show", "latest", "--store", str(store))
    assert code == 0
    verdict = next(line for line in out.splitlines() if line.startswith("Fastest"))
    assert verdict in shown  # runs show reproduces the table and the verdict
    code, out, _ = cli("runs", "show", "latest", "--store", str(store), "--json")
    statuses = sorted(r["status"] for r in json.loads(out)["results"])
    assert statuses == ["ok", "ok", "skipped"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--strategy", "random"], "random"),
        (["--sla-p99", "fast"], "fast"),
        (["--max-accuracy-drop", "200%"], "200%"),
        (["--option", "channels_last"], "channels_last"),
        (["--backend", "tensorflow"], "tensorflow"),
        (["--precision", "int4"], "int4"),
        (["--threads", "0"], "0"),
        (["--budget", "-5m"], "-5m"),
        (["--plugin", "no_such_plugin_module"], "no_such_plugin_module"),
        (["--resume"], "resume"),
    ],
)
def test_bench_bad_input_is_one_line_exit_2(
    tmp_path: Path, cli: CliRunner, args: list[str], needle: str
) -> None:
    store = tmp_path / "r.db"
    code, _, err = cli("bench", "digits-cnn", "--store", str(store), *args)
    assert_one_line_error(code, err, needle)
    assert not store.exists()


def test_bench_report_in_missing_directory_fails_before_the_sweep(
    tmp_path: Path, cli: CliRunner
) -> None:
    code, _, err = cli(
        "bench",
        "digits-cnn",
        "--store",
        str(tmp_path / "r.db"),
        "--report",
        str(tmp_path / "nope" / "r.html"),
    )
    assert_one_line_error(code, err, "does not exist")
    assert not (tmp_path / "r.db").exists()


def test_bench_tf32_takes_a_toml_list_like_the_flag(tmp_path: Path, cli: CliRunner) -> None:
    """``tf32 = ["off", "on"]`` is the flag's ``--tf32 off,on`` (it was refused as 'a string or
    a number'); on a CPU both answer the same one line."""
    config = tmp_path / "bench.toml"
    config.write_text('[model]\nref = "digits-cnn"\n[bench]\ntf32 = ["off", "on"]\nbatch = [4]\n')
    from_file = cli("bench", "--config", str(config), "--no-store")
    from_flag = cli("bench", "digits-cnn", "--tf32", "off,on", "--batch", "4", "--no-store")
    assert_one_line_error(*from_file[::2], "--tf32 on needs --device cuda")
    assert from_file[2] == from_flag[2]
