"""The audit report in headless chromium: heat map, hours and waterfall drawn, no console
output, no network request, hostile pod names (telemetry is untrusted) inert."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelscope.audit.telemetry import Series
from accelscope.commands.audit.html import render_audit_report
from accelscope.commands.audit.workflow import AuditRequest, audit
from accelscope.testing.fleet import dumps_query_range, fleet
from browser import Dom, browse, console_messages, page_requests

HOSTILE = "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'"


def _document(tmp_path: Path) -> dict[str, object]:
    series = fleet(step_s=600.0)
    times = series[0].times_s
    labels = {
        "Hostname": HOSTILE,
        "gpu": "0",
        "modelName": "NVIDIA L4",
        "pod": HOSTILE,
        "namespace": "evil",
    }
    series.append(Series("DCGM_FI_DEV_GPU_UTIL", labels, times, np.zeros(times.size)))
    export = tmp_path / "fleet.json"
    export.write_text(dumps_query_range(series))
    return audit(AuditRequest(export=export), store_path=None).document


@pytest.mark.server
def test_report_in_a_real_browser(tmp_path: Path) -> None:
    document = _document(tmp_path)
    html = render_audit_report(document, title="audit " + HOSTILE)
    assert HOSTILE not in html and "&lt;img src=x" in html
    assert "connect-src 'none'" in html
    page = tmp_path / "audit.html"
    page.write_text(html, encoding="utf-8")
    done = browse(page, tmp_path / "browser")
    dom = Dom(done.dom)
    classes = {a.get("id"): a.get("class", "") for _, a in dom.tags}
    for chart in ("chart-heatmap", "chart-hours", "chart-waterfall"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    assert dom.title == "audit " + HOSTILE  # shown as text; a script would have set 'PWNED'
    assert not [a for t, a in dom.tags if t == "img" or "onerror" in a]
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []


def test_cli_writes_the_report(tmp_path: Path) -> None:
    from accelscope.cli import main

    export = tmp_path / "fleet.json"
    export.write_text(dumps_query_range(fleet(step_s=600.0)))
    report = tmp_path / "audit.html"
    assert (
        main(["audit", "--from", str(export), "--no-store", "--report", str(report), "--json"]) == 0
    )
    assert report.exists() and "Actions, by $/month" in report.read_text()
