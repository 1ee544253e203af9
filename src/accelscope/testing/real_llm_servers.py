"""The real LLM servers the tests start: ``transformers serve`` and vLLM, each a
:class:`~accelscope.llm.server_process.ServerProcess` on a free loopback port.

:class:`TransformersServe` runs the real ``transformers serve`` (the ``serving`` extra of
transformers) on CPU in its own process group, on a free port, offline, its output in a log
file; it waits for ``GET /health`` and stops the whole group on exit. Served with
:func:`accelscope.testing.llm_model.build_tiny_llama`'s model it streams exactly ``max_tokens``
tokens, one SSE event per token. What transformers 5.23 does differently from vLLM (seen on
that model, with and without ``--continuous-batching``): the final chunk carries
``finish_reason`` *and* ``usage`` whether or not ``stream_options.include_usage`` was asked
(the field is accepted and ignored); there is no ``data: [DONE]``; events that queued up while
the event loop was busy leave in one write; a wrong model name is ``400`` (``{"detail": ...}``,
"Server is pinned to ..."), an unknown field such as ``ignore_eos`` is ``422``;
``GET /metrics`` is ``404``; ``GET /v1/models`` fails (500) without a Hugging Face cache
directory. With continuous batching the batching manager (and its KV cache, see
:data:`CB_NUM_BLOCKS`) starts on the first request, which therefore takes seconds longer. ::

    with TransformersServe(build_tiny_llama(tmp / "model")) as server:
        run_client(server.url, model=server.model)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from accelscope.llm.server_process import ServerProcess, ServerStartError

__all__ = ["CB_NUM_BLOCKS", "VLLM_STARTUP_TIMEOUT_S", "TransformersServe", "VllmServe"]

CB_NUM_BLOCKS = 64
"""KV-cache blocks (of 256 tokens) :class:`TransformersServe` gives continuous batching. Left to
itself, transformers sizes that cache from the device's memory, on CPU the machine's RAM: a
24 GiB machine saw 8.5 GiB resident and 20-30 s on the first request; 64 blocks (16384 tokens)
is 1.2 GiB and under 2 s."""


class TransformersServe(ServerProcess):
    """The real ``transformers serve`` on ``model_dir``, on CPU, on a free loopback port.

    A :class:`~accelscope.llm.server_process.ServerProcess` (own process group, parent-death
    signal, log file, always stopped) started with ``HF_HUB_OFFLINE=1``,
    ``TRANSFORMERS_OFFLINE=1`` and ``TOKENIZERS_PARALLELISM=false``; ready when ``GET /health``
    answers 200 (the model is loaded before the server listens). A process that exits first,
    or a server not ready within ``startup_timeout_s``, is a :class:`RuntimeError` holding the
    log's last lines (the log is kept then). ``model`` is what to send as ``"model"``: the
    server is pinned to the path it was started with and refuses any other name; it answers
    ``"<path>@main"`` in its chunks. ``stop()`` sends SIGTERM to the group, waits 10 s, then
    SIGKILL; ``kill()`` is SIGKILL at once (the server dying mid-run).

    ``continuous_batching`` adds ``--continuous-batching`` and, unless ``cb_num_blocks`` is
    ``None``, ``--cb-num-blocks`` (:data:`CB_NUM_BLOCKS`: transformers would otherwise size the
    KV cache from the machine's RAM). ``extra_args`` come last, so they override. ``device``
    is ``--device``. ``startup_s`` is how long the start took.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        continuous_batching: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 180,
        log_path: Path | None = None,
        device: str = "cpu",
        cb_num_blocks: int | None = CB_NUM_BLOCKS,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.continuous_batching = continuous_batching
        self.cb_num_blocks = cb_num_blocks
        self.extra_args = tuple(extra_args)
        self.device = device
        self.model = str(model_dir)
        command = [str(self.executable()), "serve", self.model]
        command += ["--port", "{port}", "--host", "127.0.0.1", "--device", device]
        if continuous_batching:
            command.append("--continuous-batching")
            if cb_num_blocks is not None:
                command += ["--cb-num-blocks", str(cb_num_blocks)]
        super().__init__(
            [*command, *self.extra_args],  # an option given twice: the last one counts
            name="transformers serve",
            env={
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            },
            startup_timeout_s=startup_timeout_s,
            log_path=log_path,
            stop_timeout_s=10.0,
        )

    @staticmethod
    def executable() -> Path:
        """The ``transformers`` command of this Python environment."""
        return Path(sys.executable).with_name("transformers")

    def start(self) -> None:
        """Start the server and wait until it is healthy (RuntimeError with the log if not)."""
        executable = self.executable()
        if not executable.is_file():
            raise RuntimeError(
                f"{executable} not found: install transformers with its serving extra "
                "(pip install 'transformers[serving]')"
            )
        try:
            super().start()
        except ServerStartError as error:
            raise RuntimeError(
                f"transformers serve {error.message.removeprefix(self.name + ' ')}; last lines "
                f"of {self.log_path}:\n{error.log_tail}"
            ) from None

    def _healthy(self) -> bool:
        return self.healthy()


VLLM_STARTUP_TIMEOUT_S = 420.0
"""A vLLM CPU server started to healthy in 81-140 s here (45 s with --enforce-eager); a loaded
2-core machine doubles that."""


class VllmServe(ServerProcess):
    """The real vLLM OpenAI server on ``model_dir`` (a CPU build on these machines), on a
    free loopback port: a :class:`~accelscope.llm.server_process.ServerProcess` (own process
    group, parent-death signal, health wait on ``/health``, always stopped; the log is kept
    when the start fails, in the :class:`~accelscope.llm.server_process.ServerStartError`).

    The environment is found by :func:`accelscope.llm.engines.find_vllm` (``python``, else
    ``vllm`` on ``PATH``, else the project's ``.venv-vllm`` that ``make vllm`` builds): a
    missing one is a one-line :class:`~accelscope.errors.BadInputError` saying how to make it.
    ``enforce_eager`` skips torch.compile (half the start time; what a test wants), ``kv_cache_gib``
    is the CPU build's KV-cache space; ``prefix_caching``, ``max_num_seqs``, ``dtype``,
    ``kv_cache_dtype`` and ``max_model_len`` are vLLM's flags (None: its default). ``model`` is
    the name to send: the directory, as vLLM names a model it was started with."""

    def __init__(
        self,
        model_dir: Path,
        *,
        python: Path | None = None,
        enforce_eager: bool = True,
        kv_cache_gib: float = 1.0,
        prefix_caching: bool | None = None,
        max_num_seqs: int | None = None,
        max_model_len: int | None = 2048,
        dtype: str | None = None,
        kv_cache_dtype: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = VLLM_STARTUP_TIMEOUT_S,
        log_path: Path | None = None,
        registry: Path | None = None,
    ) -> None:
        from accelscope.llm.engines import find_vllm, vllm_command, vllm_environment

        self.model_dir = Path(model_dir)
        self.model = str(model_dir)
        self.install = find_vllm(python)
        flags: list[str] = []
        if enforce_eager:
            flags.append("--enforce-eager")
        if max_model_len is not None:
            flags += ["--max-model-len", str(max_model_len)]
        if prefix_caching is not None:
            flags.append(
                "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"
            )
        if max_num_seqs is not None:
            flags += ["--max-num-seqs", str(max_num_seqs)]
        if dtype is not None:
            flags += ["--dtype", dtype]
        if kv_cache_dtype is not None:
            flags += ["--kv-cache-dtype", kv_cache_dtype]
        super().__init__(
            vllm_command(self.install, self.model_dir, flags=[*flags, *extra_args]),
            name="vllm",
            env=vllm_environment(self.install, kv_cache_gib=kv_cache_gib),
            startup_timeout_s=startup_timeout_s,
            log_path=log_path,
            registry=registry,
        )
