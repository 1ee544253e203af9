"""An in-process ``Target``: a local Hugging Face model directory served from this process,
for CPU-only machines and CI, where no inference server (and no HTTP) is wanted.

Loading (in :meth:`InProcessModel.check`, or lazily once on the first request) reads only
``safetensors`` weights with ``local_files_only`` and ``trust_remote_code=False``: a directory
holding only ``pytorch_model.bin`` (a pickle, which can run code when loaded) is refused.

Every request is tokenized by the client thread that sends it (after ``sent_s`` is stamped, so
tokenization counts in the time to first token, as a server's would) and waits for its record;
generation runs elsewhere, in one of two modes:

``static``
    One worker thread takes up to ``max_batch`` waiting requests (whatever queued while the
    previous batch ran), left-pads them into one batch and runs one greedy ``model.generate``
    with ``max_new_tokens`` the largest of the batch. A streamer stamps ``time.perf_counter()``
    at every decoding step; each row still wanting tokens gets that stamp as a one-token chunk.
    A row stops counting at its own ``max_tokens`` or at the model's end-of-sequence id (which
    is not counted: it carries no text), and its client is released then, while the batch runs
    on for the others. A new request waits for the whole batch to finish: the head-of-line
    blocking static batching is measured for.
``continuous``
    ``transformers``' own continuous batching (``model.init_continuous_batching``: a paged KV
    cache and a scheduler that admits and retires requests at every step) with at most
    ``max_batch`` requests per step. Each request asks for the per-token timestamps the
    generation loop records (``record_timestamps``), stamped on the same ``perf_counter`` clock
    when each token is sampled; one worker thread routes finished outputs to their clients. The
    paged cache is sized here (``max_batch`` requests of up to
    ``min(max_position_embeddings, 4096)`` tokens each), not from the machine's free memory as
    ``transformers`` would by default (60 % of RAM on a CPU).

Cancellation (``cancel`` set) returns the request at once, ``cancelled``: a waiting request is
never generated; a running one stops counting and, in static mode, stops the batch early only
when every row of it is done or abandoned (otherwise its row runs on with the batch); in
continuous mode it is cancelled in the scheduler. A request still unfinished ``timeout_s`` after
it was sent is abandoned the same way with ``error="timeout after …s"``. A request whose prompt
plus ``max_tokens`` exceeds the model's context is refused by itself; an exception raised by
generation becomes the error of every request of that batch (one line) and the worker goes on.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import itertools
import json
import math
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from accelscope.errors import BadInputError, one_line
from accelscope.llm.documents import TargetDescription
from accelscope.llm.records import LlmRequest, RequestRecord

__all__ = ["Batching", "InProcessModel"]

Batching = Literal["static", "continuous"]
_DTYPES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
_CB_MAX_REQUEST_TOKENS = 4096
"""Longest request (prompt plus ``max_tokens``) the continuous-batching cache is sized for."""
_CB_MAX_BATCH_TOKENS = 1024
"""Tokens per continuous-batching forward pass: longer prompts are prefilled in chunks."""
_POLL_S = 0.02
"""How often a waiting client thread looks at ``cancel`` and its deadline."""
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "spiece.model",
)
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")


def _exception_line(error: BaseException) -> str:
    return one_line(f"{type(error).__name__}: {error}")


# ---------------------------------------------------------------------------------------------
# One request's state, shared between its client thread and the worker.


@dataclass
class _Slot:
    """A request in flight. ``state`` moves ``queued`` -> ``running`` -> ``done`` (worker) or to
    ``abandoned`` (its client gave up: cancel or timeout); every change holds ``lock``."""

    request: LlmRequest
    input_ids: list[int]
    sent_pc: float
    request_id: str = ""
    state: str = "queued"
    tokens: list[int] = field(default_factory=list)
    times_pc: list[float] = field(default_factory=list)
    end_pc: float | None = None
    error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> bool:
        """Queued -> running; False when the client already gave up."""
        with self.lock:
            if self.state != "queued":
                return False
            self.state = "running"
            return True

    def wants_more(self, generated: int) -> bool:
        """Whether this row still counts tokens once the batch has ``generated`` of them."""
        with self.lock:
            return self.state == "running" and generated < self.request.max_tokens

    def add_token(self, token: int, stamp: float, eos: frozenset[int]) -> None:
        """One decoding step's token for this row (static mode)."""
        with self.lock:
            if self.state != "running":
                return
            if token in eos:
                self._finish(stamp)
                return
            self.tokens.append(token)
            self.times_pc.append(stamp)
            if len(self.tokens) >= self.request.max_tokens:
                self._finish(stamp)

    def complete(self, tokens: list[int], times_pc: list[float], error: str, stamp: float) -> None:
        """Everything at once (continuous mode, or a static batch that ended or failed)."""
        with self.lock:
            if self.state not in ("queued", "running"):
                return
            self.tokens, self.times_pc, self.error = tokens, times_pc, error
            self._finish(times_pc[-1] if times_pc and not error else stamp)

    def finish_now(self, error: str = "") -> None:
        """End a running row with what it has (its batch ended, or failed with ``error``)."""
        with self.lock:
            if self.state not in ("queued", "running"):
                return
            self.error = error
            self._finish(time.perf_counter())

    def abandon(self) -> bool:
        """The client gives up; False when the request already finished."""
        with self.lock:
            if self.state in ("done", "abandoned"):
                return False
            self.state = "abandoned"
            self.end_pc = time.perf_counter()
            return True

    def _finish(self, stamp: float) -> None:
        self.state = "done"
        self.end_pc = stamp
        self.done.set()


_STOP = object()
"""The sentinel that ends the static worker."""


# ---------------------------------------------------------------------------------------------
# The hooks ``generate`` calls (transformers is imported only when a model is loaded).


@functools.cache
def _generate_hooks() -> tuple[type[Any], type[Any]]:
    """The streamer and stopping-criterion classes, built on first use."""
    import torch
    from transformers import StoppingCriteria
    from transformers.generation.streamers import BaseStreamer

    class StepStreamer(BaseStreamer):
        """Stamps each decoding step and hands its tokens to the rows still counting."""

        def __init__(self, slots: list[_Slot], eos: frozenset[int]) -> None:
            self.slots = slots
            self.eos = eos
            self.prompt_seen = False

        def put(self, value: torch.Tensor) -> None:
            if not self.prompt_seen:  # the first call is the prompt ids
                self.prompt_seen = True
                return
            stamp = time.perf_counter()
            tokens = [int(t) for t in value.reshape(len(self.slots), -1)[:, -1].tolist()]
            for slot, token in zip(self.slots, tokens, strict=True):
                slot.add_token(token, stamp, self.eos)

        def end(self) -> None:
            pass

    class RowsDone(StoppingCriteria):
        """Marks a row finished once it has its ``max_tokens`` or its client gave up, so the
        batch ends as soon as no row wants more (``max_new_tokens`` is the batch's largest),
        and every row once ``stopping`` is set (the target is closing)."""

        def __init__(self, slots: list[_Slot], width: int, stopping: threading.Event) -> None:
            self.slots = slots
            self.width = width
            self.stopping = stopping

        def __call__(
            self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any
        ) -> torch.Tensor:
            generated = input_ids.shape[1] - self.width
            closing = self.stopping.is_set()
            done = [closing or not slot.wants_more(generated) for slot in self.slots]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StepStreamer, RowsDone


# ---------------------------------------------------------------------------------------------
# Checks on the directory, before anything is loaded.


