"""A server gauge the client's own records contradict is not used: ``running`` and
``kv_cache_usage`` reading 0 at every scrape taken while the client had a request decoding
become ``None`` with the reason, and a gauge that agrees (or too few scrapes to tell) is kept."""

from __future__ import annotations

from accelscope.llm.documents import MeanMax, RequestRecord, ServerMetrics, ServerSample
from accelscope.llm.server_metrics import check_against_client


def _metrics(running: list[float]) -> ServerMetrics:
    timeline = [
        ServerSample(t_s=0.5 * i, running=r, kv_cache_usage=r / 10) for i, r in enumerate(running)
    ]
    top = max(running)
    return ServerMetrics(
        available=True,
        server="vllm",
        scrapes=len(timeline),
        running=MeanMax(mean=sum(running) / len(running), max=top),
        kv_cache_usage=MeanMax(mean=0.0, max=top / 10),
        timeline=timeline,
    )


# one request decoding from 0.2 s to 1.9 s: the scrapes at 0.5, 1.0 and 1.5 s fall inside it
DECODING = [RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=1.9, first_token_s=0.2)]


def test_zero_while_the_client_saw_a_decode_is_contradicted_and_not_used() -> None:
    checked = check_against_client(_metrics([0, 0, 0, 0, 0]), DECODING)
    assert checked.running is None and checked.kv_cache_usage is None
    assert [c.split(":")[0] for c in checked.contradicted] == ["running", "kv_cache_usage"]
    assert "3 scrapes" in checked.contradicted[0]
    assert len(checked.timeline) == 5  # what was read is kept as read


def test_a_gauge_that_agrees_is_kept() -> None:
    metrics = _metrics([0, 1, 1, 0, 0])
    checked = check_against_client(metrics, DECODING)
    assert checked == metrics and not checked.contradicted


def test_too_few_scrapes_inside_a_decode_cannot_contradict() -> None:
    short = [RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=0.6, first_token_s=0.1)]
    metrics = _metrics([0, 0, 0])
    assert check_against_client(metrics, short) == metrics


def test_a_request_without_a_first_token_is_not_a_decode() -> None:
    failed = [RequestRecord(index=0, scheduled_s=0.0, sent_s=0.0, end_s=1.9, error="HTTP 500")]
    metrics = _metrics([0, 0, 0, 0])
    assert check_against_client(metrics, failed) == metrics
