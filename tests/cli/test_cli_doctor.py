"""``accelscope doctor`` through the real CLI: bad input (one line, exit 2, nothing written),
and one full run: store documents, ``runs show``, the Chrome trace and the offline HTML report
checked in headless chromium (same detectors as tests/commands/bench/test_bench_html.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from browser import Dom, browse, console_messages, page_requests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "doctor"
HOSTILE = "<img src=x onerror=\"document.title='PWNED'\">"


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # see tests/doctor/test_doctor_examples.py


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (["missing.py"], "not found"),
        (["{dir}"], "is not a file"),
        (["{txt}"], "not a Python file"),
        (["{py}", "--steps", "0"], "--steps must be a positive integer"),
        (["{py}", "--steps", "x"], "Invalid value for '--steps'"),
        (["{py}", "--warmup", "-1"], "--warmup must be 0 or more"),
        (["{py}", "--what-if", "warp-drive"], "unknown what-if 'warp-drive'"),
        (["{py}", "--what-if", "bf16=3"], "takes no value"),
        (["{py}", "--device", "tpu"], "unknown device"),
        (["{py}", "--device", "cuda"], "not available"),
        (["{py}", "--timeout", "soon"], "not understood"),
        (["{py}", "--report", "{dir}/no/such/r.html"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, cli: CliRunner, args: list[str], mention: str
) -> None:
    (tmp_path / "train.txt").write_text("x", encoding="utf-8")
    (tmp_path / "train.py").write_text("print('never run')\n", encoding="utf-8")
    names = {
        "dir": str(tmp_path),
        "txt": str(tmp_path / "train.txt"),
        "py": str(tmp_path / "train.py"),
    }
    store = tmp_path / "r.db"
    code, out, err = cli("doctor", *[a.format(**names) for a in args], "--store", str(store))
    assert_one_line_error(code, err, mention)
    assert "never run" not in out
    assert not store.exists() and not (tmp_path / "cwd" / ".accelscope").exists()


@pytest.mark.server
def test_full_run_store_show_trace_and_report(tmp_path: Path, cli: CliRunner) -> None:
    script = tmp_path / f"sync{HOSTILE[:4]}.py"  # a name with markup characters
    shutil.copy(EXAMPLES / "sync_bound.py", script)
    store = tmp_path / "results.db"
    report = tmp_path / "doctor.html"
    code, out, err = cli(
        "doctor",
        str(script),
        "--steps",
        "6",
        "--warmup",
        "2",
        "--what-if",
        "none",
        "--store",
        str(store),
        "--report",
        str(report),
        "--",
        "--steps",
        "40",
    )
    assert code == 0, err
    assert "bottleneck: sync" in out and "synchronisation-bound" in out
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.kind == "doctor" and run.status == "complete"
    (diagnosis,) = run.documents_of("diagnosis")
    assert diagnosis["diagnosis"]["bottleneck"] == "sync-bound"
    assert diagnosis["args"] == ["--steps", "40"] and run.documents_of("telemetry")
    code, out, _ = cli("runs", "show", run.id, "--store", str(store))
    assert code == 0 and "synchronisation-bound" in out

    trace = json.loads(report.with_name("doctor.trace.json").read_text(encoding="utf-8"))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in complete if e["tid"] == 1] == ["step 2", "step 3", "step 4"]
    assert {e["name"] for e in complete} >= {"forward", "backward", "optimizer", "sync"}

    doc = report.read_text(encoding="utf-8")
    assert "<img src" not in doc and "connect-src 'none'" in doc
    done = browse(report, tmp_path / "chromium")
    assert console_messages(done.stderr) == []
    for chart in ("chart-breakdown", "chart-telemetry"):
        assert re.search(rf'id="{chart}"[^>]*class="[^"]*js-plotly-plot', done.dom), chart
    assert "PWNED" not in Dom(done.dom).title
    assert page_requests(done.netlog) == []