def _check_model_dir(model_dir: Path) -> None:
    if not model_dir.exists():
        raise BadInputError(f"{model_dir}: no such model directory")
    if not model_dir.is_dir():
        raise BadInputError(f"{model_dir}: not a directory; give a Hugging Face model directory")
    if not (model_dir / "config.json").is_file():
        raise BadInputError(
            f"{model_dir}: not a Hugging Face model directory (no config.json); "
            "save one with save_pretrained"
        )
    if not any(model_dir.glob("*.safetensors")):
        pickles = [name for name in _PICKLE_WEIGHTS if (model_dir / name).exists()]
        if pickles:
            raise BadInputError(
                f"{model_dir}: weights only in {pickles[0]} (a pickle, which can run code when "
                "loaded); in-process serving loads safetensors only: re-save the model with "
                "save_pretrained(safe_serialization=True)"
            )
        raise BadInputError(f"{model_dir}: no *.safetensors weights in the model directory")
    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        raise BadInputError(
            f"{model_dir}: no tokenizer (no tokenizer.json or tokenizer_config.json); "
            "save the tokenizer into the model directory too"
        )


# ---------------------------------------------------------------------------------------------


def _check_device(device: str, torch: Any) -> None:
    """One line of bad input for a CUDA device this machine does not have."""
    if device == "cpu":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if count == 0:
        raise BadInputError(f"--device {device}: no CUDA device here (torch sees none)")
    if index >= count:
        raise BadInputError(
            f"--device {device}: no such GPU (this machine has {count}: cuda:0..cuda:{count - 1})"
        )


