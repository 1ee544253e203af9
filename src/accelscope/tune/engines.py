"""The servers ``tune`` can configure (:data:`ENGINES`): how each is found, the flags it accepts
(read from its own ``--help``, cached per install), the command line of one configuration, the
launch line to paste, which flags can change the answers (the quality guard), and what a failed
start can be (:mod:`accelscope.tune.failures`). Each engine builds itself from the same typed
:class:`EngineSpec` (:meth:`Engine.build`), so ``--engine`` picks a class from :data:`ENGINES` and
nothing else branches on the name.

- ``vllm``: ``python -m vllm.entrypoints.openai.api_server`` of the environment
  :func:`accelscope.llm.engines.find_vllm` finds; on its CPU build with a KV-cache space sized
  once, before the first server starts, from the memory free
  (:func:`accelscope.llm.engines.size_kv_cache`; vLLM's default reserves 92 % of the node);
- ``transformers``: ``transformers serve``;
- ``template``: any OpenAI-compatible server from a command template, ``{port}`` and
  ``{model}`` filled in and each space flag ``{max_num_seqs}`` (dashes as underscores).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import string
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from accelscope.errors import BadInputError, one_line
from accelscope.files import write_atomic
from accelscope.llm.engines import (
    KV_CACHE_ENV,
    KvCacheSize,
    VllmInstall,
    find_transformers,
    find_vllm,
    size_kv_cache,
    vllm_command,
    vllm_environment,
    whole_gib,
)
from accelscope.tune.flags import (
    FlagKind,
    FlagSpec,
    Value,
    convert,
    parse_help,
    render,
    unknown_flag,
)
from accelscope.tune.space import Config

__all__ = [
    "ENGINES",
    "Engine",
    "EngineSettings",
    "EngineSpec",
    "TemplateEngine",
    "TransformersEngine",
    "VllmEngine",
]


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """What ``tune`` was told about its servers; each engine takes what it needs."""

    model: Path
    """The directory every server loads (a template's ``{model}``)."""
    cache: Path
    """Where engines keep what they read once per install (their ``--help``)."""
    engine_args: tuple[str, ...] = ()
    vllm_python: Path | None = None
    kv_cache_gib: float | None = None
    server_command: str | None = None
    health_path: str = "/health"
    served_name: str | None = None
    quality_flags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """What :meth:`Engine.prepare` decided, stored with the run (the KV-cache space vLLM's CPU
    build got; nothing for the others)."""

    kv_cache_gib: float | None = None
    kv_cache: str = ""


class Engine(ABC):
    """One server kind: found, its flags known, its configurations launched."""

    name: str = ""
    health_path: str = "/health"
    quality_flags: frozenset[str] = frozenset()
    """Flags that can change the answers: a configuration setting one goes through the
    quality guard."""
    managed: frozenset[str] = frozenset()
    """Flags tune sets itself (model, host, port): refused in the space."""
    local: bool = True
    """It loads ``--model-dir`` itself (a template may serve anything)."""
    ignores_eos: bool = True
    """It honours ``ignore_eos`` (exact output lengths) by default; ``transformers serve``
    refuses the field."""

    @classmethod
    def check(cls, spec: EngineSpec) -> None:
        """One line of bad input when ``spec`` cannot make this engine (before anything runs)."""
        if spec.server_command:
            raise BadInputError("--server-command is the template engine's: add --engine template")
        if cls.local and not (spec.model.is_dir() and (spec.model / "config.json").is_file()):
            raise BadInputError(
                f"--model-dir {spec.model}: not a model directory (no config.json); give the "
                "directory the server loads"
            )

    @classmethod
    @abstractmethod
    def build(cls, spec: EngineSpec) -> Self:
        """The engine of ``spec`` (found on this machine: one line when it is not)."""

    @property
    def has_defaults(self) -> bool:
        """Whether the engine started with no flag of the space is a configuration (a
        template with placeholders is not: every one needs a value)."""
        return True

    def __init__(self, model: Path, *, extra_args: Sequence[str] = ()) -> None:
        self.model = model
        self.extra_args = tuple(extra_args)
        self.notes: list[str] = []
        """What :meth:`prepare` decided, for the run's notes and the terminal."""

    def prepare(self, space_flags: Sequence[str]) -> None:
        """Settle, once, before the first server starts, what every configuration shares
        (vLLM's CPU build: its KV-cache space); ``space_flags``: every flag the space sets."""
        self.notes = []  # nothing to settle (an engine that sizes something says what here)

    def settings(self) -> EngineSettings:
        """What :meth:`prepare` decided, for the stored run's settings."""
        return EngineSettings()

    @abstractmethod
    def flags(self) -> dict[str, FlagSpec]:
        """Every flag the engine accepts, by name."""

    def convert(self, name: str, text: str) -> Value:
        """One value of the space (one line of bad input when the engine would refuse it)."""
        if name in self.managed:
            raise BadInputError(f"--space {name}: tune sets --{name} itself")
        flags = self.flags()
        if name not in flags:
            raise unknown_flag(name, flags, self.name)
        return convert(flags[name], text, self.name)

    @abstractmethod
    def command(self, config: Config) -> list[str]:
        """The command line of ``config`` (``{port}`` filled in at start)."""

    def environment(self) -> dict[str, str]:
        """Variables the server gets (offline, device selection)."""
        return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    @property
    def served_model(self) -> str:
        """The model name requests must carry."""
        return str(self.model)

    def launch_line(self, config: Config) -> str:
        """The command to paste to serve ``config`` (port 8000, on every interface)."""
        words = [w.replace("{port}", "8000") for w in self.command(config)]
        words = ["0.0.0.0" if w == "127.0.0.1" else w for w in words]
        return shlex.join(words)

    def touches_quality(self, config: Config, reference: Config) -> set[str]:
        """The quality flags ``config`` sets differently from ``reference``."""
        return config.differs_in(reference) & self.quality_flags

    def describe(self) -> str:
        """What was found, for the stored run."""
        return self.name


def _cached_help(cache: Path | None, key: str, produce: list[str], env: dict[str, str]) -> str:
    """``--help`` text of a command, cached in ``cache`` under ``key`` (it takes vLLM 10-30
    s to print its help)."""
    path = cache / f"{key}.help" if cache is not None else None
    if path is not None and path.is_file():
        return path.read_text(encoding="utf-8")
    import os

    try:
        answer = subprocess.run(
            produce,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COLUMNS": "200", **env},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInputError(f"cannot read the engine's flags ({one_line(str(exc))})") from None
    text = answer.stdout + answer.stderr
    if answer.returncode != 0 or "--" not in text:
        raise BadInputError(
            f"`{shlex.join(produce)}` failed (exit {answer.returncode}): {one_line(text[-300:])}"
        )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return text


VLLM_TYPES: dict[str, FlagKind] = {
    "max-num-seqs": "int",
    "max-num-batched-tokens": "int",
    "max-model-len": "int",
    "tensor-parallel-size": "int",
    "pipeline-parallel-size": "int",
    "data-parallel-size": "int",
    "block-size": "int",
    "max-num-partial-prefills": "int",
    "long-prefill-token-threshold": "int",
    "num-scheduler-steps": "int",
    "gpu-memory-utilization": "float",
    "cpu-offload-gb": "float",
    "swap-space": "float",
    "kv-cache-memory-bytes": "int",
}
"""The kinds of vLLM's numeric flags (its argparse help shows no types)."""


class VllmEngine(Engine):
    """vLLM's OpenAI server (see :func:`accelscope.llm.engines.find_vllm`)."""

    name = "vllm"
    quality_flags = frozenset(
        {"dtype", "kv-cache-dtype", "quantization", "quantization-config", "speculative-config"}
    )
    managed = frozenset({"model", "host", "port", "served-model-name"})

    def __init__(
        self,
        model: Path,
        *,
        python: Path | None = None,
        extra_args: Sequence[str] = (),
        cache: Path | None = None,
        kv_cache_gib: float | None = None,
        install: VllmInstall | None = None,
    ) -> None:
        super().__init__(model, extra_args=extra_args)
        self.install = install or find_vllm(python)
        self.cache = cache
        if kv_cache_gib is not None and self.install.cpu_build:
            whole_gib(kv_cache_gib, "--kv-cache-gib")  # vLLM would refuse it at each start
        self.kv_cache_gib = kv_cache_gib
        self.kv_cache: KvCacheSize | None = None
        """The KV-cache space every configuration gets (:meth:`prepare`)."""
        self._flags: dict[str, FlagSpec] | None = None

    @classmethod
    def build(cls, spec: EngineSpec) -> Self:
        return cls(
            spec.model,
            python=spec.vllm_python,
            extra_args=spec.engine_args,
            cache=spec.cache,
            kv_cache_gib=spec.kv_cache_gib,
        )

    def prepare(self, space_flags: Sequence[str]) -> None:
        # once for every configuration: their KV caches equal, so they compare
        given = [w[2:].partition("=")[0] for w in self.extra_args if w.startswith("--")]
        self.kv_cache = size_kv_cache(
            self.install,
            self.model,
            kv_cache_gib=self.kv_cache_gib,
            user_flags=[*space_flags, *given],
        )
        self.notes = [self.kv_cache.why] if self.kv_cache.why else []

    def settings(self) -> EngineSettings:
        if self.kv_cache is None:
            return EngineSettings()
        return EngineSettings(kv_cache_gib=self.kv_cache.gib, kv_cache=self.kv_cache.why)

    def _kv_cache_gib(self) -> float | None:
        return self.kv_cache.gib if self.kv_cache is not None else self.kv_cache_gib

    def flags(self) -> dict[str, FlagSpec]:
        if self._flags is None:
            digest = hashlib.sha256(str(self.install.python).encode()).hexdigest()[:10]
            key = f"{self.install.distribution}-{self.install.version}-{digest}"
            text = _cached_help(
                self.cache,
                key,
                [str(self.install.python), "-m", "vllm.entrypoints.openai.api_server", "--help"],
                vllm_environment(self.install),
            )
            self._flags = parse_help(text, VLLM_TYPES)
        return self._flags

    def environment(self) -> dict[str, str]:
        return vllm_environment(self.install, kv_cache_gib=self._kv_cache_gib())

    def command(self, config: Config) -> list[str]:
        flags = [w for name, value in config.values for w in render(name, value)]
        return vllm_command(self.install, self.model, flags=[*self.extra_args, *flags])

    def launch_line(self, config: Config) -> str:
        # the KV-cache space it was measured with: without it, vLLM's CPU default may not start
        space = vllm_environment(self.install, kv_cache_gib=self._kv_cache_gib()).get(KV_CACHE_ENV)
        line = super().launch_line(config)
        return f"{KV_CACHE_ENV}={space} {line}" if space else line

    def describe(self) -> str:
        return f"{self.install.distribution} {self.install.version} ({self.install.python})"


class TransformersEngine(Engine):
    """``transformers serve`` (its batching flags: ``--continuous-batching``, ``--cb-*``)."""

    name = "transformers"
    quality_flags = frozenset({"dtype", "quantization", "attn-implementation"})
    managed = frozenset({"host", "port", "help", "format", "json", "quiet"})
    ignores_eos = False

    def __init__(
        self,
        model: Path,
        *,
        executable: Path | None = None,
        extra_args: Sequence[str] = (),
        cache: Path | None = None,
    ) -> None:
        super().__init__(model, extra_args=extra_args)
        self.executable = executable or find_transformers()
        self.cache = cache
        self._flags: dict[str, FlagSpec] | None = None

    @classmethod
    def build(cls, spec: EngineSpec) -> Self:
        return cls(spec.model, extra_args=spec.engine_args, cache=spec.cache)

    def flags(self) -> dict[str, FlagSpec]:
        if self._flags is None:
            digest = hashlib.sha256(str(self.executable).encode()).hexdigest()[:10]
            text = _cached_help(
                self.cache, f"transformers-{digest}", [str(self.executable), "serve", "--help"], {}
            )
            self._flags = parse_help(text)
        return self._flags

    def command(self, config: Config) -> list[str]:
        flags = [w for name, value in config.values for w in render(name, value)]
        base = [str(self.executable), "serve", str(self.model), "--host", "127.0.0.1"]
        return [*base, "--port", "{port}", *self.extra_args, *flags]

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TOKENIZERS_PARALLELISM": "false"}


class TemplateEngine(Engine):
    """Any OpenAI-compatible server from ``--server-command``: ``{port}`` (required),
    ``{model}``, and one ``{flag_name}`` per space flag (dashes as underscores; a switch is
    ``true``/``false``). Values are inserted as typed (no type to check them against, beyond
    what the template names)."""

    name = "template"
    quality_flags = frozenset({"dtype", "kv-cache-dtype", "quantization", "speculative-config"})
    local = False

    @classmethod
    def check(cls, spec: EngineSpec) -> None:
        if not spec.server_command:
            raise BadInputError("--engine template needs --server-command 'CMD ... {port} ...'")

    @classmethod
    def build(cls, spec: EngineSpec) -> Self:
        assert spec.server_command is not None  # check() refused a spec without one
        return cls(
            spec.model,
            template=spec.server_command,
            health_path=spec.health_path,
            served_name=spec.served_name,
            quality_flags=spec.quality_flags,
        )

    def __init__(
        self,
        model: Path | str,
        *,
        template: str,
        health_path: str = "/health",
        served_name: str | None = None,
        quality_flags: Sequence[str] = (),
    ) -> None:
        super().__init__(Path(model))
        try:
            self.words = shlex.split(template)
        except ValueError as exc:
            raise BadInputError(f"--server-command: cannot split it ({exc})") from None
        fields = {
            name
            for word in self.words
            for _, name, _, _ in string.Formatter().parse(word)
            if name is not None
        }
        if "port" not in fields:
            raise BadInputError(
                "--server-command: the template needs {port} (where the server listens)"
            )
        bad = [f for f in fields if not re.fullmatch(r"[a-z][a-z0-9_]*", f)]
        if bad:
            raise BadInputError(f"--server-command: placeholder {{{bad[0]}}} is not a flag name")
        self.fields = fields - {"port", "model"}
        self.health_path = health_path
        self._served = served_name
        self.quality_flags = self.quality_flags | frozenset(quality_flags)

    @property
    def has_defaults(self) -> bool:
        return not self.fields

    def flags(self) -> dict[str, FlagSpec]:
        return {f.replace("_", "-"): FlagSpec(f.replace("_", "-"), "text") for f in self.fields}

    def convert(self, name: str, text: str) -> Value:
        if name.replace("-", "_") not in self.fields:
            raise BadInputError(
                f"--space {name}: the --server-command template has no {{{name.replace('-', '_')}}}"
            )
        raw = str(text).strip()
        if not raw:
            raise BadInputError(f"--space {name}=: give a value")
        return raw

    @property
    def served_model(self) -> str:
        return self._served or str(self.model)

    def command(self, config: Config) -> list[str]:
        values = {name.replace("-", "_"): str(value) for name, value in config.values}
        missing = sorted(self.fields - set(values))
        if missing:
            raise BadInputError(
                f"configuration {config.key}: the template's {{{missing[0]}}} has no value "
                "(set it in every configuration: --space, --candidate or --reference)"
            )
        filled = {**values, "model": str(self.model), "port": "{port}"}
        return [word.format(**filled) for word in self.words]


ENGINES: dict[str, type[Engine]] = {
    "vllm": VllmEngine,
    "transformers": TransformersEngine,
    "template": TemplateEngine,
}
"""The engines by ``--engine`` name."""
