"""An LLM server that accelscope starts (``tune``, the test fixtures): its own process group,
a health wait, its startup time, its log, and always stopped.

:class:`ServerProcess` starts a command in a new session (so the server and every process it
spawns form one group that can be signalled at once), with the parent-death signal set (a
``kill -9`` of accelscope sends the server SIGTERM), its output in a log file; it is ready when
``GET health_path`` answers 200, and a process that exits first or a server not ready in time
is a :class:`ServerStartError` carrying the log's last lines and its first error line
(:func:`first_error`: the exception that stopped it, which a server's own traceback chain can
push far above the last lines). :meth:`stop` sends SIGTERM to the group, waits, then SIGKILL;
it is idempotent and also safe after a failed start.

Every server started with a ``registry`` directory leaves a small record there while it runs
(its pid, command, port, who started it). :func:`leftover_servers` finds the records of
servers whose starter is gone but which still run: a server left by an accelscope that was
killed before it could stop it. A record names its command line, and a process whose command
line is not that one (the pid was reused by another program) is never reported, never stopped.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from accelscope.errors import AccelscopeError, one_line
from accelscope.files import write_atomic
from accelscope.processes import die_with_parent, free_port

__all__ = [
    "LeftoverServer",
    "ServerProcess",
    "ServerStartError",
    "first_error",
    "leftover_servers",
    "stop_leftover",
]


PORT_ATTEMPTS = 3
"""Starts on a fresh port after a server lost its port to another process (see ``start``)."""


class ServerStartError(AccelscopeError):
    """The server exited or was not healthy in time; ``log_tail`` holds its last lines,
    ``first_error`` its first error line ("" when none) and ``server_exit`` the exit code of
    the server process (None: it was still running, stopped by us)."""

    def __init__(
        self, message: str, *, log_tail: str, server_exit: int | None, first_error: str = ""
    ) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.server_exit = server_exit
        self.first_error = first_error


_LOG_PREFIX = re.compile(
    r"^(?:\([^()\n]*pid=\d+\)\s*)?"  # vLLM's process tag: (EngineCore_DP0 pid=123)
    r"(?:(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
    r"(?:\s[^\[\]\n]*\[[^\]\n]*\]\s?|:\s+))?"  # vLLM's "LEVEL time [source] ", uvicorn's "LEVEL:  "
)
"""What a log line starts with before its message: vLLM's ``(EngineCore pid=1) ERROR 11-27
15:20:01 [core.py:708] `` (a process tag, a level, a time, the source), uvicorn's ``ERROR:``."""
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)(?::\s|$)")
"""A traceback's last line, ``ValueError: ...``, ``torch.OutOfMemoryError: ...``, at the start
of the message (an indented line is the traceback's quoted code)."""
_USAGE_ERROR = re.compile(r"^\S+: error: ")
"""argparse's refusal: ``api_server.py: error: argument --max-num-seqs: ...``."""
_SAYS_ERROR = re.compile(r"^(?:ERROR|CRITICAL|FATAL|Error)\b")
_ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
_LOG_READ_BYTES = 4 << 20


def first_error(log: str) -> str:
    """The first error line of a server's log, on one line; "" when it has none.

    The first exception printed is the root cause (a chain prints it first; vLLM's engine
    process prints it before the API server's "Engine core initialization failed. See root
    cause above"); an exception a logger printed below ERROR (a warning with its traceback)
    is not the error, and a pydantic validation error gets its next two lines (the field and
    the reason). Without an exception: argparse's refusal, else the first line logged at
    ERROR or starting with "Error"."""
    messages: list[tuple[str | None, str]] = []
    for line in log.splitlines():
        prefix = _LOG_PREFIX.match(line)
        level = prefix.group("level") if prefix else None
        messages.append((level, line[prefix.end() :] if prefix else line))
    for index, (level, message) in enumerate(messages):
        if level in (None, *_ERROR_LEVELS) and _EXCEPTION.match(message):
            if re.search(r"\d+ validation errors? for ", message):
                message += " " + " ".join(m for _, m in messages[index + 1 : index + 3])
            return one_line(message, 400)
    for _, message in messages:
        if _USAGE_ERROR.match(message):
            return one_line(message, 400)
    for level, message in messages:
        if message[:1].isspace() or not message or message.startswith("Traceback"):
            continue  # a traceback's frames, not its error
        if level in _ERROR_LEVELS or _SAYS_ERROR.match(message):
            return one_line(message, 400)
    return ""


