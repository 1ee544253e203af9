"""The load HTML report and terminal view: escaping, self-containment, a real browser.

Covers: accelscope.commands.load.html, accelscope.commands.load.view."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from accelscope.commands.load.html import render_load_report
from accelscope.commands.load.view import load_view
from accelscope.commands.load.workflow import capacity_document
from accelscope.hardware.fingerprint import Environment
from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.capacity_search import CapacitySearch, PolicyCapacity
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import BatchLinearService, FaultyService
from accelscope.load.scenarios import run_server
from accelscope.load.summary import TrialSettings
from accelscope.spec import Precision, RunSpec
from browser import browse, console_messages, page_requests

HOSTILE = (
    "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'</script>"
)
INSTALL = "apt-get update && apt-get install -y chromium"
SETTINGS = TrialSettings(min_queries=600, min_duration_s=1.0, seed=1, query_timeout_s=1.0)


def _trials() -> list[Any]:
    service = FaultyService(BatchLinearService(0.004, 0.001), fail_queries=frozenset({7}))
    executor = SimulatedExecutor(service, SimClock())
    clean = SimulatedExecutor(BatchLinearService(0.004, 0.001), SimClock())
    trials = [run_server(executor, 50.0, NO_BATCHING, SETTINGS, 0.05)]
    for rate in (80.0, 150.0, 300.0):
        trials.append(run_server(clean, rate, BatchPolicy(8, 0.005), SETTINGS, 0.05))
    return trials


@pytest.fixture
def page(environment: Environment) -> tuple[str, dict[str, Any]]:
    env = environment
    trials = _trials()
    spec = RunSpec(
        model=HOSTILE, backend="eager", precision=Precision.FP32, batch_size=8, threads=1
    )
    search = CapacitySearch(
        (
            PolicyCapacity(
                policy=BatchPolicy(8, 0.005),
                capacity_qps=150.0,
                ceiling_qps=400.0,
                trials=tuple(trials),
            ),
        )
    )
    capacity = capacity_document(HOSTILE, spec, 0.05, env, trials, search)
    doc = render_load_report(
        title="load " + HOSTILE,
        model=HOSTILE,
        label=spec.label(),
        scenario="server",
        sla_p99_s=0.05,
        trials=[t.to_dict() for t in trials],
        capacity=capacity,
        notes=["note " + HOSTILE],
    )
    return doc, capacity


def _figures(doc: str) -> dict[str, Any]:
    match = re.search(r"var figures = (.*);\n", doc)
    assert match
    return {figure["id"]: figure for figure in json.loads(match.group(1))}


def test_hostile_text_is_escaped_everywhere(page: tuple[str, dict[str, Any]]) -> None:
    doc, _capacity = page
    assert HOSTILE not in doc
    assert "&lt;img src=x onerror=" in doc
    body = doc[doc.index("<body>") : doc.index("<script>")]
    assert "<script" not in body and "<img" not in body
    assert "</script><script>document.title" not in doc
    assert "content=\"default-src 'none'" in doc
    assert "https://" not in re.sub(r"<script>.*?</script>", "", doc, flags=re.S)


def test_charts_hold_the_curve_the_sla_and_the_split(page: tuple[str, dict[str, Any]]) -> None:
    doc, capacity = page
    figures = _figures(doc)
    curve = figures["chart-curve"]
    names = [trace["name"] for trace in curve["data"]]
    assert any(n.startswith("p99") for n in names) and any(n.startswith("p50") for n in names)
    sla_lines = [s for s in curve["layout"]["shapes"] if s["yref"] == "y"]
    assert sla_lines and sla_lines[0]["y0"] == pytest.approx(50.0)
    assert capacity["capacity_qps"] > 0
    split = figures["chart-split"]
    assert [t["name"][:5] for t in split["data"]] == ["queue", "compu"]
    assert len(split["data"][0]["x"]) > 10
    assert "Capacity at p99" in doc and "1 queries failed" in doc


def test_terminal_view_shows_verdict_errors_and_notes(page: tuple[str, dict[str, Any]]) -> None:
    _doc, capacity = page
    console = Console(width=200, record=True)
    trials = [t.to_dict() for t in _trials()]
    console.print(
        load_view(
            title="t",
            scenario="server",
            sla_p99_s=0.05,
            trials=trials,
            capacity=capacity,
            notes=["padding note"],
        )
    )
    text = console.export_text()
    assert "Capacity at p99 ≤ 50 ms" in text
    assert "injected failure on query 7" in text and "padding note" in text


@pytest.mark.server
def test_report_draws_in_a_browser_quietly_and_offline(
    page: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    doc, _capacity = page
    html = tmp_path / "load.html"
    html.write_text(doc, encoding="utf-8")
    done = browse(html, tmp_path / "browser")
    dom = done.dom
    for chart in ("chart-curve", "chart-split"):
        assert re.search(rf'id="{chart}"[^>]*class="[^"]*js-plotly-plot', dom), chart
    title = re.findall(r"<title>(.*?)</title>", dom)[0]
    assert title.startswith("load &lt;img")  # still the escaped text: no payload set it
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []
