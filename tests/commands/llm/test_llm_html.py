"""The llm report: built from a real run against the fake OpenAI server, drawn in headless
chromium (charts drawn, no console output, no network request), and hostile strings (model
name, URL, server errors, warnings: all untrusted) shown as text, never run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.llm.html import render_llm_report
from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.llm.documents import LlmRun, LlmTrial, RequestRecord
from accelscope.llm.summary import Slo
from accelscope.store.sqlite import ResultStore
from accelscope.testing import fixed_environment
from accelscope.testing.fake_llm_server import FakeLLMServer
from browser import Dom, browse, console_messages, page_requests

HOSTILE = (
    '"><img src=x onerror="document.title=\'PWNED\'"></script>'
    "<script>document.title='PWNED'</script>"
)
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

Run = tuple[LlmRun, dict[int, list[RequestRecord]], Path]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One short run of two rates (about 2 s): the document, the stored records by trial, and
    the report the workflow wrote. The served model's name is hostile."""
    tmp = tmp_path_factory.mktemp("llm-report")
    config = tmp / "config.json"
    config.write_text(json.dumps(LLAMA_CONFIG), encoding="utf-8")
    report = tmp / "workflow.html"
    with FakeLLMServer(model="m" + HOSTILE, ttft_s=0.02, itl_s=0.002) as server:
        outcome = llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                rates=(10.0, 40.0),
                requests=20,
                slo=Slo.parse("ttft=200ms,tpot=50ms"),
                model_config=config,
                bandwidth_bytes_per_s=3.35e12,
                report_path=report,
            ),
            store_path=tmp / "store.db",
            environment=fixed_environment(),
        )
    assert outcome.run_id is not None
    with ResultStore(tmp / "store.db") as store:
        stored = store.get_run(outcome.run_id).documents_of("llm-trial")
    trials = [LlmTrial.from_payload(trial) for trial in stored]
    records = {trial.index: list(trial.records) for trial in trials}
    return outcome.document, records, report


def _hostile(document: LlmRun, records: dict[int, list[RequestRecord]]) -> Run:
    """The run with hostile text wherever the report shows untrusted text."""
    doc = document.model_dump(mode="json")
    recs = {index: [r.model_dump(mode="json") for r in trial] for index, trial in records.items()}
    doc["target"]["url"] = "http://example.invalid/" + HOSTILE
    doc["slo_label"] = "p99 " + HOSTILE
    doc["warnings"].append("warning " + HOSTILE)
    doc["definitions"] = {**doc["definitions"], "ttft_s": HOSTILE}  # lands in title=""
    last = doc["trials"][-1]
    last["label"] = "label " + HOSTILE
    last["summary"]["error_kinds"].append({"error": HOSTILE, "count": 1})
    last["server_metrics"] = {"available": False, "why": "why " + HOSTILE}
    last["floor"]["bandwidth_source"] = "source " + HOSTILE
    failed = recs[last["index"]][0]
    failed.update(error="error " + HOSTILE, first_token_s=None, chunk_times_s=[])
    hostile = {
        index: [RequestRecord.model_validate(r) for r in trial] for index, trial in recs.items()
    }
    return LlmRun.from_payload(doc), hostile, Path()


def _figures(html: str) -> dict[str, Any]:
    match = re.search(r"var figures = (.*);\n", html)
    assert match
    return {figure["id"]: figure for figure in json.loads(match.group(1))}


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a figure (labels, hover texts, titles)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@pytest.mark.server
def test_report_in_a_real_browser(run: Run, tmp_path: Path) -> None:
    document, records, _ = _hostile(*run[:2])
    title = "accelscope llm: " + HOSTILE
    html = render_llm_report(document, title=title, records=records)
    assert HOSTILE not in html and "<img src=x" not in html and "&lt;img src=x" in html
    assert "connect-src 'none'" in html and "default-src 'none'" in html
    page = tmp_path / "llm.html"
    page.write_text(html, encoding="utf-8")
    done = browse(page, tmp_path / "browser")
    dom = Dom(done.dom)
    classes = {a.get("id"): a.get("class", "") for _, a in dom.tags}
    for chart in ("chart-ttft", "chart-tpot", "chart-goodput", "chart-server", "chart-timeline"):
        assert "js-plotly-plot" in classes.get(chart, ""), f"plotly did not draw {chart}"
    assert dom.title == title  # shown as text; a script would have set 'PWNED'
    assert not [a for t, a in dom.tags if t == "img" or any(k.startswith("on") for k in a)]
    labels = list(_strings(_figures(html)))  # plotly renders a subset of HTML in each
    assert labels and not [text for text in labels if "<img" in text or "<script" in text]
    hovers = [h for trace in _figures(html)["chart-timeline"]["data"] for h in trace["hovertext"]]
    assert any('error "&gt;&lt;img src=x' in h for h in hovers)  # escaped for plotly
    for text in ("m", "http://example.invalid/", "warning ", "why ", "source ", "label "):
        assert text + '"&gt;&lt;img src=x' in done.dom, text
    assert console_messages(done.stderr) == []
    assert page_requests(done.netlog) == []


def test_charts_and_figures_from_a_run(run: Run) -> None:
    document, records, report = run
    html = render_llm_report(document, title="llm", records=records)
    figures = _figures(html)
    ttft = figures["chart-ttft"]
    assert ttft["layout"]["xaxis"]["title"]["text"] == "offered load (req/s)"
    assert [trace["name"] for trace in ttft["data"]] == ["p50 TTFT", "p90 TTFT", "p99 TTFT"]
    assert ttft["data"][0]["x"] == [10.0, 40.0]
    slo_line = ttft["layout"]["shapes"][0]
    assert slo_line["y0"] == pytest.approx(200.0) and slo_line["xref"] == "paper"
    assert figures["chart-tpot"]["layout"]["shapes"][0]["y0"] == pytest.approx(50.0)
    p50 = next(trace for trace in ttft["data"] if trace["name"] == "p50 TTFT")["y"]
    assert all(15.0 < value < 200.0 for value in p50)  # the fake's TTFT is 20 ms
    goodput = figures["chart-goodput"]
    assert {trace["name"] for trace in goodput["data"]} == {
        "output tokens/s (throughput)",
        "good output tokens/s (goodput)",
    }
    timeline = figures["chart-timeline"]
    last = max(records)
    drawn_rows = {row for trace in timeline["data"] for row in trace["y"]}
    assert len(drawn_rows) == len(records[last])
    assert f"trial #{last}" in timeline["layout"]["title"]["text"]
    # every section, the floor measured from the model's shape, and the server's metrics
    for text in ("Headline", "Decode floor", "Server metrics", "Warnings", "Definitions"):
        assert text in html
    assert "--bandwidth (given)" in html and "memory-bandwidth bound" in html
    assert "vllm:prefix_cache_hits_total" in html
    for name in document.definitions:
        assert f"<b>{name}</b>" in html
    # the workflow wrote its own report, with the per-request timeline
    written = report.read_text(encoding="utf-8")
    assert "Best goodput" in written and 'id="chart-timeline"' in written
    assert "no per-request records were given" not in written


def test_missing_figures_read_not_measured() -> None:
    empty = {"n": 0}
    trial = {
        "index": 0,
        "role": "fixed",
        "label": "concurrency 4",
        "arrivals": {"rate_per_s": None, "concurrency": 4, "cv": 1.0},
        "summary": {
            "requests": 3,
            "completed": 0,
            "errors": 3,
            "error_kinds": [{"error": "HTTP 500", "count": 3}],
            "cancelled": 0,
            "window": None,
            "metrics": {m: empty for m in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_sent_s")},
        },
        "server_metrics": {"available": False, "why": "GET /metrics: 404"},
        "floor_why": None,
        "warnings": [],
        "interrupted": True,
    }
    document = {
        "target": {"kind": "openai-http", "url": "http://127.0.0.1:1", "model": "m"},
        "model": "m",
        "workload": {},
        "slo": None,
        "slo_label": "none",
        "definitions": {"ttft_s": "time to first token"},
        "trials": [trial],
        "warnings": [],
        "floor_why": "not measured: give --model-config (the model's config.json) for the floor",
    }
    html = render_llm_report(LlmRun.from_payload(document), title="empty", records=None)
    row = html[html.index('<table id="trials">') : html.index("</table>")]
    assert row.count("not measured") >= 8 and "0.00" not in row
    assert "no SLO" in row and "interrupted" in row and "3x HTTP 500" in row
    assert "No trial completed a request" in html
    assert "not measured: give --model-config" in html
    assert "not measured: GET /metrics: 404" in html
    assert "interrupted (Ctrl-C)" in html
    assert _figures(html) == {}  # nothing measured, nothing drawn
    assert "no trial measured a TTFT" in html


def test_capacity_headline_and_concurrency_axis(run: Run) -> None:
    document = run[0].model_dump(mode="json")
    for trial, load in zip(document["trials"], (2, 8), strict=True):
        trial["arrivals"] = {"rate_per_s": None, "concurrency": load, "cv": 1.0}
    document["capacity"] = {
        "capacity": 8.0,
        "unit": "concurrency",
        "stopped": "",
        "good_output_tokens_per_s": 1234.5,
        "good_requests_per_s": 19.3,
        "points": [
            {"load": 8.0, "passed": True, "why": ""},
            {"load": 16.0, "passed": False, "why": "TTFT: 40 of 400 over 200 ms"},
        ],
    }
    html = render_llm_report(LlmRun.from_payload(document), title="capacity")
    assert "Capacity at the SLO" in html and "concurrency 8, 1,234.5 good output tokens/s" in html
    assert "concurrency 16: failed: TTFT: 40 of 400 over 200 ms" in html
    figures = _figures(html)
    assert figures["chart-ttft"]["layout"]["xaxis"]["title"]["text"] == (
        "concurrency (requests in flight)"
    )
    capacity_line = figures["chart-goodput"]["layout"]["shapes"][0]
    assert capacity_line["x0"] == 8.0 and capacity_line["yref"] == "paper"
