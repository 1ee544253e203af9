"""``audit --prometheus`` against a real Prometheus (Debian's package) serving a TSDB that
promtool backfilled from the fixture fleet: the same numbers as from a file, and its faults.

Covers: accelscope.audit.telemetry, accelscope.commands.audit.workflow,
accelscope.testing.prometheus."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.audit.workflow import AuditRequest, audit
from accelscope.errors import BadInputError
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fleet import DAYS, START_S, fleet, to_openmetrics
from accelscope.testing.prometheus import LocalPrometheus

STEP_S = 300.0
END_S = START_S + DAYS * 86400


@pytest.fixture(scope="module")
def prometheus() -> Iterator[LocalPrometheus]:
    with LocalPrometheus(to_openmetrics(fleet(step_s=STEP_S))) as started:
        yield started


def _request(url: str, **more: Any) -> AuditRequest:
    return AuditRequest(prometheus=url, until_s=END_S, since_s=DAYS * 86400, step_s=STEP_S, **more)


@pytest.mark.server
def test_prometheus_and_its_saved_export_give_identical_numbers(
    prometheus: LocalPrometheus, tmp_path: Path
) -> None:
    saved = tmp_path / "saved.json"
    live = audit(_request(prometheus.url, save_export=saved), store_path=None).document
    offline = audit(
        AuditRequest(export=saved, until_s=END_S, since_s=DAYS * 86400, step_s=STEP_S),
        store_path=None,
    ).document
    for key in ("devices", "totals", "actions", "by_node", "by_model", "by_namespace", "prices"):
        assert live[key] == offline[key], key
    assert "query_range step 300 s" in live["source"]


@pytest.mark.server
def test_hand_computed_figures_over_http(prometheus: LocalPrometheus) -> None:
    document = audit(_request(prometheus.url), store_path=None).document
    devices = {d["key"]: d for d in document["devices"]}
    assert devices["node-a/gpu0"]["hours"]["busy"] == pytest.approx(0.9 * 168)
    assert devices["node-c/gpu1"]["hours"]["held_idle"] == pytest.approx(168)
    assert "not supported for MIG" in devices["node-b/gpu0/mig1"]["not_measured"]["gpu_util"]
    # Prometheus' 5-minute look-back carries the last sample one step into the 2 h gap
    observed = devices["node-c/gpu0"]["hours"]["observed"]
    assert 166 <= observed <= 166 + STEP_S / 3600 + 1e-9
    assert {a["kind"] for a in document["actions"]} >= {"release-idle", "consolidate-mig"}


@pytest.mark.server
def test_a_window_without_data(prometheus: LocalPrometheus) -> None:
    request = AuditRequest(
        prometheus=prometheus.url, until_s=START_S - 86400, since_s=86400, step_s=STEP_S
    )
    with pytest.raises(BadInputError, match="no DCGM or node-exporter series in the window"):
        audit(request, store_path=None)


def test_unreachable(cli: CliRunner) -> None:
    code, _, err = cli("audit", "--prometheus", "http://127.0.0.1:1", "--no-store")
    assert_one_line_error(code, err, "cannot reach Prometheus at http://127.0.0.1:1")


class _Refuse(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.end_headers()
        self.wfile.write(b"Unauthorized")

    def log_message(self, *args: object) -> None:
        return None


class _NotPrometheus(_Refuse):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html>not prometheus</html>")


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (_Refuse, "refused the credentials (HTTP 401)"),
        (_NotPrometheus, "did not answer with Prometheus API JSON"),
    ],
)
def test_auth_failure_and_a_server_that_is_not_prometheus(
    cli: CliRunner, handler: type[http.server.BaseHTTPRequestHandler], expected: str
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, _, err = cli("audit", "--prometheus", url, "--no-store")
        assert_one_line_error(code, err, expected)
    finally:
        server.shutdown()
        server.server_close()
