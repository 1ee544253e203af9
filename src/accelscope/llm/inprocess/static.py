"""Static batching in process: one worker takes up to ``max_batch`` waiting requests
(whatever queued while the previous batch ran), left-pads them into one batch and runs one
greedy ``model.generate`` with ``max_new_tokens`` the largest of the batch.

A streamer stamps ``time.perf_counter()`` at every decoding step; each row still wanting
tokens gets that stamp as a one-token chunk. A row stops counting at its own ``max_tokens`` or
at the model's end-of-sequence id (which is not counted: it carries no text), and its client is
released then, while the batch runs on for the others. A new request waits for the whole batch
to finish: the head-of-line blocking static batching is measured for. A cancelled or timed-out
request that waits is never generated; a running one stops counting, and its batch stops early
only when every row of it is done or abandoned. An exception raised by ``generate`` becomes the
error of every request of that batch (one line) and the worker goes on.

With ``cache="static"`` each call gets a ``StaticCache`` of :data:`STATIC_CACHE_TOKENS` positions
(or the model's context, if shorter), always the same length and kept, reset in place, while a
call's rows stay the same, so the decoding step's shapes do not change; a request longer than that
is refused by itself, and a queued request that would make the batch too long waits for the next
call. ``compile`` hands ``generate`` a ``CompileConfig``: ``transformers`` then runs the decoding
step (not the prefill, whose width changes with the prompts) through ``torch.compile``; each call
is padded to ``max_batch`` rows with copies of its first row, never counted, so the batch dimension
is one shape too. The warm-up runs those shapes first and its time is :attr:`compile_s`, outside
every trial. Without ``compile`` the static cache runs eagerly (``disable_compile``: on a GPU
``transformers`` would otherwise compile a static cache on its own)."""

from __future__ import annotations

import copy
import functools
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from accelscope.errors import BadInputError, exception_line
from accelscope.llm.inprocess.base import CLOSED, Batching, InProcessModel
from accelscope.llm.inprocess.loading import LoadedModel
from accelscope.llm.inprocess.slot import Slot
from accelscope.llm.records import LlmRequest

__all__ = ["STATIC_CACHE_TOKENS", "StaticBatchingModel", "StaticProgress"]

STATIC_CACHE_TOKENS = 4096
"""Positions of the static cache (prompt plus output of the longest row of a call), as long as
continuous batching's requests: one length for every call keeps one compiled shape."""
_COMPILE_WARM_UP_TOKENS = 4
"""Tokens per warm-up request with ``compile``: the first decoding steps compile, and the next
one, whose attention mask is a token longer, makes ``torch._dynamo`` mark that length dynamic
(one recompile), so no later step compiles inside a trial."""


@dataclass(frozen=True, kw_only=True)
class StaticProgress:
    """What the static worker holds at one moment."""

    queued: int
    """Requests waiting for the next ``generate`` call."""
    batch_rows: int
    """Rows of the ``generate`` call running now; 0 between calls."""
    batch_steps: int
    """Decoding steps the running call has made so far; 0 between calls."""


@dataclass(eq=False)
class _Batch:
    """One ``generate`` call's rows and how many decoding steps it has made."""

    slots: list[Slot]
    rows: int
    """Rows of the call: the slots, then the padding rows of a compiled call."""
    steps: int = 0


_Item = Slot | None
"""What the worker's queue carries: a request, or ``None``, which wakes it to stop."""


@functools.cache
def _generate_hooks() -> tuple[type[Any], type[Any]]:
    """The streamer and stopping-criterion classes, built on first use (transformers is
    imported only when a model is loaded)."""
    import torch
    from transformers import StoppingCriteria
    from transformers.generation.streamers import BaseStreamer

    class StepStreamer(BaseStreamer):
        """Stamps each decoding step and hands its tokens to the rows still counting."""

        def __init__(self, batch: _Batch, eos: frozenset[int]) -> None:
            self.batch = batch
            self.eos = eos
            self.prompt_seen = False

        def put(self, value: torch.Tensor) -> None:
            if not self.prompt_seen:  # the first call is the prompt ids
                self.prompt_seen = True
                return
            stamp = time.perf_counter()
            slots = self.batch.slots
            rows = value.reshape(self.batch.rows, -1)[: len(slots), -1]
            tokens = [int(t) for t in rows.tolist()]
            for slot, token in zip(slots, tokens, strict=True):
                slot.add_token(token, stamp, self.eos)
            self.batch.steps += 1

        def end(self) -> None:
            pass

    class RowsDone(StoppingCriteria):
        """Marks a row finished once it has its ``max_tokens`` or its client gave up, so the
        batch ends as soon as no row wants more (``max_new_tokens`` is the batch's largest),
        and every row once ``stopping`` is set (the target is closing)."""

        def __init__(self, slots: list[Slot], width: int, stopping: threading.Event) -> None:
            self.slots = slots
            self.width = width
            self.stopping = stopping

        def __call__(
            self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any
        ) -> torch.Tensor:
            generated = input_ids.shape[1] - self.width
            closing = self.stopping.is_set()
            done = [closing or not slot.wants_more(generated) for slot in self.slots]
            done += [True] * (input_ids.shape[0] - len(done))  # padding rows want nothing
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StepStreamer, RowsDone


