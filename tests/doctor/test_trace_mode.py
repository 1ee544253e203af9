"""``accelscope doctor --trace FILE|DIR`` through the real CLI on hand-made torch.profiler
traces (the builders of test_device_timeline.py): the verdict and advice per archetype, the
busy share beside NVML/GPM, ``.json.gz``, a directory of ranks naming the slowest, the
what-ifs-need-the-script note, and bad traces as one line, exit 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from test_device_timeline import (
    TraceBuilder,
    device_bound,
    input_bound,
    launch_bound,
    pageable,
    steps,
    sync_bound,
)

from accelscope.testing import CliRunner, assert_one_line_error
from browser import Dom, browse, console_messages, page_requests


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def _write(path: Path, body: Any, n: int = 3) -> Path:
    document = steps(TraceBuilder(), n, body).document()
    text = json.dumps(document)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _json(cli: CliRunner, *args: str | Path) -> dict[str, Any]:
    code, out, err = cli("doctor", "--trace", *args, "--json")
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


@pytest.mark.parametrize(
    ("body", "bottleneck", "advice"),
    [
        (sync_bound, "sync", "read them every N steps"),
        (pageable, "h2d_pageable", "pin_memory=True"),
        (input_bound, "dataloader", "num_workers"),
        (launch_bound, "launch", "CUDA graphs"),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_trace_names_the_archetype(
    tmp_path: Path, cli: CliRunner, body: Any, bottleneck: str, advice: str
) -> None:
    trace = _write(tmp_path / "trace.json", body)
    document = _json(cli, trace)
    (rank,) = document["ranks"]
    assert rank["verdict"]["bottleneck"] == bottleneck
    assert advice in rank["verdict"]["advice"] and "bf16" not in rank["verdict"]["advice"]
    assert rank["step_source"] == "ProfilerStep" and len(rank["steps"]) == 3
    for step in rank["steps"]:
        assert all(0.0 <= v <= 1.0 for v in step["shares"].values())
        assert step["busy_share"] + step["idle_share"] == pytest.approx(1.0)
    assert "what-ifs need the script" in document["what_ifs"]


def test_terminal_view_prints_busy_beside_nvml_and_gpm(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "trace.json", sync_bound)
    code, out, err = cli("doctor", "--trace", trace, "--sm-active", "0.01", "--gpu-util", "0.09")
    assert code == 0, err
    assert "bottleneck: sync" in out
    assert "GPU busy 10%" in out and "NVML utilisation 9%" in out and "GPM SM active 1%" in out
    assert "advice: per-step readbacks" in out
    assert "what-ifs need the script: run accelscope doctor SCRIPT" in out
    assert "compute-bound" not in out and "bf16" not in out
    code, out, _ = cli("doctor", "--trace", trace)
    assert code == 0 and "SM active not measured (give --sm-active)" in out


def test_underfilled_and_device_bound_through_the_cli(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "trace.json", device_bound)
    busy = _json(cli, trace, "--sm-active", "0.05")["ranks"][0]["verdict"]
    assert busy["bottleneck"] == "underfilled" and "bf16" not in busy["advice"]
    bound = _json(cli, trace, "--sm-active", "0.8")["ranks"][0]["verdict"]
    assert bound["bottleneck"] == "compute" and bound["compute_share"] == pytest.approx(0.95)


def test_json_gz_trace(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "rank0.pt.trace.json.gz", pageable)
    document = _json(cli, trace)
    assert document["ranks"][0]["verdict"]["bottleneck"] == "h2d_pageable"
    assert document["ranks"][0]["device"] == "NVIDIA H200"


def test_directory_of_ranks_names_the_slowest(tmp_path: Path, cli: CliRunner) -> None:
    ranks = tmp_path / "traces"
    ranks.mkdir()
    _write(ranks / "host_rank0.pt.trace.json", device_bound)

    builder = TraceBuilder()
    for i in range(3):
        t0 = 1_000_000.0 + i * 12_000
        builder.step(i, t0, 12_000)  # rank 1's steps take 12 ms
        builder.step(99 + i, t0, 0)  # a zero-length annotation is not a step
        input_bound(builder, t0)
    document = builder.document()
    (ranks / "host_rank1.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps(document).encode())
    )
    (ranks / "notes.txt").write_text("not a trace", encoding="utf-8")
    result = _json(cli, ranks)
    assert [r["rank"] for r in result["ranks"]] == ["host_rank0.pt.trace", "host_rank1.pt.trace"]
    assert result["slowest"] == "host_rank1.pt.trace"
    assert result["ranks"][1]["mean_step_s"] == pytest.approx(0.012)
    code, out, err = cli("doctor", "--trace", ranks)
    assert code == 0, err
    assert "host_rank1.pt.trace (slowest)" in out and "slowest rank" in out


def _bad(tmp_path: Path, kind: str) -> Path:
    good = json.dumps(steps(TraceBuilder(), 2, device_bound).document())
    path = tmp_path / "bad.json"
    if kind == "not-json":
        path.write_text("<html>not a trace</html>", encoding="utf-8")
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif kind == "truncated-json":
        path.write_text(good[: len(good) // 2], encoding="utf-8")
    elif kind == "truncated-gz":
        path = tmp_path / "bad.json.gz"
        path.write_bytes(gzip.compress(good.encode())[:200])
    elif kind == "no-events":
        path.write_text(json.dumps({"schemaVersion": 1}), encoding="utf-8")
    elif kind == "no-gpu":
        cpu = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}
        path.write_text(json.dumps(cpu), encoding="utf-8")
    elif kind == "missing":
        path = tmp_path / "missing.json"
    elif kind == "empty-dir":
        path = tmp_path / "empty"
        path.mkdir()
    return path


@pytest.mark.parametrize(
    ("kind", "mention"),
    [
        ("not-json", "not JSON"),
        ("binary", "not JSON"),
        ("truncated-json", "truncated"),
        ("truncated-gz", "truncated"),
        ("no-events", "no traceEvents"),
        ("no-gpu", "no GPU events"),
        ("missing", "not found"),
        ("empty-dir", "no .json or .json.gz files"),
    ],
)
def test_bad_traces_are_one_line_exit_2(
    tmp_path: Path, cli: CliRunner, kind: str, mention: str
) -> None:
    code, out, err = cli("doctor", "--trace", _bad(tmp_path, kind))
    assert_one_line_error(code, err, mention)
    assert out == ""


def test_gzip_is_told_by_its_bytes_not_its_name(tmp_path: Path, cli: CliRunner) -> None:
    good = json.dumps(steps(TraceBuilder(), 2, device_bound).document())
    plain = tmp_path / "plain.json.gz"  # plain JSON named .gz
    plain.write_text(good, encoding="utf-8")
    packed = tmp_path / "packed.json"  # gzip named .json
    packed.write_bytes(gzip.compress(good.encode()))
    for path in (plain, packed):
        code, _, err = cli("doctor", "--trace", path)
        assert code == 0, err


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (["train.py", "--trace", "{trace}"], "not both"),
        ([], "missing SCRIPT"),
        (["--trace", "{trace}", "--sm-active", "1.5"], "--sm-active must be a fraction"),
        (["--trace", "{trace}", "--gpu-util", "-0.1"], "--gpu-util must be a fraction"),
        (["train.py", "--sm-active", "0.5"], "--sm-active is for --trace"),
    ],
)
def test_trace_flag_misuse(tmp_path: Path, cli: CliRunner, args: list[str], mention: str) -> None:
    trace = _write(tmp_path / "trace.json", device_bound)
    (tmp_path / "cwd" / "train.py").write_text("print('never run')\n", encoding="utf-8")
    code, out, err = cli("doctor", *[a.format(trace=trace) for a in args])
    assert_one_line_error(code, err, mention)
    assert "never run" not in out


@pytest.mark.server
def test_html_report_is_written_escaped_and_scriptless(tmp_path: Path, cli: CliRunner) -> None:
    hostile = "<img src=x onerror=\"document.title='PWNED'\">"
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    _write(ranks / f"rank0{hostile}.json", sync_bound)
    _write(ranks / "rank1.json", pageable)
    report = tmp_path / "trace.html"
    code, out, err = cli("doctor", "--trace", ranks, "--report", report)
    assert code == 0, err
    assert f"report: {report}" in out
    html = report.read_text(encoding="utf-8")
    assert hostile not in html and "&lt;img src=x" in html
    assert "<script" not in html and "script-src" not in html
    assert "bottleneck: sync" in html and "bottleneck: h2d_pageable" in html
    assert "(slowest)" in html and "what-ifs need the script" in html
    assert "pin_memory=True" in html and "GPM SM active not measured" in html
    done = browse(report, tmp_path / "chromium")  # headless chromium, as every report
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []
    assert "PWNED" not in Dom(done.dom).title
    assert "bottleneck: sync" in done.dom


def test_report_path_checked_before_reading(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "trace.json", device_bound)
    code, _, err = cli("doctor", "--trace", trace, "--report", tmp_path / "no" / "r.html")
    assert_one_line_error(code, err, "does not exist")
