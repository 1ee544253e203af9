"""A server gauge the client's own records contradict is not used: ``running`` and ``waiting``
reading 0 at every scrape taken while the client had a request at the server (and KV usage, if
0 too) become ``None`` with the reason; gauges that agree (or too few scrapes to tell) are
kept."""

from __future__ import annotations

from accelscope.llm.documents import MeanMax, RequestRecord, ServerMetrics, ServerSample
from accelscope.llm.server_vocabulary import check_against_client


def _metrics(running: list[float]) -> ServerMetrics:
    timeline = [
        ServerSample(t_s=0.5 * i, running=r, waiting=0.0, kv_cache_usage=r / 10)
        for i, r in enumerate(running)
    ]
    top = max(running)
    return ServerMetrics(
        available=True,
        server="vllm",
        scrapes=len(timeline),
        running=MeanMax(mean=sum(running) / len(running), max=top),
        waiting=MeanMax(mean=0.0, max=0.0),
        kv_cache_usage=MeanMax(mean=0.0, max=top / 10),
        timeline=timeline,
    )


# one request at the server from 0.1 s to 1.9 s: the scrapes at 0.5, 1.0 and 1.5 s fall inside
DECODING = [RequestRecord(index=0, scheduled_s=0.1, sent_s=0.1, end_s=1.9, first_token_s=1.8)]


def test_zero_while_the_client_saw_a_decode_is_contradicted_and_not_used() -> None:
    checked = check_against_client(_metrics([0, 0, 0, 0, 0]), DECODING)
    assert checked.running is None and checked.waiting is None and checked.kv_cache_usage is None
    names = [c.split(":")[0] for c in checked.contradicted]
    assert names == ["running", "waiting", "kv_cache_usage"]
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


def test_a_request_waiting_at_the_server_agrees_with_the_waiting_gauge() -> None:
    metrics = _metrics([0, 0, 0, 0, 0])
    timeline = [p.model_copy(update={"waiting": 1.0}) for p in metrics.timeline]
    waiting = metrics.model_copy(update={"timeline": timeline})
    assert check_against_client(waiting, DECODING) == waiting
