"""The roofline HTML report: escaped, self-contained, and drawn by plotly in headless chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelscope.commands.roofline.html import render_roofline_report, roofline_figure
from accelscope.roofline.analysis import RooflineAnalysis, build_profile
from accelscope.roofline.counting import OpRecord
from browser import browse, console_messages, page_requests
from roofline_helpers import make_ceilings

HOSTILE = (
    "<img src=x onerror=\"document.title='PWNED'\"></script><script>document.title='PWNED'</script>"
)


def _profile() -> RooflineAnalysis:
    records = [
        OpRecord(
            name="aten::conv2d",
            category="conv",
            dtype="bf16",
            flops=4e9,
            read_bytes=2_000_000,
            written_bytes=1_000_000,
        ),
        OpRecord(
            name="aten::relu_",
            category="elementwise",
            dtype="bf16",
            flops=1e6,
            read_bytes=2_000_000,
            written_bytes=2_000_000,
        ),
        OpRecord(
            name="aten::layer_norm",
            category="norm",
            dtype="fp32",
            flops=7e6,
            read_bytes=4_000_000,
            written_bytes=4_000_000,
        ),
        OpRecord(
            name="aten::to",
            category="movement",
            dtype="bf16",
            flops=0.0,
            read_bytes=4_000_000,
            written_bytes=2_000_000,
        ),
        OpRecord(
            name=f"aten::{HOSTILE}",
            category="uncounted",
            dtype="fp32",
            flops=None,
            read_bytes=100,
            written_bytes=100,
        ),
    ]
    return build_profile(
        model=f"model {HOSTILE}",
        backend="eager",
        precision="bf16",
        batch_size=8,
        device="cpu",
        threads=2,
        ceilings=make_ceilings(),
        records=records,
        times_s=[5e-3, 1e-3, 2e-3, 1e-3, 1e-5],
        measured_time_s=0.012,
    )


def test_figure_has_both_roofs_per_dtype_and_points_sized_by_time() -> None:
    figure = roofline_figure(_profile())
    names = [trace["name"] for trace in figure["data"]]
    assert "bf16 roof" in names and "fp32 roof" in names
    points = next(t for t in figure["data"] if t["name"] == "bf16 operators")
    assert len(points["x"]) == 2  # conv2d and relu_ (to has 0 FLOPs: not on a log axis)
    assert points["marker"]["size"][0] > points["marker"]["size"][1]  # conv took longer
    roof = next(t for t in figure["data"] if t["name"] == "bf16 roof")
    assert max(roof["y"]) == pytest.approx(4e12)  # the bf16 compute roof
    assert figure["layout"]["xaxis"]["type"] == figure["layout"]["yaxis"]["type"] == "log"


def test_report_escapes_user_text_and_is_self_contained() -> None:
    doc = render_roofline_report(_profile())
    assert HOSTILE not in doc
    assert "&lt;img src=x" in doc  # jinja-escaped in markup
    assert "\\u0026lt;img" in doc  # html-escaped plotly label, then script-safe JSON
    assert "Content-Security-Policy" in doc
    assert not re.search(r"<script[^>]+src=", doc) and "<link" not in doc


@pytest.mark.server
def test_report_draws_in_headless_chromium_without_console_or_network(tmp_path: Path) -> None:
    page = tmp_path / "roofline.html"
    page.write_text(render_roofline_report(_profile()), encoding="utf-8")
    done = browse(page, tmp_path / "browser")
    dom = done.dom
    assert re.search(r'id="chart-roofline"[^>]*class="[^"]*js-plotly-plot', dom) or re.search(
        r'class="[^"]*js-plotly-plot[^"]*"[^>]*id="chart-roofline"', dom
    ), "plotly did not draw"
    assert "bf16 roof" in dom  # legend text drawn by plotly
    assert "<title>PWNED" not in dom
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []
