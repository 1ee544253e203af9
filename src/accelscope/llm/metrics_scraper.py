"""What the server itself says during a trial: its Prometheus ``/metrics``, read before, during
(every ``interval_s`` on a daemon thread) and after the trial, summarised for the benchmark's
honesty.

A token benchmark can be fooled by the server's state: a "cold" run whose prompts hit the
prefix cache measures cached prefill, a run that preempts requests measures recomputation, and
a queue that never drains measures the queue. :class:`ServerMetricsScraper` reads what vLLM,
SGLang, TGI and llama.cpp server export (:data:`~accelscope.llm.server_vocabulary.VOCABULARY`)
and :func:`~accelscope.llm.server_vocabulary.summarise` turns the scrapes into the document. A
server without ``/metrics`` (404), unreachable, or answering something other than Prometheus
text (:mod:`accelscope.llm.prometheus_text`) is ``available: False`` with a one-line ``why``.
Nothing here raises into the benchmark.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from types import TracebackType

from accelscope.errors import one_line
from accelscope.llm.documents import ServerMetrics
from accelscope.llm.prometheus_text import Sample, parse_exposition
from accelscope.llm.server_vocabulary import summarise

__all__ = ["ServerMetricsScraper", "metrics_url"]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""A ``/metrics`` answer larger than this is not read (a real one is tens of kilobytes)."""


def metrics_url(base_url: str) -> str:
    """The ``/metrics`` URL of a server given as ``http://host:port`` (a trailing ``/v1``,
    the OpenAI base URL, is dropped; a URL already ending in ``/metrics`` is kept)."""
    parsed = urllib.parse.urlsplit(base_url.strip())
    path = parsed.path.rstrip("/")
    if not path.endswith("/metrics"):
        path = path.removesuffix("/v1") + "/metrics"
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))


class ServerMetricsScraper:
    """Reads a server's ``/metrics`` around a trial: :meth:`start` before it, :meth:`stop`
    after it (or ``with ServerMetricsScraper(url) as scraper: ...; scraper.summary``).

    :meth:`start` scrapes once; if that fails (no ``/metrics``, unreachable, not Prometheus
    text) the scraper is ``available: False`` with the reason and does nothing more.
    Otherwise a daemon thread scrapes every ``interval_s`` until :meth:`stop`, which scrapes
    a last time and returns :func:`summarise`'s summary plus ``failed_scrapes`` (scrapes
    during the trial that failed, skipped). Neither method raises. Requests go straight to
    the server, as the benchmark's own do (no proxy from the environment)."""

    def __init__(
        self,
        base_url: str,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._bad_url = ""
        try:
            self.url = metrics_url(base_url)
        except ValueError as exc:
            self.url, self._bad_url = base_url, f"{base_url!r}: {exc}"
        if not self._bad_url and urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            self._bad_url = f"{base_url!r}: give the server's URL, e.g. http://localhost:8000"
        self.interval_s = max(float(interval_s), 0.01)
        self.timeout_s = float(timeout_s)
        self.headers = {"Accept": "text/plain", **dict(headers or {})}
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._scrapes: list[tuple[float, list[Sample]]] = []
        self._failed = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._why = ""
        self.summary: ServerMetrics | None = None

    def scrape_once(self) -> list[Sample]:
        """One GET of ``/metrics``, parsed. Raises :class:`ValueError` with a one-line
        reason for any failure."""
        if self._bad_url:
            raise ValueError(one_line(self._bad_url))
        request = urllib.request.Request(self.url, headers=self.headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                body: bytes = answer.read(MAX_BODY_BYTES + 1)
                content_type = str(answer.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                raise ValueError(f"{self.url}: no /metrics endpoint (HTTP 404)") from None
            raise ValueError(f"{self.url}: HTTP {exc.code} {one_line(str(exc.reason))}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ValueError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
            raise ValueError(f"{self.url}: unreachable ({one_line(str(exc.reason))})") from None
        except http.client.HTTPException as exc:
            raise ValueError(f"{self.url}: broken answer ({type(exc).__name__})") from None
        except TimeoutError:
            raise ValueError(f"{self.url}: no answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ValueError(f"{self.url}: {one_line(str(exc)) or type(exc).__name__}") from None
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"{self.url}: answer larger than {MAX_BODY_BYTES} bytes")
        if "html" in content_type.lower():
            raise ValueError(f"{self.url}: not Prometheus text ({one_line(content_type)})")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.url}: not Prometheus text (not UTF-8)") from None
        try:
            return parse_exposition(text)
        except ValueError as exc:
            raise ValueError(f"{self.url}: not Prometheus text ({one_line(str(exc))})") from None

    def _record(self) -> bool:
        """Scrape and keep the result; ``False`` (counted, reason kept) on failure."""
        at = time.perf_counter()
        try:
            samples = self.scrape_once()
        except Exception as exc:  # noqa: BLE001 - a scrape failure must never reach the trial
            with self._lock:
                self._failed += 1
                self._why = one_line(str(exc)) or type(exc).__name__
            return False
        with self._lock:
            self._scrapes.append((at, samples))
        return True

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._record()

    @property
    def available(self) -> bool:
        """Whether the first scrape succeeded (``False`` before :meth:`start`)."""
        with self._lock:
            return bool(self._scrapes)

    def start(self) -> None:
        """Scrape once; when that works, keep scraping on a daemon thread. Never raises."""
        if self._started:
            return
        self._started = True
        try:
            if not self._record():
                return
            self._thread = threading.Thread(
                target=self._loop, name="accelscope-server-metrics", daemon=True
            )
            self._thread.start()
        except Exception as exc:  # noqa: BLE001 - e.g. no thread to be had: scraping is optional
            with self._lock:
                self._why = one_line(str(exc)) or type(exc).__name__

    def stop(self, *, origin_s: float | None = None) -> ServerMetrics:
        """Stop the thread, scrape a last time and return the summary (also kept as
        :attr:`summary`), its timeline on the clock that starts at ``origin_s`` (a
        ``time.perf_counter`` reading: the trial's start). Never raises; a second call
        returns the same summary."""
        if self.summary is not None:
            return self.summary
        try:
            self.summary = self._finish(origin_s)
        except Exception as exc:  # noqa: BLE001 - the summary is optional, the trial is not
            why = one_line(str(exc)) or type(exc).__name__
            self.summary = ServerMetrics(available=False, why=why)
        return self.summary

    def _finish(self, origin_s: float | None) -> ServerMetrics:
        if not self._started:
            return ServerMetrics(available=False, why="the scraper was never started")
        if not self.available:
            return ServerMetrics(available=False, why=self._why or "the first scrape failed")
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1.0)
        self._record()
        with self._lock:
            scrapes = list(self._scrapes)
            failed = self._failed
        summary = summarise(scrapes, origin_s=origin_s)
        return summary.model_copy(update={"failed_scrapes": failed})

    def __enter__(self) -> ServerMetricsScraper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