class StaticBatchingModel(InProcessModel):
    """Static batching (see the module docstring)."""

    batching: ClassVar[Batching] = "static"

    def _setup(self) -> None:
        self._queue: queue.Queue[_Item] = queue.Queue()
        self._carried: Slot | None = None
        """A queued request that did not fit the static cache beside its batch: the next
        call's first row."""
        self._static_cache: Any = None
        """The static cache of the last call (``transformers``' ``StaticCache``)."""
        self._static_cache_rows = 0
        self._running: _Batch | None = None
        self._batch_sizes: list[int] = []
        self._noted_batches = 0

    def progress(self) -> StaticProgress:
        """What the worker holds now (a test waits on it for a queued or running request)."""
        running = self._running
        return StaticProgress(
            queued=self._queue.qsize(),
            batch_rows=len(running.slots) if running else 0,
            batch_steps=running.steps if running else 0,
        )

    @property
    def batch_sizes(self) -> list[int]:
        """Rows of each ``generate`` call so far, in order."""
        return list(self._batch_sizes)

    def trial_notes(self) -> list[str]:
        """How the batches formed since the last call: a ``generate`` call takes what is
        queued when it starts, so at a low concurrency most calls hold one row (seen on an
        H100: concurrency 4 gave fewer tokens/s than 1)."""
        sizes = self._batch_sizes[self._noted_batches :]
        self._noted_batches = len(self._batch_sizes)
        if not sizes:
            return []
        return [
            f"static batching: {len(sizes)} generate call(s) of {sum(sizes) / len(sizes):.1f} "
            f"rows on average (at most {self.max_batch}; {sizes.count(1)} of one row): a call "
            "takes what is queued when it starts, and what arrives later waits for the whole call"
        ]

    # -- the strategy ---------------------------------------------------------------------------

    def _start(self, loaded: LoadedModel) -> threading.Thread:
        self._warm_up(loaded)
        return threading.Thread(target=self._loop, name="accelscope-inprocess-worker", daemon=True)

    def _hand_over(self, slot: Slot) -> str:
        self._queue.put(slot)
        return ""

    def _capacity_refusal(self, prompt_tokens: int, max_tokens: int) -> str:
        limit = self._cache_tokens()
        if limit is not None and prompt_tokens + max_tokens > limit:
            return (
                f"prompt of {prompt_tokens} tokens + max_tokens {max_tokens} exceeds "
                f"the static cache of {limit} tokens"
            )
        return ""

    def _cache_tokens(self) -> int | None:
        """Positions of the static cache; ``None`` with the dynamic one."""
        if self.cache != "static":
            return None
        context = self._require_loaded().context_tokens
        return min(STATIC_CACHE_TOKENS, context) if context else STATIC_CACHE_TOKENS

    def _fits(self, slots: list[Slot]) -> bool:
        """Whether one call can hold ``slots``: left-padded to the longest prompt, each row
        runs for the largest ``max_tokens``, and a static cache has a fixed length."""
        limit = self._cache_tokens()
        width = max(len(slot.input_ids) for slot in slots)
        return limit is None or width + max(s.request.max_tokens for s in slots) <= limit

    def _withdraw(self, slot: Slot) -> None:
        pass  # the worker skips an abandoned slot that waits, and stops counting a running one

    def _stop_worker(self) -> None:
        self._queue.put(None)

    def _release(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.finish_now(CLOSED)
        self._static_cache = None  # its memory goes with the weights

    # -- the worker -----------------------------------------------------------------------------

    def _warm_up(self, loaded: LoadedModel) -> None:
        """Generate two tokens for one row, then for ``max_batch`` rows of different lengths, so
        a model that cannot fails here and the first trial pays no first-call costs: the
        decoding step (a first token is only the prefill) and the padded batch's kernels too
        (on an H100, warmed with a one-token prefill only, some requests of the first static
        trial at concurrency 4 ran 58 ms a step against 6 ms). With ``compile`` a few tokens
        more (:data:`_COMPILE_WARM_UP_TOKENS`), and the time taken is :attr:`compile_s`."""
        ids = self._encode("warm up the model") or [loaded.pad_id]
        tokens = _COMPILE_WARM_UP_TOKENS if self.compile else 2
        started = time.perf_counter()
        for rows in sorted({1, self.max_batch}):
            probes = [
                Slot(
                    request=LlmRequest(index=-1 - row, prompt="warm up", max_tokens=tokens),
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
        if self.compile:
            self._compile_s = time.perf_counter() - started
        self._batch_sizes.clear()
        self._noted_batches = 0

    def _loop(self) -> None:
        stop = False
        while not stop:
            item, self._carried = self._carried or self._queue.get(), None
            if item is None:
                break
            if self._stopping.is_set():  # closing: fail what waits instead of generating it
                item.finish_now(CLOSED)
                continue
            batch: list[Slot] = [item] if item.start() else []
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if batch and not self._fits([*batch, item]):
                    self._carried = item  # started by the next call, not abandoned here
                    break
                if item.start():
                    batch.append(item)
            if batch:
                self._run_batch(batch)
        if self._carried is not None:
            self._carried.finish_now(CLOSED)

    def _run_batch(self, slots: list[Slot]) -> None:
        """One ``generate`` call for ``slots``; never raises."""
        rows = self.max_batch if self.compile else len(slots)
        batch = _Batch(slots, rows)
        try:
            import torch
            from transformers import StoppingCriteriaList

            streamer_cls, criterion_cls = _generate_hooks()
            loaded = self._require_loaded()
            width = max(len(slot.input_ids) for slot in slots)
            ids = torch.full((rows, width), loaded.pad_id, dtype=torch.long)
            mask = torch.zeros((rows, width), dtype=torch.long)
            for row, slot in enumerate(slots):
                n = len(slot.input_ids)
                ids[row, width - n :] = torch.tensor(slot.input_ids, dtype=torch.long)
                mask[row, width - n :] = 1
            ids[len(slots) :], mask[len(slots) :] = ids[0], mask[0]  # padding rows: row 0
            config = copy.deepcopy(loaded.generation_config)
            config.do_sample = False
            config.num_beams = 1
            config.max_new_tokens = max(slot.request.max_tokens for slot in slots)
            config.pad_token_id = loaded.pad_id
            for name in ("temperature", "top_p", "top_k"):
                setattr(config, name, None)
            device = loaded.model.device
            self._batch_sizes.append(len(slots))
            self._running = batch
            with torch.inference_mode():  # the cache's tensors are inference tensors
                extra = self._cache_arguments(loaded, config, rows)
                loaded.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=config,
                    streamer=streamer_cls(batch, loaded.eos_ids),
                    stopping_criteria=StoppingCriteriaList(
                        [criterion_cls(slots, width, self._stopping)]
                    ),
                    **extra,
                )
        except Exception as error:  # noqa: BLE001 - a batch's failure is its requests' error
            message = f"generation failed: {exception_line(error, named=True)}"
            for slot in slots:
                slot.finish_now(message)
        finally:
            self._running = None
            closed = CLOSED if self._stopping.is_set() else ""
            for slot in slots:  # rows the batch ended before they had their tokens
                slot.finish_now(closed)

    def _cache_arguments(self, loaded: LoadedModel, config: Any, rows: int) -> dict[str, Any]:
        """``generate``'s cache arguments for a call of ``rows`` (none with the dynamic cache),
        and ``config``'s compile settings. The static cache is kept from call to call while the
        rows stay the same (always, with ``compile``): a fresh one each call would give the
        compiled step new tensor addresses, and ``reduce-overhead`` would record its CUDA graph
        again inside the measured call."""
        cache_tokens = self._cache_tokens()
        if cache_tokens is None:
            return {}
        from transformers import CompileConfig, StaticCache

        config.disable_compile = not self.compile
        if self.compile:
            compile_config = CompileConfig(mode=self.compile_mode or "default")
            # transformers compiles only on accelerators unless told; here --compile asked
            # (the attribute is typed None: a flag its authors left unannotated)
            compile_config._compile_all_devices = self.device == "cpu"  # type: ignore[assignment]
            config.compile_config = compile_config
        cache = self._static_cache
        if cache is None or self._static_cache_rows != rows:
            cache = StaticCache(
                config=loaded.model.config.get_text_config(decoder=True),
                max_cache_len=cache_tokens,
            )
            self._static_cache, self._static_cache_rows = cache, rows
        else:
            cache.reset()  # zeroed in place: the same tensors, so CUDA graphs replay on them
        return {"past_key_values": cache}
