"""What every in-process batching strategy shares: argument checks, loading once, the
client side of a request (tokenize, refuse, hand over, wait, measure) and closing.

A strategy (:mod:`.static`, :mod:`.continuous`) supplies how a request is handed to the
generation side, the worker thread that generates, and what closing must release.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
from pathlib import Path
from typing import ClassVar, Literal

from accelscope.errors import BadInputError, exception_line
from accelscope.llm.documents import TargetDescription
from accelscope.llm.inprocess.loading import (
    LoadedModel,
    Model,
    load_model,
    model_type_of,
    parse_device,
    parse_dtype,
)
from accelscope.llm.inprocess.slot import Slot
from accelscope.llm.records import LlmRequest, RequestRecord

__all__ = ["CACHES", "CLOSED", "Batching", "Cache", "InProcessModel", "parse_cache"]

Batching = Literal["static", "continuous"]
Cache = Literal["dynamic", "static"]
CACHES: tuple[Cache, ...] = ("dynamic", "static")
CLOSED = "the in-process target was closed"
"""The error of every request still in flight when the target closes."""
_POLL_S = 0.02
"""How often a waiting client thread looks at ``cancel`` and its deadline."""


def parse_cache(cache: str) -> Cache:
    """``dynamic`` or ``static``; anything else is one line of bad input."""
    for known in CACHES:
        if cache.strip().lower() == known:
            return known
    raise BadInputError(f"--cache {cache!r}: give {' or '.join(CACHES)}")


class InProcessModel(abc.ABC):
    """A local Hugging Face causal LM served in this process, one batching strategy per
    subclass (build one with :func:`~accelscope.llm.inprocess.in_process_model`).

    ``max_batch`` caps the requests generated together; ``dtype`` is ``"auto"`` (the
    checkpoint's), ``"float32"``, ``"bfloat16"`` or ``"float16"`` (``fp32``, ``bf16``,
    ``fp16`` too; ``None`` is ``auto``); ``device`` is ``cpu`` or ``cuda[:N]`` (the model is
    moved there at load; an index that does not exist is one line of bad input); ``threads``
    sets ``torch.set_num_threads`` once, at load. ``cache`` is the KV cache ``generate`` uses
    (``dynamic``, grown per step, or ``static``, preallocated so shapes stay fixed) and
    ``compile`` wraps the model's decoding step in ``torch.compile`` (it needs the static
    cache); a strategy that cannot honour them refuses them in one line.

    Loading happens in :meth:`check`, or lazily once on the first request. Every request is
    tokenized by the client thread that sends it (after ``sent_s`` is stamped, so tokenization
    counts in the time to first token, as a server's would) and waits for its record.
    Cancellation (``cancel`` set) returns the request at once, ``cancelled``; a request still
    unfinished ``timeout_s`` after it was sent is abandoned the same way with
    ``error="timeout after …s"``. A request whose prompt plus ``max_tokens`` exceeds the
    model's context is refused by itself.
    """

    batching: ClassVar[Batching]

    def __init__(
        self,
        model_dir: Path,
        *,
        max_batch: int = 8,
        dtype: str | None = "auto",
        device: str = "cpu",
        threads: int | None = None,
        cache: str = "dynamic",
        compile: bool = False,
    ) -> None:
        self.device = parse_device(device)
        self.cache = parse_cache(cache)
        if compile and self.cache != "static":
            raise BadInputError(
                "--compile needs --cache static: a dynamic cache changes shape every step, "
                "so the compiled step would recompile at every token"
            )
        self.compile = compile
        if max_batch < 1:
            raise BadInputError(f"max batch {max_batch}: give at least 1")
        self.dtype = parse_dtype(dtype)
        if threads is not None and threads < 1:
            raise BadInputError(f"threads {threads}: give at least 1")
        self.model_dir = Path(model_dir)
        self.max_batch = max_batch
        self.threads = threads
        self._load_lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._loaded: LoadedModel | None = None
        self._load_error: BadInputError | None = None
        self._closed = False
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        """Set once closing starts: the worker stops generating and fails what it holds."""
        self._compile_s: float | None = None
        self._setup()

    # -- what a strategy supplies -------------------------------------------------------------

    @abc.abstractmethod
    def _setup(self) -> None:
        """Check the settings against the strategy (one-line ``BadInputError``) and set up its
        own state; called once at the end of ``__init__``."""

    @abc.abstractmethod
    def _start(self, loaded: LoadedModel) -> threading.Thread:
        """Warm up or start the generation side (one-line ``BadInputError`` when the model
        cannot generate this way) and return its worker thread, not yet started."""

    @abc.abstractmethod
    def _hand_over(self, slot: Slot) -> str:
        """Give ``slot`` to the generation side; an error line when it would not take it."""

    @abc.abstractmethod
    def _withdraw(self, slot: Slot) -> None:
        """``slot``'s client gave up (cancel or timeout): tell the generation side, where it
        has to be told (a worker that skips abandoned slots itself needs nothing)."""

    @abc.abstractmethod
    def _stop_worker(self) -> None:
        """Closing: wake the worker so that it sees ``_stopping`` and returns."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Closing, once the worker has returned: fail whatever is still held with
        :data:`CLOSED` and release what the strategy started."""

    def _capacity_refusal(self, prompt_tokens: int, max_tokens: int) -> str:
        """Why the strategy cannot hold a request this long ("" when it can); the model's
        own context is checked after this."""
        return ""

    # -- Target -------------------------------------------------------------------------------

    def describe(self) -> TargetDescription:
        """Kind, directory, batching, ``max_batch``, dtype, model type and parameter count
        (``None`` until loaded; the model type is read from ``config.json`` before); with a
        static cache or ``compile``, those, the compile mode and the compile time too (kept as
        extra keys, so runs stored before them load as they were)."""
        loaded = self._loaded
        extra: dict[str, object] = {}
        if self.cache != "dynamic" or self.compile:
            extra = {"cache": self.cache, "compile": self.compile}
        if self.compile:
            extra |= {"compile_mode": self.compile_mode, "compile_s": self._compile_s}
        description = TargetDescription(
            kind="in-process",
            model_dir=str(self.model_dir),
            batching=self.batching,
            max_batch=self.max_batch,
            dtype=self.dtype,
            device=self.device,
            model_type=loaded.model_type if loaded else model_type_of(self.model_dir),
            parameters=loaded.parameters if loaded else None,
        )
        return description.model_copy(update=extra) if extra else description

    def check(self) -> None:
        """Load the model, tokenizer and worker (once); one-line ``BadInputError`` if it
        cannot serve."""
        self._ensure_loaded()

    def stream(
        self,
        request: LlmRequest,
        *,
        origin_s: float,
        scheduled_s: float,
        timeout_s: float,
        cancel: threading.Event,
    ) -> RequestRecord:
        """Hand ``request`` over, wait for its tokens and measure them. Never raises: a
        failure is the record's ``error``."""
        sent_pc = time.perf_counter()

        def failed(error: str, cancelled: bool = False) -> RequestRecord:
            record = request.record(scheduled_s=scheduled_s, sent_s=sent_pc - origin_s)
            record.end_s = time.perf_counter() - origin_s
            record.error, record.cancelled = error, cancelled
            record.tokens_source = "generated"
            return record

        if cancel.is_set():
            return failed("", cancelled=True)
        if self._closed:
            return failed("the in-process target is closed")
        try:
            self._ensure_loaded()
            input_ids = self._encode(request.prompt)
        except BadInputError as error:
            return failed(error.message)
        except Exception as exc:  # noqa: BLE001 - a tokenizer failure is this request's error
            return failed(f"tokenizing the prompt failed: {exception_line(exc, named=True)}")
        why = self._refusal(request, len(input_ids))
        if not why:
            slot = Slot(request=request, input_ids=input_ids, sent_pc=sent_pc)
            why = self._hand_over(slot)
            if not why:
                return self._wait(slot, origin_s, scheduled_s, timeout_s, cancel)
        record = failed(why)
        record.prompt_tokens = len(input_ids)
        return record

    def trial_notes(self) -> list[str]:
        """What the strategy saw of the requests since the last call; nothing by default."""
        return []

    def close(self) -> None:
        """Stop the worker, fail what still waits and let the weights go (the tokenizer
        stays for clients still decoding). Twice is fine."""
        with self._load_lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        self._stop_worker()
        if self._worker is not None:
            self._worker.join()
        self._release()
        if self._loaded is not None:
            self._loaded = dataclasses.replace(self._loaded, model=None)

    # -- observation ----------------------------------------------------------------------------

    @property
    def model(self) -> Model | None:
        """The loaded ``transformers`` model (``None`` before loading and after closing)."""
        return self._loaded.model if self._loaded is not None else None

    @property
    def compile_mode(self) -> str | None:
        """``torch.compile``'s mode when ``compile`` is on: ``reduce-overhead`` (CUDA graphs:
        one replay per decoding step instead of a launch per kernel) on a GPU, ``default`` on
        the CPU, where there are no graphs to replay; ``None`` when off."""
        if not self.compile:
            return None
        return "default" if self.device == "cpu" else "reduce-overhead"

    @property
    def compile_s(self) -> float | None:
        """Seconds the warm-up spent compiling (its generate calls, before any request is
        measured); ``None`` without ``compile`` or before loading."""
        return self._compile_s

    @property
    def worker_running(self) -> bool:
        """Whether the worker thread that generates (or routes) is alive."""
        return self._worker is not None and self._worker.is_alive()

    # -- shared by the strategies ---------------------------------------------------------------

    def _ensure_loaded(self) -> LoadedModel:
        with self._load_lock:
            if self._closed:
                raise BadInputError("the in-process target is closed")
            if self._load_error is not None:
                raise self._load_error
            if self._loaded is not None:
                return self._loaded
            try:
                loaded = load_model(
                    self.model_dir, dtype=self.dtype, device=self.device, threads=self.threads
                )
                self._loaded = loaded  # the warm-up tokenizes through it
                self._worker = self._start(loaded)
            except BadInputError as error:
                self._loaded = None
                self._load_error = error
                raise
            self._worker.start()
            return loaded

    def _require_loaded(self) -> LoadedModel:
        loaded = self._loaded
        if loaded is None:
            raise BadInputError("the in-process model is not loaded")
        return loaded

    def _encode(self, prompt: str) -> list[int]:
        tokenizer = self._require_loaded().tokenizer
        with self._tokenizer_lock:
            ids = tokenizer(prompt)["input_ids"]
        return [int(i) for i in ids]

    def _decode(self, tokens: list[int]) -> str:
        tokenizer = self._require_loaded().tokenizer
        with self._tokenizer_lock:
            return str(tokenizer.decode(tokens, skip_special_tokens=True))

    def _refusal(self, request: LlmRequest, prompt_tokens: int) -> str:
        """Why this request cannot be generated at all ("" when it can)."""
        if request.max_tokens < 1:
            return f"max_tokens {request.max_tokens}: give at least 1"
        if prompt_tokens == 0:
            return "the prompt tokenizes to no tokens"
        why = self._capacity_refusal(prompt_tokens, request.max_tokens)
        if why:
            return why
        context = self._require_loaded().context_tokens
        if context is not None and prompt_tokens + request.max_tokens > context:
            return (
                f"prompt of {prompt_tokens} tokens + max_tokens {request.max_tokens} exceeds "
                f"the model's context of {context} tokens (max_position_embeddings)"
            )
        return ""

    def _wait(
        self,
        slot: Slot,
        origin_s: float,
        scheduled_s: float,
        timeout_s: float,
        cancel: threading.Event,
    ) -> RequestRecord:
        deadline = slot.sent_pc + timeout_s
        error = ""
        cancelled = False
        while not slot.done.wait(max(0.0, min(_POLL_S, deadline - time.perf_counter()))):
            if cancel.is_set() and slot.abandon():
                cancelled = True
                break
            if time.perf_counter() >= deadline and slot.abandon():
                error = f"timeout after {timeout_s:g}s"
                break
        if cancelled or error:
            self._withdraw(slot)
        with slot.lock:
            tokens = list(slot.tokens)
            times = list(slot.times_pc)
            end_pc = slot.end_pc if slot.end_pc is not None else time.perf_counter()
            error = error or slot.error
        chunk_times = [t - origin_s for t in times]
        text = self._decode(tokens) if tokens else ""
        record = slot.request.record(scheduled_s=scheduled_s, sent_s=slot.sent_pc - origin_s)
        record.end_s = end_pc - origin_s
        record.first_token_s = chunk_times[0] if chunk_times else None
        record.chunk_times_s = chunk_times
        record.output_tokens = len(tokens)
        record.prompt_tokens = len(slot.input_ids)
        record.tokens_source = "generated"
        record.output_chars = len(text)
        record.output_text = text
        record.error, record.cancelled = error, cancelled
        return record
