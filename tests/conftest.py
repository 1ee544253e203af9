"""Shared fixtures: a fixed environment and an in-process command-line runner, no real hardware
needed. Fakes and helpers live in :mod:`accelscope.testing`; import them from there. Also the
guard of the test tiers: a test that starts a real server must be marked ``server``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelscope.cli import main
from accelscope.hardware.fingerprint import Environment
from accelscope.testing import CliResult, CliRunner, fixed_environment


@pytest.fixture
def environment() -> Environment:
    return fixed_environment()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """``cli(*args)`` runs ``accelscope *args`` in process: ``code, out, err = cli(...)``."""

    def run(*args: str | Path) -> CliResult:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


# -- the test tiers ---------------------------------------------------------------------------
# A test that starts a real server, cluster or browser is marked `server` (pyproject.toml): it
# runs in the serial tier of `make test`, never in `make test-fast`. Two guards keep a new one
# from slipping into the fast tier unmarked: collection fails for a test that uses one of the
# fixtures below, and a test that starts one of the real services inline fails when it does.

TESTS = Path(__file__).parent

SERVER_FIXTURES = frozenset(
    {  # (the file that defines it, the fixture): names such as `server` are fakes elsewhere
        ("audit/test_audit_prometheus.py", "prometheus"),  # Prometheus
        ("commands/bench/test_bench_html.py", "browser"),  # chromium
        ("llm/test_llm_against_transformers_serve.py", "server"),  # transformers serve
        ("llm/test_llm_against_vllm.py", "vllm"),  # vLLM
        ("llm/test_llm_servers_fixture.py", "served"),  # transformers serve
        ("sweep/test_ray_cluster_sweep.py", "cluster"),  # Ray
    }
)


def _server_fixtures(item: pytest.Item) -> list[str]:
    """The real-server fixtures ``item`` uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the item's fixture closure
    if info is None:
        return []
    return [
        name
        for name, definitions in info.name2fixturedefs.items()
        for definition in definitions
        if (_defined_in(definition.func), name) in SERVER_FIXTURES
    ]


def _defined_in(function: Callable[..., object]) -> str:
    path = Path(function.__code__.co_filename)
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)


SHARED_GROUPS = {
    # files whose servers take the cores: one vLLM, one Ray cluster at a time where the server
    # tests run on xdist workers (`pytest -m server -n 2 --dist loadgroup`; make test-servers
    # runs them one at a time: on two workers they were slower and a Ray timeout failed)
    "llm/test_llm_against_vllm.py": "vllm",
    "llm/test_conformance.py": "vllm",
    "tune/test_tune_real_servers.py": "vllm",
    "sweep/test_ray_cluster_sweep.py": "ray",
    "llm/test_scaleout.py": "ray",
}
"""A server test's xdist group is its file's (a module's server starts once), or one of these."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("server") is not None:
            path = Path(str(item.fspath))
            name = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)
            item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(name, name)))
    # the serial tests first where one run takes them with the server tests (make test's
    # test-one-at-a-time): they time to the millisecond, before any server test has run in
    # this process (a sort that keeps every other order)
    items.sort(key=lambda item: item.get_closest_marker("serial") is None)
    unmarked = [
        f"{item.nodeid} (uses {', '.join(names)})"
        for item in items
        if item.get_closest_marker("server") is None and (names := _server_fixtures(item))
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests start a real server but are not marked @pytest.mark.server (the "
            "serial tier):\n  " + "\n  ".join(unmarked)
        )


_RUNNING: list[pytest.Item] = []
"""The test now running (set-up, call and teardown), for the start guards."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _RUNNING.append(item)
    try:
        return (yield)
    finally:
        _RUNNING.pop()


def _unmarked_start(what: str) -> None:
    if _RUNNING and _RUNNING[-1].get_closest_marker("server") is None:
        pytest.fail(
            f"{_RUNNING[-1].nodeid} starts {what}: mark it @pytest.mark.server (the serial "
            "tier; pyproject.toml)",
            pytrace=False,
        )


def _guard(cls: type[Any], what: str, real: Callable[[Any], bool] = lambda _: True) -> None:
    start = cls.start

    def guarded(self: Any) -> None:
        if real(self):
            _unmarked_start(what)
        start(self)

    cls.start = guarded


def pytest_configure(config: pytest.Config) -> None:
    import browser
    from accelscope.testing.prometheus import LocalPrometheus
    from accelscope.testing.ray_cluster import LocalRayCluster
    from accelscope.testing.real_llm_servers import TransformersServe, VllmServe

    real_transformers = TransformersServe.executable()  # a test may fake it (sys.executable)
    _guard(LocalPrometheus, "Prometheus")
    _guard(LocalRayCluster, "a Ray cluster")
    _guard(VllmServe, "vLLM")
    _guard(TransformersServe, "transformers serve", lambda s: s.executable() == real_transformers)
    chromium = browser.chromium

    def guarded_chromium() -> str:
        _unmarked_start("chromium")
        return chromium()

    browser.chromium = guarded_chromium
