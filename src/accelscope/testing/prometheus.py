"""A real Prometheus over a fixture TSDB, for tests and trials of ``audit``.

The TSDB is built with ``promtool tsdb create-blocks-from openmetrics`` from OpenMetrics text
(:func:`accelscope.testing.fleet.to_openmetrics`); Prometheus (Debian's ``prometheus``
package) serves it on a free loopback port with a configuration that scrapes nothing and a
100-year retention (retention counts from the newest block, so the default 15 days would delete
imported history at start-up). ::

    with LocalPrometheus(to_openmetrics(fleet())) as prom:
        audit(AuditRequest(prometheus=prom.url, until_s=..., since_s=7 * 86400))
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from accelscope.processes import free_port
from accelscope.testing._service import Service

__all__ = ["LocalPrometheus", "prometheus_missing"]


def prometheus_missing() -> str:
    """Empty when ``prometheus`` and ``promtool`` are on PATH; else what to install."""
    missing = [tool for tool in ("prometheus", "promtool") if shutil.which(tool) is None]
    if not missing:
        return ""
    return f"{' and '.join(missing)} not found: sudo apt-get install prometheus (or make install)"


class LocalPrometheus(Service):
    """Build a TSDB from OpenMetrics text, serve it, stop it on exit."""

    def __init__(self, openmetrics: str, *, start_timeout_s: float = 60.0) -> None:
        self.openmetrics = openmetrics
        self.start_timeout_s = start_timeout_s
        self._dir = Path(tempfile.mkdtemp(prefix="asprom-"))
        self._process: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Backfill the TSDB, start Prometheus, wait until it is ready."""
        missing = prometheus_missing()
        if missing:
            raise RuntimeError(missing)
        source = self._dir / "fleet.om"
        source.write_text(self.openmetrics, encoding="utf-8")
        data = self._dir / "data"
        done = subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--max-block-duration=24h",
                str(source),
                str(data),
            ],
            capture_output=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"promtool failed: {done.stderr.decode()[-500:]}")
        source.unlink()
        config = self._dir / "empty.yml"
        config.write_text("scrape_configs: []\n", encoding="utf-8")
        log = (self._dir / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=100y",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited; log in {self._dir / 'prometheus.log'}")
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, then SIGKILL) and remove the TSDB."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        shutil.rmtree(self._dir, ignore_errors=True)