class InProcessModel:
    """A local Hugging Face causal LM served in this process (see the module docstring).

    ``max_batch`` caps the requests generated together; ``batching`` is ``"static"`` or
    ``"continuous"``; ``dtype`` is ``"auto"`` (the checkpoint's), ``"float32"``, ``"bfloat16"``
    or ``"float16"`` (``fp32``, ``bf16``, ``fp16`` too; ``None`` is ``auto``); ``device`` is
    ``cpu`` or ``cuda[:N]`` (the model is moved there at load; an index that does not exist is
    one line of bad input); ``threads`` sets ``torch.set_num_threads`` once, at load.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        max_batch: int = 8,
        batching: Batching = "static",
        dtype: str | None = "auto",
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        dtype = _DTYPE_ALIASES.get(str(dtype or "auto").strip().lower(), str(dtype or "auto"))
        if not re.fullmatch(r"cpu|cuda(:\d+)?", device.strip()):
            raise BadInputError(f"--device {device!r}: give cpu, cuda or cuda:N")
        if max_batch < 1:
            raise BadInputError(f"max batch {max_batch}: give at least 1")
        if batching not in ("static", "continuous"):
            raise BadInputError(f"batching {batching!r}: give static or continuous")
        if dtype not in _DTYPES:
            raise BadInputError(f"dtype {dtype!r}: give one of {', '.join(_DTYPES)}")
        if threads is not None and threads < 1:
            raise BadInputError(f"threads {threads}: give at least 1")
        self.model_dir = Path(model_dir)
        self.max_batch = max_batch
        self.batching: Batching = batching
        self.dtype = dtype
        self.device = device.strip()
        self.threads = threads
        self._load_lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._loaded = False
        self._load_error: BadInputError | None = None
        self._closed = False
        self._model: Any = None
        self._tokenizer: Any = None
        self._generation_config: Any = None
        self._eos: frozenset[int] = frozenset()
        self._pad_id = 0
        self._context: int | None = None
        self._parameters: int | None = None
        self._model_type: str | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._batch_sizes: list[int] = []
        self._noted_batches = 0
        self._manager: Any = None
        self._manager_lock = threading.Lock()
        self._routes: dict[str, _Slot] = {}
        self._routes_lock = threading.Lock()
        self._ids = itertools.count()
        self._stopping = threading.Event()

    # -- Target ---------------------------------------------------------------------------

    def describe(self) -> TargetDescription:
        """Kind, directory, batching, ``max_batch``, dtype, model type and parameter count
        (``None`` until loaded; the model type is read from ``config.json`` before)."""
        model_type = self._model_type
        if model_type is None:
            try:
                config = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
                model_type = str(config.get("model_type")) if isinstance(config, dict) else None
            except (OSError, ValueError):
                model_type = None
        return TargetDescription(
            kind="in-process",
            model_dir=str(self.model_dir),
            batching=self.batching,
            max_batch=self.max_batch,
            dtype=self.dtype,
            device=self.device,
            model_type=model_type,
            parameters=self._parameters,
        )

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
        """Queue ``request``, wait for its tokens and measure them (see the module docstring).
        Never raises: a failure is the record's ``error``."""
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
            return failed(f"tokenizing the prompt failed: {_exception_line(exc)}")
        refusal = self._refusal(request, len(input_ids))
        if refusal:
            record = failed(refusal)
            record.prompt_tokens = len(input_ids)
            return record

        slot = _Slot(request=request, input_ids=input_ids, sent_pc=sent_pc)
        if self.batching == "static":
            self._queue.put(slot)
        else:
            refused = self._submit(slot)
            if refused:
                record = failed(refused)
                record.prompt_tokens = len(input_ids)
                return record
        return self._wait(slot, origin_s, scheduled_s, timeout_s, cancel)

    def close(self) -> None:
        """Stop the worker (and the continuous-batching manager) and fail what still waits."""
        with self._load_lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        self._queue.put(_STOP)
        if self._worker is not None:
            self._worker.join()
        with self._manager_lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            try:
                manager.stop(block=True, timeout=30, hard_stop=True)
                manager.destroy()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
        with self._routes_lock:
            routes, self._routes = list(self._routes.values()), {}
        for slot in routes:
            slot.finish_now("the in-process target was closed")
        self._model = None  # the weights go; the tokenizer stays for clients still decoding
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Slot):
                item.finish_now("the in-process target was closed")

    def trial_notes(self) -> list[str]:
        """How the static batches formed since the last call: a ``generate`` call takes what
        is queued when it starts, so at a low concurrency most calls hold one row (seen on an
        H100: concurrency 4 gave fewer tokens/s than 1)."""
        sizes = self._batch_sizes[self._noted_batches :]
        self._noted_batches = len(self._batch_sizes)
        if self.batching != "static" or not sizes:
            return []
        return [
            f"static batching: {len(sizes)} generate call(s) of {sum(sizes) / len(sizes):.1f} "
            f"rows on average (at most {self.max_batch}; {sizes.count(1)} of one row): a call "
            "takes what is queued when it starts, and what arrives later waits for the whole call"
        ]

    # -- introspection --------------------------------------------------------------------

    @property
    def batch_sizes(self) -> list[int]:
        """Rows of each static ``generate`` call so far, in order (empty in continuous mode)."""
        return list(self._batch_sizes)

    # -- loading --------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        with self._load_lock:
            if self._closed:
                raise BadInputError("the in-process target is closed")
            if self._load_error is not None:
                raise self._load_error
            if self._loaded:
                return
            try:
                self._load()
            except BadInputError as error:
                self._load_error = error
                raise
            self._loaded = True

    def _load(self) -> None:
        _check_model_dir(self.model_dir)
        try:
            import torch
            import transformers
        except ImportError:
            raise BadInputError(
                "in-process serving needs the transformers package: "
                "pip install 'accelscope[transformers]'"
            ) from None
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        _check_device(self.device, torch)
        dtype: Any = "auto" if self.dtype == "auto" else getattr(torch, self.dtype)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                self.model_dir, local_files_only=True, trust_remote_code=False
            )
        except Exception as error:  # noqa: BLE001 - any loader failure is bad input, one line
            raise BadInputError(
                f"{self.model_dir}: cannot load the tokenizer: {_exception_line(error)}"
            ) from None
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                self.model_dir,
                local_files_only=True,
                use_safetensors=True,
                trust_remote_code=False,
                dtype=dtype,
            )
        except Exception as error:  # noqa: BLE001 - any loader failure is bad input, one line
            raise BadInputError(
                f"{self.model_dir}: cannot load a causal language model: {_exception_line(error)}"
            ) from None
        model.train(False)
        if self.device != "cpu":
            mover: Any = model  # transformers types .to() for its own call forms only
            mover.to(self.device)
        self._model, self._tokenizer = model, tokenizer
        self._parameters = int(sum(p.numel() for p in model.parameters()))
        self._model_type = str(model.config.model_type)
        self._generation_config = copy.deepcopy(model.generation_config)
        eos = self._generation_config.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self._eos = frozenset(int(e) for e in eos_ids if e is not None and int(e) >= 0)
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = next(iter(sorted(self._eos)), None)
        if pad is None:
            pad = tokenizer.eos_token_id
        self._pad_id = int(pad) if pad is not None else 0
        context = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self._context = int(context) if isinstance(context, int) and context > 0 else None
        if self.batching == "continuous":
            self._start_continuous()
            self._worker = threading.Thread(
                target=self._route_loop, name="accelscope-inprocess-router", daemon=True
            )
        else:
            self._warm_up_static()
            self._worker = threading.Thread(
                target=self._static_loop, name="accelscope-inprocess-worker", daemon=True
            )
        self._worker.start()

    def _warm_up_static(self) -> None:
        """Generate two tokens for one row, then for ``max_batch`` rows of different lengths, so
        a model that cannot fails here and the first trial pays no first-call costs: the
        decoding step (a first token is only the prefill) and the padded batch's kernels too
        (on an H100, warmed with a one-token prefill only, some requests of the first static
        trial at concurrency 4 ran 58 ms a step against 6 ms)."""
        ids = self._encode("warm up the model") or [self._pad_id]
        for rows in sorted({1, self.max_batch}):
            probes = [
                _Slot(
                    request=LlmRequest(index=-1 - row, prompt="warm up", max_tokens=2),
                    input_ids=ids[: max(1, len(ids) - row)],
                    sent_pc=time.perf_counter(),
                )
                for row in range(rows)
            ]
            for probe in probes:
                probe.start()
            self._run_batch(probes)
            first = probes[0]
            if first.error or not first.tokens:
                why = first.error or "no token came back"
                raise BadInputError(f"{self.model_dir}: the model cannot generate: {why}")
        self._batch_sizes.clear()
        self._noted_batches = 0

    def _encode(self, prompt: str) -> list[int]:
        with self._tokenizer_lock:
            ids = self._tokenizer(prompt)["input_ids"]
        return [int(i) for i in ids]

    def _decode(self, tokens: list[int]) -> str:
        with self._tokenizer_lock:
            return str(self._tokenizer.decode(tokens, skip_special_tokens=True))

    def _refusal(self, request: LlmRequest, prompt_tokens: int) -> str:
        """Why this request cannot be generated at all ("" when it can)."""
        if request.max_tokens < 1:
            return f"max_tokens {request.max_tokens}: give at least 1"
        if prompt_tokens == 0:
            return "the prompt tokenizes to no tokens"
        total = prompt_tokens + request.max_tokens
        if self.batching == "continuous":
            limit = min(self._context or _CB_MAX_REQUEST_TOKENS, _CB_MAX_REQUEST_TOKENS)
            if total > limit:
                return (
                    f"prompt of {prompt_tokens} tokens + max_tokens {request.max_tokens} exceeds "
                    f"the {limit} tokens a request may hold in in-process continuous batching"
                )
        if self._context is not None and total > self._context:
            return (
                f"prompt of {prompt_tokens} tokens + max_tokens {request.max_tokens} exceeds "
                f"the model's context of {self._context} tokens (max_position_embeddings)"
            )
        return ""

    # -- waiting --------------------------------------------------------------------------

    def _wait(
        self,
        slot: _Slot,
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

    def _withdraw(self, slot: _Slot) -> None:
        """Tell the continuous-batching scheduler a request was given up (no-op for static:
        the worker skips or stops counting an abandoned slot itself)."""
        if self.batching != "continuous" or not slot.request_id:
            return
        with self._routes_lock:
            self._routes.pop(slot.request_id, None)
        with self._manager_lock:
            manager = self._manager
        if manager is not None:
            manager.cancel_request(slot.request_id)

    # -- static batching ------------------------------------------------------------------

    def _static_loop(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            if self._stopping.is_set():  # closing: fail what waits instead of generating it
                item.finish_now("the in-process target was closed")
                continue
            batch: list[_Slot] = [item] if item.start() else []
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                if item.start():
                    batch.append(item)
            if batch:
                self._run_batch(batch)

    def _run_batch(self, batch: list[_Slot]) -> None:
        """One ``generate`` call for ``batch``; never raises."""
        try:
            import torch

            streamer_cls, criterion_cls = _generate_hooks()
            from transformers import StoppingCriteriaList

            width = max(len(slot.input_ids) for slot in batch)
            ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, slot in enumerate(batch):
                n = len(slot.input_ids)
                ids[row, width - n :] = torch.tensor(slot.input_ids, dtype=torch.long)
                mask[row, width - n :] = 1
            config = copy.deepcopy(self._generation_config)
            config.do_sample = False
            config.num_beams = 1
            config.max_new_tokens = max(slot.request.max_tokens for slot in batch)
            config.pad_token_id = self._pad_id
            for name in ("temperature", "top_p", "top_k"):
                setattr(config, name, None)
            device = self._model.device
            self._batch_sizes.append(len(batch))
            with torch.inference_mode():
                self._model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=config,
                    streamer=streamer_cls(batch, self._eos),
                    stopping_criteria=StoppingCriteriaList(
                        [criterion_cls(batch, width, self._stopping)]
                    ),
                )
        except Exception as error:  # noqa: BLE001 - a batch's failure is its requests' error
            message = f"generation failed: {_exception_line(error)}"
            for slot in batch:
                slot.finish_now(message)
        finally:
            closed = "the in-process target was closed" if self._stopping.is_set() else ""
            for slot in batch:  # rows the batch ended before they had their tokens
                slot.finish_now(closed)

    # -- continuous batching --------------------------------------------------------------

    def _start_continuous(self) -> None:
        """Create and start the manager, then run one token through it so a setup that cannot
        work fails here, as one line."""
        why = self._try_start_continuous()
        if why:
            raise BadInputError(f"continuous batching is not available in-process: {why}")

    def _try_start_continuous(self) -> str:
        try:
            from transformers import ContinuousBatchingConfig
        except ImportError:
            return "this transformers has no ContinuousBatchingConfig (transformers >= 5 needed)"
        limit = min(self._context or _CB_MAX_REQUEST_TOKENS, _CB_MAX_REQUEST_TOKENS)
        page_size = 256
        blocks_per_request = math.ceil(limit / page_size) + 1
        # transformers 5.17 calls the page ``block_size``; later ones ``page_size`` (seen on the
        # GPU machine's transformers 5.17: a TypeError for page_size).
        fields = inspect.signature(ContinuousBatchingConfig).parameters
        page: dict[str, Any] = {"page_size" if "page_size" in fields else "block_size": page_size}
        generation = copy.deepcopy(self._generation_config)
        generation.do_sample = False
        generation.eos_token_id = sorted(self._eos) if self._eos else -1
        try:
            cb_config = ContinuousBatchingConfig(
                **page,
                num_blocks=self.max_batch * blocks_per_request,
                max_batch_tokens=max(_CB_MAX_BATCH_TOKENS, self.max_batch),
                max_requests_per_batch=self.max_batch,
            )
            manager = self._model.init_continuous_batching(
                generation_config=generation, continuous_batching_config=cb_config
            )
            manager.start()
        except Exception as error:  # noqa: BLE001 - the reason continuous batching is refused
            return _exception_line(error)
        probe = self._encode("warm up")[:8] or [self._pad_id]
        try:
            request_id = manager.add_request(
                probe, request_id="accelscope-probe", max_new_tokens=1, record_timestamps=True
            )
            output = manager.get_result(request_id=request_id, timeout=120) if request_id else None
        except Exception as error:  # noqa: BLE001 - the reason continuous batching is refused
            output, request_id = None, None
            why = _exception_line(error)
        else:
            why = ""
        if output is None or output.error or not output.generated_tokens:
            fatal = manager.background_thread_status.fatal_error
            why = why or (one_line(str(output.error)) if output is not None else "")
            why = why or (_exception_line(fatal) if fatal is not None else "no token came back")
            try:
                manager.stop(block=True, timeout=30, hard_stop=True)
                manager.destroy()
            except Exception:  # noqa: BLE001 - already failing
                pass
            return why
        with self._manager_lock:
            self._manager = manager
        return ""

    def _submit(self, slot: _Slot) -> str:
        """Hand ``slot`` to the manager; an error line when it would not take it."""
        slot.request_id = f"accelscope-{next(self._ids)}"
        slot.state = "running"
        with self._routes_lock:
            self._routes[slot.request_id] = slot
        with self._manager_lock:
            manager = self._manager
        accepted: str | None = None
        if manager is not None:
            try:
                accepted = manager.add_request(
                    slot.input_ids,
                    request_id=slot.request_id,
                    max_new_tokens=slot.request.max_tokens,
                    record_timestamps=True,
                    eos_token_id=sorted(self._eos) if self._eos else -1,
                )
            except Exception as error:  # noqa: BLE001 - this request's error, never a raise
                with self._routes_lock:
                    self._routes.pop(slot.request_id, None)
                return f"continuous batching refused the request: {_exception_line(error)}"
        if accepted is None:
            with self._routes_lock:
                self._routes.pop(slot.request_id, None)
            return "the continuous-batching manager is not running"
        return ""

    def _route_loop(self) -> None:
        """Hand each finished output to its client; restart the manager if it died."""
        while not self._stopping.is_set():
            with self._manager_lock:
                manager = self._manager
            if manager is None:  # a restart failed: try again
                if self._try_start_continuous():
                    self._stopping.wait(1.0)
                continue
            try:
                output = manager.get_result(timeout=0.05)
            except Exception:  # noqa: BLE001 - the router must not die
                output = None
            if output is None:
                if not manager.is_running() and not self._stopping.is_set():
                    self._restart(manager)
                continue
            if not output.is_finished():
                continue
            with self._routes_lock:
                slot = self._routes.pop(output.request_id, None)
            if slot is None:
                continue
            tokens = [int(t) for t in output.generated_tokens]
            times = list(output.timestamps or [])
            if tokens and tokens[-1] in self._eos:  # the end-of-sequence token carries no text
                tokens.pop()
                times = times[: len(tokens)]
            error = f"generation failed: {one_line(output.error)}" if output.error else ""
            slot.complete(tokens, times[: len(tokens)], error, time.perf_counter())

    def _restart(self, dead: Any) -> None:
        """The manager's loop stopped (a fatal error): fail what it held, start a new one."""
        fatal = dead.background_thread_status.fatal_error
        why = _exception_line(fatal) if fatal is not None else "the generation loop stopped"
        with self._routes_lock:
            routes, self._routes = list(self._routes.values()), {}
        for slot in routes:
            slot.finish_now(f"generation failed: {why}")
        with self._manager_lock:
            self._manager = None
        with contextlib.suppress(Exception):  # replacing it anyway
            dead.destroy()
