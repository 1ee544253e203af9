"""A server accelscope starts is always stopped: its whole process group on stop, its log
kept and quoted when it fails to start, SIGTERM when accelscope is killed (``kill -9``), and a
server that survived that anyway is found by the next start and named, never another program
that reused its pid. Real processes: a small Python HTTP server (with a child of its own) stands
in for an LLM server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.llm.engines import find_vllm
from accelscope.llm.server_process import (
    ServerProcess,
    ServerStartError,
    leftover_servers,
    stop_leftover,
)

SERVER = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys, time
    port = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "crash":
        print("loading the model ... out of memory allocating the KV cache", flush=True)
        sys.exit(3)
    if mode == "stubborn":  # survives SIGTERM, and says it got one
        signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM survived", flush=True))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("child", child.pid, flush=True)
    if mode == "slow":
        time.sleep(600)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _child(server: ServerProcess) -> int:
    _wait_until(lambda: "child " in server.log_tail(), "the server started its child")
    for line in server.log_tail().splitlines():
        if line.startswith("child "):
            return int(line.split()[1])
    raise AssertionError(server.log_tail())


def test_start_health_and_stop_of_the_whole_group(script: Path, tmp_path: Path) -> None:
    with ServerProcess([sys.executable, str(script), "{port}"], name="toy") as server:
        assert server.healthy() and server.url == f"http://127.0.0.1:{server.port}"
        assert server.startup_s is not None and server.startup_s > 0
        assert os.getpgid(server.pid) == server.pid  # its own process group
        child = _child(server)
        assert _alive(child)
    assert not server.group_alive() and not _alive(child)
    server.stop()  # idempotent


def test_a_server_that_exits_keeps_its_log_and_says_why(script: Path, tmp_path: Path) -> None:
    # the fault: the server prints its error and exits 3 at start
    server = ServerProcess([sys.executable, str(script), "{port}", "crash"], name="toy")
    with pytest.raises(ServerStartError) as exc:
        server.start()
    assert "toy exited with code 3 before it was ready" in str(exc.value)
    assert "out of memory allocating the KV cache" in exc.value.log_tail
    assert exc.value.server_exit == 3
    assert server.log_path is not None and server.log_path.exists()  # kept for the user
    assert not server.group_alive()


def test_a_server_not_ready_in_time_is_stopped(script: Path) -> None:
    # the fault: a server that never listens (the 1 s start limit)
    server = ServerProcess(
        [sys.executable, str(script), "{port}", "slow"], name="toy", startup_timeout_s=1.0
    )
    with pytest.raises(ServerStartError, match="not healthy after 1 s") as exc:
        server.start()
    assert exc.value.server_exit is None
    assert not server.group_alive()


def _owner(script: Path, registry: Path, mode: str, log: Path) -> subprocess.Popen[str]:
    """Another Python process that starts a server (main thread), logging to ``log``, and
    then waits forever."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from accelscope.llm.server_process import ServerProcess
        server = ServerProcess([sys.executable, {str(script)!r}, "{{port}}", {mode!r}],
                               name="toy", registry=Path({str(registry)!r}),
                               log_path=Path({str(log)!r}))
        server.start()
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_kill_9_of_the_starter_stops_the_server(script: Path, tmp_path: Path) -> None:
    registry = tmp_path / "servers"
    owner = _owner(script, registry, "", tmp_path / "server.log")
    assert owner.stdout is not None
    # the fault: kill -9 of the starter once it printed the pid of its healthy server
    pid = int(owner.stdout.readline())
    assert _alive(pid) and len(list(registry.glob("server-*.json"))) == 1
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    _wait_until(lambda: not _alive(pid), "the server is gone")  # the parent-death signal
    assert leftover_servers(registry) == []  # and its stale record is cleaned up
    assert list(registry.glob("server-*.json")) == []


def test_a_server_that_survived_is_named_then_stopped(script: Path, tmp_path: Path) -> None:
    registry = tmp_path / "servers"
    log = tmp_path / "server.log"
    owner = _owner(script, registry, "stubborn", log)  # survives SIGTERM
    assert owner.stdout is not None
    # the fault: kill -9 of the starter once it printed its healthy server's pid
    pid = int(owner.stdout.readline())
    assert leftover_servers(registry) == []  # its starter still runs: not a leftover
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    _wait_until(lambda: "SIGTERM survived" in log.read_text(), "the server got its SIGTERM")
    assert _alive(pid)
    [found] = leftover_servers(registry)
    assert found.pid == pid and found.name == "toy" and found.owner_pid == owner.pid
    text = found.describe()
    assert f"pid {pid}" in text and f"kill -TERM -{pid}" in text and str(script) in text
    assert stop_leftover(found, timeout_s=1.0)  # SIGTERM ignored: SIGKILL after the wait
    assert not _alive(pid) and leftover_servers(registry) == []


def test_a_reused_pid_is_never_reported(tmp_path: Path) -> None:
    registry = tmp_path / "servers"
    registry.mkdir()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {
            "pid": stranger.pid,
            "name": "vllm",
            "port": 1,
            "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
            "owner_pid": 2**22 - 7,  # gone
            "owner_command": ["accelscope", "tune"],
        }
        (registry / f"server-{stranger.pid}.json").write_text(json.dumps(record))
        (registry / "server-1.json").write_text("{not json")
        assert leftover_servers(registry) == []
        assert _alive(stranger.pid)  # another program's process is left alone
        assert list(registry.iterdir()) == []  # both records dropped
    finally:
        stranger.kill()
        stranger.wait()


def test_a_missing_vllm_says_where_it_looked_and_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(BadInputError) as exc:
        find_vllm(search_path=str(tmp_path), project_dir=tmp_path)
    text = str(exc.value)
    assert "\n" not in text and "no vLLM found" in text and "no vllm on PATH" in text
    assert ".venv-vllm" in text and "make vllm" in text and "--vllm-python" in text
    with pytest.raises(BadInputError, match="cannot import vllm"):
        find_vllm(Path(sys.executable))  # this Python has no vLLM
    with pytest.raises(BadInputError, match="no such interpreter"):
        find_vllm(tmp_path / "python")


def test_a_port_lost_to_another_process_is_chosen_again_and_a_given_one_is_not(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a flake of the parallel tier: between ``free_port`` and the server's
    bind, another process took the port. Here it is taken for real (a socket holds it), and
    the first port offered is that one: the server exits with EADDRINUSE, and is started again
    on a new port; a port the caller gave is the caller's, and its loss is the error."""
    import socket

    from accelscope.llm import server_process
    from accelscope.processes import free_port

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        offered = iter([taken, free_port("127.0.0.1")])
        monkeypatch.setattr(server_process, "free_port", lambda host: next(offered))
        with ServerProcess([sys.executable, str(script), "{port}"], name="toy") as server:
            assert server.healthy() and server.port != taken
        given = ServerProcess([sys.executable, str(script), "{port}"], name="toy", port=taken)
        with pytest.raises(ServerStartError, match="Address already in use"):
            given.start()
        assert not given.group_alive()
