"""The peer clients' shared runner (accelscope.llm.conformance.peers): where a peer's
environment is, how to build it, and one run whose output file is read, every failure one
line on the case, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelscope.llm.conformance.clients import CLIENTS, ClientRun
from accelscope.llm.conformance.peers import _Peer


class _Fake(_Peer):
    name = "fake"
    venv, command, builds = ".venv-fake", "python", "peers"


@pytest.fixture
def peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Fake:
    monkeypatch.chdir(tmp_path)
    bin_dir = tmp_path / ".venv-fake" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    return _Fake()


class _Lenient(_Fake):
    exit_status_matters = False


def _script(peer: _Fake, tmp_path: Path, code: str) -> object:
    return peer._result([peer._executable(), "-c", code], tmp_path, tmp_path / "out.json")


def test_a_missing_environment_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _Fake().unavailable() == "not installed: make peers (builds .venv-fake)"
    assert {"vllm", "aiperf", "guidellm", "inference-perf"} <= set(CLIENTS)


def test_the_output_file_is_read(peer: _Fake, tmp_path: Path) -> None:
    got = _script(peer, tmp_path, "open('out.json', 'w').write('{\"a\": 1}')")
    assert got == {"a": 1}


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("pass", "wrote no out.json"),
        ("open('out.json', 'w').write('{not json')", "its out.json is not JSON"),
        ("import sys; print('ValueError: bad flag'); sys.exit(3)", "exit 3: ValueError: bad flag"),
        (
            "import sys; open('out.json', 'w').write('{}'); print('Error: late'); sys.exit(1)",
            "exit 1: Error: late",
        ),
    ],
)
def test_each_failure_is_one_line_on_the_case(
    peer: _Fake, tmp_path: Path, code: str, says: str
) -> None:
    got = _script(peer, tmp_path, code)
    assert isinstance(got, ClientRun) and got.error.startswith(says) and "\n" not in got.error


def test_a_peer_that_exits_non_zero_after_a_whole_result_is_read(
    peer: _Fake, tmp_path: Path
) -> None:
    code = "import sys; open('out.json', 'w').write('[1]'); sys.exit(1)"
    assert _script(_Lenient(), tmp_path, code) == [1]
