"""The plan report in headless chromium: both charts drawn, no console output, no network
request, hostile strings inert, every projection labelled (needs Debian's chromium)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.plan.html import render_plan_report
from accelscope.documents import RooflineProfile
from accelscope.plan.capacity import given_capacity, project_capacity
from accelscope.plan.catalog import load_catalog
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.service import Evidence, build_plan
from accelscope.plan.traffic import hourly_traffic
from browser import Dom, browse, console_messages, page_requests
from plan_helpers import roofline_payload

HOSTILE = "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'"


def _document() -> dict[str, Any]:
    profile = RooflineProfile.from_payload(roofline_payload())
    traffic = hourly_traffic([20.0] * 8 + [300.0] * 12 + [20.0] * 4, HOSTILE)
    plan = build_plan(
        HOSTILE,
        load_catalog(),
        traffic,
        PlanSettings(0.1),
        Evidence(profile=profile, given_qps=None),
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


@pytest.mark.server
def test_report_in_a_real_browser(tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    page.write_text(render_plan_report(_document(), title="plan " + HOSTILE), encoding="utf-8")
    done = browse(page, tmp_path / "browser")
    dom = Dom(done.dom)
    classes = {a.get("id"): a.get("class", "") for _, a in dom.tags}
    for chart in ("chart-cost", "chart-fleet"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    assert dom.title == "plan " + HOSTILE  # shown as text; a script would have set 'PWNED'
    assert not [a for t, a in dom.tags if t == "img" or "onerror" in a]
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []


def test_given_capacity_is_not_labelled_estimate() -> None:
    assert given_capacity(5.0).label != "estimate" and not given_capacity(5.0).is_estimate
    profile = RooflineProfile.from_payload(roofline_payload())
    assert project_capacity(profile, load_catalog().get("g6.xlarge"), 0.1).label == "estimate"
