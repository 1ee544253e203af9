"""The plan report in headless chromium: both charts drawn, no console output, no network
request, hostile strings inert, every projection labelled (needs Debian's chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from plan_helpers import roofline_payload

from accelscope.plan.capacity import given_capacity, project_capacity
from accelscope.plan.catalog import load_catalog
from accelscope.plan.documents import RooflineProfile
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.service import Evidence, build_plan
from accelscope.plan.traffic import hourly_traffic
from accelscope.report.plan_html import render_plan_report

HOSTILE = "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'"


def _document() -> dict[str, Any]:
    profile = RooflineProfile.from_payload(roofline_payload())
    traffic = hourly_traffic([20.0] * 8 + [300.0] * 12 + [20.0] * 4, HOSTILE)
    plan = build_plan(
        HOSTILE,
        load_catalog(),
        traffic,
        PlanSettings(0.1),
        Evidence(profile, given_qps=None),
        only=("g6.xlarge", "c7i.8xlarge", "g4dn.xlarge", "p4d.24xlarge"),
    )
    return plan.to_dict()


def test_report_labels_every_projection_and_escapes(tmp_path: Path) -> None:
    doc = _document()
    html = render_plan_report(doc, title="plan " + HOSTILE)
    assert HOSTILE not in html and "&lt;img src=x" in html
    projected = [o for o in doc["options"] if o["capacity"]["basis"] == "projected"]
    assert html.count('class="estimate">estimate<') == len(projected) == 4
    figures = json.loads(re.search(r"var figures = (\[.*?\]);\n", html).group(1))  # type: ignore[union-attr]
    ticks = figures[0]["layout"]["yaxis"]["ticktext"]
    assert ticks and all(t.endswith("(estimate)") for t in ticks)
    fleet = figures[1]["data"]
    assert fleet[0]["name"] == "traffic (qps)" and fleet[0]["y"][10] == 300.0
    assert all(trace["name"].endswith("(estimate) instances") for trace in fleet[1:])
    assert "connect-src 'none'" in html and "http://" not in html.split("<script>")[0]


def _chromium() -> str:
    found = os.environ.get("ACCELSCOPE_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail("chromium is needed: apt-get update && apt-get install -y chromium")
    return found


class _Tags(HTMLParser):
    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.title, self._in_title = "", False
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        self.title += data if self._in_title else ""


def test_report_in_a_real_browser(tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    page.write_text(render_plan_report(_document(), title="plan " + HOSTILE), encoding="utf-8")
    netlog = tmp_path / "netlog.json"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--log-net-log={netlog}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = _Tags(done.stdout)
    classes = {a.get("id"): a.get("class", "") for _, a in dom.tags}
    for chart in ("chart-cost", "chart-fleet"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    assert dom.title == "plan " + HOSTILE  # shown as text; a script would have set 'PWNED'
    assert not [a for t, a in dom.tags if t == "img" or "onerror" in a]
    assert not [line for line in done.stderr.splitlines() if re.search(r":CONSOLE[:(\]]", line)]
    text = netlog.read_text(encoding="utf-8").rstrip().rstrip(",")
    log = json.loads(text if text.endswith("}") else text + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requests = [
        e["params"].get("url", "")
        for e in log["events"]
        if e["type"] == start
        and urlsplit(e["params"].get("url", "")).scheme in ("http", "https")
        and (
            e["params"].get("initiator") != "not an origin"
            or "file://" in str(e["params"].get("network_isolation_key", ""))
        )
    ]
    assert requests == []


def test_given_capacity_is_not_labelled_estimate() -> None:
    assert given_capacity(5.0).label != "estimate" and not given_capacity(5.0).is_estimate
    profile = RooflineProfile.from_payload(roofline_payload())
    assert project_capacity(profile, load_catalog().get("g6.xlarge"), 0.1).label == "estimate"
