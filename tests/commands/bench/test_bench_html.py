"""HTML bench report: Pareto front, escaping, self-containment, and a real headless browser.

The browser tests need Debian's chromium (``apt-get update && apt-get install -y chromium``);
without it they fail with that instruction rather than skip. Each browser-side detector (console
errors, network requests, XSS execution, blank screenshots) is first shown to fire on a
deliberately bad page, so a clean result for the report means something.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markupsafe import escape
from plotly.offline import get_plotlyjs

from accelscope.accuracy.fidelity import Fidelity
from accelscope.commands._lifecycle import write_report
from accelscope.commands.bench.html import render_bench_report
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.report.page import script_safe_json
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Precision, RunSpec
from accelscope.sweep.confirm import confirmation_from_blocks
from accelscope.sweep.select import pareto_front
from accelscope.testing import fake_result
from browser import BrowserRun, Dom, browse, console_messages, page_requests

HOSTILE = (
    "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'</script>"
)
TITLE = "bench & report " + HOSTILE


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([], []),
        ([(1.0, 1.0)], [0]),
        ([(10, 5), (20, 10), (15, 20), (5, 1), (20, 12)], [3, 0, 1]),  # ordered by cost
        ([(10, 5), (10, 5)], [0, 1]),  # identical points do not dominate each other
        ([(10, 5), (10, 6)], [0]),  # same value, higher cost: dominated
        ([(10, 5), (12, 5)], [1]),  # same cost, lower value: dominated
        ([(math.nan, 1), (10, math.inf), (5, 5)], [2]),  # non-finite points are ignored
        ([(3, 3), (1, 1), (2, 2)], [1, 2, 0]),  # all optimal, drawn by increasing cost
    ],
)
def test_pareto_front_cases(points: list[tuple[float, float]], front: list[int]) -> None:
    assert pareto_front(points) == front


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=25))
def test_pareto_front_is_exactly_the_non_dominated_points(raw: list[tuple[int, int]]) -> None:
    points = [(float(v), float(c)) for v, c in raw]

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    front = pareto_front(points)
    expected = [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]
    assert sorted(front) == expected
    assert [points[i][1] for i in front] == sorted(points[i][1] for i in front)


def _result(
    env: Environment,
    config: str,
    seconds: float,
    status: Status = Status.OK,
    reason: str = "",
    metric: float = 0.97,
) -> Result:
    """A result for ``backend/precision/batch``; ``seconds == 0`` means it failed unmeasured."""
    backend, precision, batch = config.split("/")
    base = fake_result(env, batch=int(batch))
    assert base.measurement is not None
    options = (("note", HOSTILE),) if backend == "onnxruntime" else ()
    spec = RunSpec(
        model=HOSTILE,
        backend=backend,
        precision=Precision(precision),
        batch_size=int(batch),
        threads=2,
        options=options,
    )
    measurement = dataclasses.replace(base.measurement, samples_s=(seconds,) * 12)
    accuracy = Accuracy(
        fidelity=Fidelity(2e-3, 0.1, 0.999, 0.99),
        metric_name="top1_accuracy",
        metric_value=metric,
        reference_metric_value=0.975,
        metric_source="x",
    )
    return dataclasses.replace(
        base,
        spec=spec,
        status=status,
        status_reason=reason,
        warnings=(HOSTILE,),
        measurement=measurement if seconds else None,
        accuracy=accuracy if seconds else None,
    )


def _sample(env: Environment) -> list[Result]:
    """ok (100, 267 and 200 items/s), rejected (400 items/s) and failed results."""
    return [
        _result(env, "eager/fp32/1", 0.010),
        _result(env, "eager/bf16/8", 0.030),
        _result(env, "onnxruntime/fp32/8", 0.040),
        _result(env, "onnxruntime/int8/8", 0.020, Status.REJECTED, "drop " + HOSTILE, 0.95),
        _result(env, "onnxruntime/fp16/8", 0.0, Status.FAILED, "NotAvailableError: " + HOSTILE),
    ]


@pytest.fixture
def results(environment: Environment) -> list[Result]:
    return _sample(environment)


def _render(results: list[Result], **overrides: Any) -> str:
    keys = [r.spec.key for r in results] + [None, None]
    args: dict[str, Any] = {
        "title": TITLE,
        "model": HOSTILE,
        "best_key": keys[1],
        "lowest_latency_key": keys[0],
        "verdict": "verdict: " + HOSTILE,
        "sla_p99_s": 0.035,
        "baseline_key": keys[0],
    }
    return render_bench_report(results, **(args | overrides))


def _figures(doc: str) -> dict[str, Any]:
    match = re.search(r"var figures = (.*);\n", doc)
    assert match, "the figure data is missing"
    return {figure["id"]: figure for figure in json.loads(match.group(1))}


def test_hostile_text_is_escaped_in_markup_and_in_the_chart_json(results: list[Result]) -> None:
    doc = _render(results)
    assert str(escape(HOSTILE)) in doc and str(escape(TITLE)) in doc
    assert "<img" not in doc.lower()
    assert doc.lower().count("<script") == 2 and doc.lower().count("</script") == 2
    data = doc[doc.index("var figures") :].split("</script>")[0]
    assert "<" not in data and "\\u003cb\\u003e" in data and "\\u0026lt;img" in data
    # The text still reaches the charts, HTML-escaped for plotly (which shows &lt; as <).
    title = _figures(doc)["chart-throughput"]["layout"]["title"]["text"]
    assert "&lt;img src=x onerror=\"document.title='PWNED'\"&gt;" in title


def test_script_safe_json_cannot_close_a_script() -> None:
    value = {"a": "</script><!-- & \u2028 \u2029 <img>"}
    text = script_safe_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


def test_report_is_self_contained(results: list[Result]) -> None:
    doc = _render(results)
    bundle = get_plotlyjs()
    assert f"<script>{bundle}</script>" in doc  # plotly.js embedded verbatim
    for needle in ("<script src", "<link", "@import", "url(http", 'src="http', "src='http"):
        assert needle not in doc.lower(), needle
    ours = doc.replace(bundle, "")  # plotly's own source mentions URLs in strings
    assert not re.search(r"https?://", ours), re.findall(r"https?://\S{0,40}", ours)
    assert "default-src 'none'" in doc and "connect-src 'none'" in doc


def test_table_marks_rows_and_renders_rejected_and_failed(results: list[Result]) -> None:
    doc = _render(results)
    rows = re.findall(r'<tr class="(\w+)( best)?">', doc)
    assert rows == [("ok", ""), ("ok", " best"), ("ok", ""), ("rejected", ""), ("failed", "")]
    assert ">rejected</span>" in doc and ">failed</span>" in doc
    assert str(escape("NotAvailableError: " + HOSTILE)) in doc
    # throughput over the baseline's 100/s; without an interleaved re-measure every ratio
    # crosses processes (one run each), so none reads as a claim
    assert ">1.00\u00d7</td>" in doc
    for speedup in ("2.7", "2.0", "4.0"):
        assert f">~{speedup}\u00d7 (not a claim)</td>" in doc
    assert "separate processes, one run each" in doc
    assert ">lowest latency<" in doc and ">baseline<" in doc and ">best<" in doc
    assert "top1_accuracy 95.00%" in doc and "(\u0394 \u22122.50 pp)" in doc


def test_charts_hold_measured_points_only(results: list[Result]) -> None:
    figures = _figures(_render(results))
    assert set(figures) == {"chart-throughput", "chart-speedup", "chart-accuracy"}
    traces = {t["name"]: t for t in figures["chart-throughput"]["data"]}
    assert len(traces["ok"]["x"]) == 3 and len(traces["rejected"]["x"]) == 1
    assert "failed" not in traces  # the failed result has no measurement
    front = traces["Pareto front (ok only)"]
    assert [round(x) for x in front["x"]] == [10, 30]  # onnxruntime/fp32/b8 is dominated
    assert figures["chart-throughput"]["layout"]["shapes"][0]["x0"] == pytest.approx(35.0)
    bars = figures["chart-speedup"]["data"][0]
    assert [round(x, 2) for x in bars["x"]] == [1.0, 2.0, 2.67, 4.0]
    assert bars["marker"]["opacity"] == [1.0, 0.35, 0.35, 0.35]  # only the baseline is exact
    assert bars["error_x"]["array"] == [0.0] * 4
    accuracy = figures["chart-accuracy"]
    assert [round(y, 2) for y in accuracy["data"][1]["y"]] == [2.5]  # rejected: drop in pp


def test_interleaved_speedups_replace_the_ratios_across_processes(results: list[Result]) -> None:
    # The winner and the runner-up were measured again alternately with the baseline in one
    # worker: their cells show that paired ratio and its interval; the rest stays "not a claim".
    base, best, second = (r.spec.key for r in results[:3])
    blocks = {  # seconds per item, two blocks per round (A B C C B A), 3 rounds
        base: [0.010, 0.011, 0.0105, 0.0095, 0.010, 0.0102],
        best: [0.0027, 0.0029, 0.0028, 0.0026, 0.0027, 0.0028],
        second: [0.0050, 0.0052, 0.0051, 0.0049, 0.0050, 0.0051],
    }
    confirmation = confirmation_from_blocks(
        blocks, best_key=best, baseline_key=base, runner_up_key=second
    )
    assert confirmation.speedup is not None
    doc = _render(results, confirmation=confirmation)
    expected = f"{confirmation.speedup.ratio:.2f}\u00d7 (95 % CI {confirmation.speedup.low:.2f}"
    assert f">{expected}" in doc  # the winner: the verdict's own figure, not the sweep's 2.67
    assert ">~2.7\u00d7 (not a claim)</td>" not in doc
    assert ">~4.0\u00d7 (not a claim)</td>" in doc  # the rejected one was not re-measured
    assert "measured alternately with the baseline in one worker (3 interleaved rounds" in doc
    bars = _figures(doc)["chart-speedup"]["data"][0]
    claims = [o == 1.0 for o in bars["marker"]["opacity"]]
    assert claims.count(True) == 3  # baseline, winner, runner-up
    errors = sorted(e for e, c in zip(bars["error_x"]["array"], claims, strict=True) if c)
    assert errors[0] == 0.0 and errors[1] > 0 and errors[2] > 0  # the baseline has no interval


def test_optional_parts_degrade_to_notes(results: list[Result]) -> None:
    doc = _render(results, baseline_key=None, sla_p99_s=None, best_key=None)
    assert "no measured baseline, so no speedups" in doc and "SLA" not in doc
    figures = _figures(doc)
    assert "chart-speedup" not in figures and "shapes" not in figures["chart-throughput"]["layout"]
    assert figures["chart-accuracy"]["layout"]["xaxis"]["title"]["text"] == "items / s"
    agreement = [
        dataclasses.replace(r, accuracy=Accuracy(fidelity=Fidelity(0.0, 0, 1, 0.9)))
        for r in results[:3]
    ]
    y_axis = _figures(_render(agreement))["chart-accuracy"]["layout"]["yaxis"]
    assert y_axis["type"] == "linear" and "top-1 agreement" in y_axis["title"]["text"]
    fidelity = [
        dataclasses.replace(r, accuracy=Accuracy(fidelity=Fidelity(x, 0, 1, None)))
        for r, x in zip(results[:3], (0.0, 1e-4, 1e-2), strict=True)
    ]
    figure = _figures(_render(fidelity))["chart-accuracy"]
    assert figure["layout"]["yaxis"]["type"] == "log"
    assert "0 drawn at 1e-05" in figure["layout"]["yaxis"]["title"]["text"]
    assert figure["data"][0]["y"] == pytest.approx([1e-5, 1e-4, 1e-2])
    empty = _render([results[4]])  # only the failed result
    assert "no configuration was measured" in empty and "no accuracy was measured" in empty
    assert "no results" in render_bench_report(
        [],
        title="t",
        model="m",
        best_key=None,
        lowest_latency_key=None,
        verdict="",
        sla_p99_s=None,
        baseline_key=None,
    )


def test_write_report_is_atomic_and_reports_bad_paths(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    assert write_report("<p>one</p>", target) == target
    write_report("<p>two</p>", target)
    assert target.read_text(encoding="utf-8") == "<p>two</p>"
    with pytest.raises(BadInputError, match="cannot write the report"):
        write_report("x", tmp_path / "missing" / "report.html")
    with pytest.raises(BadInputError, match="cannot write the report"):
        write_report("x", tmp_path)  # a directory
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temp file left


# Real browser ---------------------------------------------------------------------------------


def _png_is_nontrivial(png: bytes, width: int, height: int) -> bool:
    """Right size, and the filtered scanlines are not (almost) all zero, as a blank page's are."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (width, height)
    chunks, pos = [], 8
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos : pos + 4]), png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            chunks.append(png[pos + 8 : pos + 8 + length])
        pos += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    return (len(raw) - raw.count(0)) / len(raw) > 0.01 and len(set(raw)) > 64


RUNS: dict[str, BrowserRun] = {}
SHOTS: dict[str, bytes] = {}
SHOT_SIZE = (1400, 2300)
CONTROL = """<!DOCTYPE html><html><head><title>control</title></head><body>
<script>console.error("deliberate-console-error");</script>
<script>undefinedFunction();</script>
<img src="http://netlog-control.invalid/pixel.png">
<script>fetch("https://netlog-control.invalid/data.json").catch(function () {});</script>
<img src=x onerror="document.title='PWNED'">
</body></html>"""


@pytest.fixture
def browser(environment: Environment, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs chromium, once per session, on the report and on deliberately bad pages."""
    if RUNS:
        return
    root = tmp_path_factory.mktemp("browser")
    doc = _render(_sample(environment))
    # The report as it would be if an escaping slip let the model name through raw.
    unescaped = doc.replace("<main>", f"<main>{HOSTILE}", 1)
    pages = {
        "report": doc,
        "control": CONTROL,
        "unescaped": unescaped,
        "blank": "<!DOCTYPE html><title>b</title>",
    }
    for name, text in pages.items():
        (root / f"{name}.html").write_text(text, encoding="utf-8")
    for name in ("report", "control", "unescaped"):
        RUNS[name] = browse(root / f"{name}.html", root / name, "--dump-dom")
    for name in ("report", "blank"):
        png = root / f"{name}.png"
        size = f"--window-size={SHOT_SIZE[0]},{SHOT_SIZE[1]}"
        browse(root / f"{name}.html", root / f"{name}-shot", f"--screenshot={png}", size)
        SHOTS[name] = png.read_bytes()


@pytest.mark.server
@pytest.mark.usefixtures("browser")
def test_browser_detectors_fire_on_deliberately_bad_pages() -> None:
    control = RUNS["control"]
    console = "\n".join(console_messages(control.stderr))
    assert "deliberate-console-error" in console and "Uncaught ReferenceError" in console
    requests = page_requests(control.netlog)
    assert "http://netlog-control.invalid/pixel.png" in requests
    assert "https://netlog-control.invalid/data.json" in requests
    assert Dom(control.dom).title == "PWNED"
    assert Dom(RUNS["unescaped"].dom).title == "PWNED"  # the report's CSP would not stop it
    assert not _png_is_nontrivial(SHOTS["blank"], *SHOT_SIZE)


@pytest.mark.server
@pytest.mark.usefixtures("browser")
def test_report_draws_its_charts_in_a_browser() -> None:
    dom = Dom(RUNS["report"].dom)
    classes = {attrs.get("id"): attrs.get("class", "") for _, attrs in dom.tags}
    for chart in ("chart-throughput", "chart-speedup", "chart-accuracy"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    svgs = [a for tag, a in dom.tags if tag == "svg" and "main-svg" in a.get("class", "")]
    assert len(svgs) >= 6  # two per chart
    assert "Pareto front (ok only)" in RUNS["report"].dom  # legend text, drawn by plotly
    assert _png_is_nontrivial(SHOTS["report"], *SHOT_SIZE)


@pytest.mark.server
@pytest.mark.usefixtures("browser")
def test_report_logs_nothing_to_the_console() -> None:
    assert console_messages(RUNS["report"].stderr) == []


@pytest.mark.server
@pytest.mark.usefixtures("browser")
def test_report_requests_nothing_from_the_network() -> None:
    assert page_requests(RUNS["report"].netlog) == []


@pytest.mark.server
@pytest.mark.usefixtures("browser")
def test_report_xss_payloads_do_not_run() -> None:
    dom = Dom(RUNS["report"].dom)
    assert dom.title == TITLE
    assert [tag for tag, _ in dom.tags if tag == "script"] == ["script", "script"]
    assert not [attrs for tag, attrs in dom.tags if tag == "img" or "onerror" in attrs]
