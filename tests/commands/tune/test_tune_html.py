"""The tune report: drawn in headless chromium (the Pareto front and the goodput chart drawn,
no console output, no network request), hostile strings (configuration keys, server log lines,
launch commands, reasons: all untrusted) shown as text, never run; and the Pareto front
computed right."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.commands.tune.html import pareto_front, render_tune_report
from accelscope.llm.documents import Arrivals, LlmTrial, RequestRecord, Slo
from accelscope.llm.summary import summarise_trial
from accelscope.tune.documents import TuneConfig, TuneRun, TuneVerdict
from browser import Dom, browse, console_messages, page_requests

HOSTILE = (
    '"><img src=x onerror="document.title=\'PWNED\'"></script>'
    "<script>document.title='PWNED'</script>"
)


def _trial(index: int, ttft_s: float, concurrency: int) -> LlmTrial:
    records = [
        RequestRecord(
            index=i,
            scheduled_s=i * 0.05,
            sent_s=i * 0.05,
            first_token_s=i * 0.05 + ttft_s,
            end_s=i * 0.05 + ttft_s + 0.1,
            chunk_times_s=[i * 0.05 + ttft_s + k * 0.01 for k in range(11)],
            output_tokens=11,
            prompt_tokens=16,
        )
        for i in range(30)
    ]
    summary = summarise_trial(records, slo=Slo.parse("ttft=500ms", 90.0))
    return LlmTrial(
        index=index,
        label=f"concurrency {concurrency}",
        arrivals=Arrivals(concurrency=concurrency),
        summary=summary,
    )


def _run() -> TuneRun:
    fast, slow = _trial(0, 0.02, 4), _trial(1, 0.2, 4)
    configs = [
        TuneConfig(
            key="max-running=1" + HOSTILE,
            role="reference",
            status="measured",
            launch="serve --max-running 1 " + HOSTILE,
            startup_s=3.0,
            load=4.0,
            load_label="concurrency 4",
            goodput_tokens_per_s=120.0,
            point=slow,
            trials=[slow],
        ),
        TuneConfig(
            key="max-running=4",
            status="measured",
            launch="serve --max-running 4",
            startup_s=3.1,
            load=4.0,
            load_label="concurrency 4",
            goodput_tokens_per_s=480.0,
            point=fast,
            trials=[fast],
        ),
        TuneConfig(
            key="max-running=0",
            status="failed",
            failure="configuration refused by the engine",
            why="exited with code 2 " + HOSTILE,
            log_tail="error: argument " + HOSTILE,
        ),
    ]
    return TuneRun(
        engine="template",
        model="m" + HOSTILE,
        slo=Slo.parse("ttft=500ms", 90.0),
        slo_label="p90 TTFT <= 500 ms",
        configs=configs,
        winner="max-running=4",
        winner_launch="serve --max-running 4 " + HOSTILE,
        verdict=TuneVerdict(best="max-running=4", text="verdict " + HOSTILE),
        notes=["note " + HOSTILE],
        skipped=["skipped " + HOSTILE],
    )


@pytest.mark.server
def test_report_in_a_real_browser(tmp_path: Path) -> None:
    html = render_tune_report(_run(), title="accelscope tune: " + HOSTILE)
    assert HOSTILE not in html and "<img src=x" not in html and "&lt;img src=x" in html
    assert "connect-src 'none'" in html
    page = tmp_path / "tune.html"
    page.write_text(html, encoding="utf-8")
    done = browse(page, tmp_path / "browser")
    dom = Dom(done.dom)
    classes = {a.get("id"): a.get("class", "") for _, a in dom.tags}
    for chart in ("chart-pareto", "chart-goodput"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    assert dom.title == "accelscope tune: " + HOSTILE  # shown as text, not run
    assert not [a for t, a in dom.tags if t == "img" or any(k.startswith("on") for k in a)]
    for text in ("verdict ", "note ", "skipped ", "exited with code 2 ", "error: argument "):
        assert text + '"&gt;&lt;img src=x' in done.dom, text
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []


def test_pareto_front() -> None:
    points = [
        (100.0, 50.0, "a", "1"),
        (200.0, 80.0, "b", "2"),
        (150.0, 40.0, "c", "3"),  # slower and less than a: dominated
        (300.0, 80.0, "d", "4"),  # as much as b but slower: dominated
        (50.0, 10.0, "e", "5"),
    ]
    assert [p[2] for p in pareto_front(points)] == ["e", "a", "b"]