def _cmdline(pid: int) -> list[str] | None:
    """A live process's command line (None when it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if state.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False  # a zombie is gone, only not reaped
    return True


class ServerProcess:
    """One server process (see the module). ``command`` may hold ``{port}``, replaced by the
    port chosen (a free loopback port unless ``port`` is given)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        name: str = "server",
        port: int | None = None,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        health_path: str = "/health",
        startup_timeout_s: float = 300.0,
        log_path: Path | None = None,
        registry: Path | None = None,
        stop_timeout_s: float = 15.0,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port or 0
        self.template = tuple(command)
        self.env = dict(env or {})
        self.health_path = health_path
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self.registry = registry
        self.stop_timeout_s = stop_timeout_s
        self.url = ""
        self.command: tuple[str, ...] = ()
        self.startup_s: float | None = None
        """Seconds from the start of the process to its first healthy answer."""
        self.exit_code: int | None = None
        self.final_log_tail = ""
        """The log's last lines when the server was stopped (the default log is then gone)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._log_dir: Path | None = None
        self._record: Path | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The server's process id (also its process group's)."""
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._process.pid

    def start(self) -> None:
        """Start the server and wait until it is healthy (:class:`ServerStartError` if not;
        the group is then already stopped). A port this object chose (none was given) can be
        taken by another process between :func:`free_port` and the server's bind: a server
        that exits saying so is started again on a new port, up to :data:`PORT_ATTEMPTS`
        times."""
        if self._process is not None:
            raise RuntimeError(f"{self.name} is already started")
        ours = not self.port
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_once()
                return
            except ServerStartError as exc:
                lost = "address already in use" in f"{exc.first_error}\n{exc.log_tail}".lower()
                if not (ours and lost and exc.server_exit is not None) or attempt == PORT_ATTEMPTS:
                    raise
                self._process, self.port, self.exit_code = None, 0, None

    def _start_once(self) -> None:
        if self.log_path is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="accelscope-server-"))
            self.log_path = self._log_dir / "server.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"
        self.command = tuple(part.replace("{port}", str(self.port)) for part in self.template)
        began = time.perf_counter()
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self._register()
        deadline = began + self.startup_timeout_s
        try:
            while True:
                code = self._process.poll()
                if code is not None:
                    self.exit_code = code
                    raise self._start_error(
                        f"{self.name} exited with code {code} before it was ready", code
                    )
                if self.healthy():
                    self.startup_s = time.perf_counter() - began
                    return
                if time.perf_counter() > deadline:
                    raise self._start_error(
                        f"{self.name} not healthy after {self.startup_timeout_s:g} s", None
                    )
                time.sleep(0.25)
        except BaseException:
            self.stop()  # a failed start (or Ctrl-C while waiting) leaves nothing running
            raise

    def _start_error(self, message: str, code: int | None) -> ServerStartError:
        """The failed start, its message ending with the log's first error line."""
        found = self.first_error()
        return ServerStartError(
            f"{message}: {found}" if found else message,
            log_tail=self.log_tail(),
            server_exit=code,
            first_error=found,
        )

    def first_error(self) -> str:
        """The log's first error line (:func:`first_error`; its last 4 MiB are read)."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(max(0, self.log_path.stat().st_size - _LOG_READ_BYTES))
            return first_error(handle.read().decode("utf-8", "replace"))

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """Whether ``GET health_path`` answers 200 now."""
        if not self.port:
            return False
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            connection.request("GET", self.health_path)
            response = connection.getresponse()
            response.read()
            return response.status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def running(self) -> bool:
        """Whether the server's leader process is still there."""
        return self._process is not None and self._process.poll() is None

    def exit_status(self) -> int | None:
        """The leader's exit code (negative: the signal), None while it runs."""
        return None if self._process is None else self._process.poll()

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's log."""
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _signal_group(self, signum: signal.Signals) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signum)

    def group_alive(self) -> bool:
        """Whether any process of the server's group is still there."""
        if self._process is None:
            return False
        self._process.poll()  # reap the leader if it exited
        try:
            os.killpg(self._process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _wait_group(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.group_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after ``stop_timeout_s`` (idempotent). The
        default log directory is removed after a good start and kept after a failed one."""
        if self._process is None:
            return
        if self.group_alive():
            self._signal_group(signal.SIGTERM)
            if not self._wait_group(self.stop_timeout_s):
                self._signal_group(signal.SIGKILL)
                self._wait_group(10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        if self.exit_code is None:
            self.exit_code = self._process.returncode
        self._unregister()
        self.final_log_tail = self.log_tail()
        if self._log_dir is not None and self.startup_s is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def kill(self) -> None:
        """SIGKILL the process group now (a server dying mid-run), and wait until every
        process of it is gone; ``stop()`` still reaps."""
        self._signal_group(signal.SIGKILL)
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            self._wait_group(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the registry of running servers ---------------------------------------------------

    def _register(self) -> None:
        if self.registry is None or self._process is None:
            return
        record = {
            "pid": self._process.pid,
            "name": self.name,
            "port": self.port,
            "command": list(self.command),
            "owner_pid": os.getpid(),
            "owner_command": _cmdline(os.getpid()) or [],
            "started_at": time.time(),
        }
        with contextlib.suppress(OSError):
            self.registry.mkdir(parents=True, exist_ok=True)
            self._record = write_atomic(
                self.registry / f"server-{self._process.pid}.json", json.dumps(record)
            )

    def _unregister(self) -> None:
        if self._record is not None:
            with contextlib.suppress(OSError):
                self._record.unlink()
            self._record = None


@dataclass(frozen=True)
class LeftoverServer:
    """A server an earlier accelscope started and could not stop (it was killed)."""

    pid: int
    name: str
    port: int
    command: tuple[str, ...]
    owner_pid: int
    owner_command: tuple[str, ...]
    started_at: float
    record: Path

    def describe(self) -> str:
        """One line naming it, and how to stop it."""
        command = one_line(" ".join(self.command), 160)
        return (
            f"{self.name} (pid {self.pid}, port {self.port}: {command}) was started by "
            f"accelscope pid {self.owner_pid}, which is gone; stop it with "
            f"`kill -TERM -{self.pid}`"
        )


def leftover_servers(registry: Path) -> list[LeftoverServer]:
    """Servers recorded in ``registry`` whose starter is gone and that still run with the
    recorded command line. Records of servers that are gone are removed; a pid now used by
    another program (its command line differs) is forgotten, never reported."""
    found: list[LeftoverServer] = []
    if not registry.is_dir():
        return found
    for path in sorted(registry.glob("server-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            server = LeftoverServer(
                pid=int(data["pid"]),
                name=str(data.get("name", "server")),
                port=int(data.get("port", 0)),
                command=tuple(str(p) for p in data["command"]),
                owner_pid=int(data["owner_pid"]),
                owner_command=tuple(str(p) for p in data.get("owner_command", [])),
                started_at=float(data.get("started_at", 0.0)),
                record=path,
            )
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                path.unlink()  # unreadable: not ours to trust
            continue
        owner = _cmdline(server.owner_pid)
        if _alive(server.owner_pid) and owner is not None and tuple(owner) == server.owner_command:
            continue  # its starter still runs (another accelscope at work)
        if not _alive(server.pid) or tuple(_cmdline(server.pid) or ()) != server.command:
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        found.append(server)
    return found


def stop_leftover(server: LeftoverServer, timeout_s: float = 15.0) -> bool:
    """SIGTERM (then SIGKILL) the group of a leftover server, checked again just before;
    True when it is gone."""
    if tuple(_cmdline(server.pid) or ()) != server.command:
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(server.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.pid, signal.SIGKILL)
        time.sleep(0.2)
    gone = not _alive(server.pid)
    if gone:
        with contextlib.suppress(OSError):
            server.record.unlink()
    return gone
