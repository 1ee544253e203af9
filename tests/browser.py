"""Headless chromium for the HTML report tests: load a report from a file:// URL with every
host name mapped away, and read back the DOM, the console and the page's own network requests.

The browser tests need Debian's chromium (``apt-get update && apt-get install -y chromium``);
``make test`` installs it when missing. ``ACCELSCOPE_CHROMIUM`` names another binary. A test
that loads a page is marked ``server`` (the serial tier; ``tests/conftest.py`` fails one that is
not), so ``make test-fast`` needs no chromium.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

INSTALL = "apt-get update && apt-get install -y chromium"


@dataclasses.dataclass(frozen=True)
class BrowserRun:
    """What one headless load of a page left behind."""

    dom: str
    stderr: str
    netlog: Path


def chromium() -> str:
    """The chromium binary; fails the test (never skips it) when there is none."""
    found = os.environ.get("ACCELSCOPE_CHROMIUM") or shutil.which("chromium")
    if not found and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if not found:
        pytest.fail(f"chromium is needed for the browser tests; install it with: {INSTALL}")
    return found


def browse(page: Path, workdir: Path, *flags: str) -> BrowserRun:
    """Load ``page`` from a file:// URL in headless chromium with every host name mapped away;
    ``--dump-dom`` is added unless ``flags`` ask for something else (e.g. a screenshot)."""
    workdir.mkdir(parents=True, exist_ok=True)
    netlog = workdir / "netlog.json"
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={workdir / 'profile'}",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--log-net-log={netlog}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        *(flags or ("--dump-dom",)),
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return BrowserRun(done.stdout, done.stderr, netlog)


def console_messages(stderr: str) -> list[str]:
    """Every page console line. Chromium logs console.error, console.log and uncaught
    exceptions alike as ``INFO:CONSOLE`` (no level), so any console line counts."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(\]]", line)]


def page_requests(netlog: Path) -> list[str]:
    """http(s) URLs requested on behalf of a page, from chromium's net log. Chromium's own
    background requests (update checks, account probes: initiator "not an origin", no file://
    isolation key) are left out; the host mapping keeps even those off the network."""
    text = netlog.read_text(encoding="utf-8").rstrip().rstrip(",")
    log = json.loads(text if text.endswith("}") else text + "]}")  # unclean exit: no footer
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    found = []
    for event in log["events"]:
        params = event.get("params", {})
        url = params.get("url", "")
        if event["type"] != start_job or urlsplit(url).scheme not in ("http", "https"):
            continue
        isolation = str(params.get("network_isolation_key", ""))
        if params.get("initiator") != "not an origin" or "file://" in isolation:
            found.append(url)
    return found


class Dom(HTMLParser):
    """Start tags with their attributes, and the document title, of a dumped DOM."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.title, self._in_title = "", False
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        self.title += data if self._in_title else ""
