"""Continuous batching in process: ``transformers``' own (``model.init_continuous_batching``:
a paged KV cache and a scheduler that admits and retires requests at every step) with at most
``max_batch`` requests per step.

Each request asks for the per-token timestamps the generation loop records
(``record_timestamps``), stamped on the same ``perf_counter`` clock when each token is sampled;
one router thread hands finished outputs to their clients, and restarts the manager if its loop
died (failing what it held). The paged cache is sized here (``max_batch`` requests of up to
``min(max_position_embeddings, 4096)`` tokens each), not from the machine's free memory as
``transformers`` would by default (60 % of RAM on a CPU). A cancelled or timed-out request is
cancelled in the scheduler.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from accelscope.errors import BadInputError, exception_line, one_line
from accelscope.llm.inprocess.base import CLOSED, Batching, InProcessModel
from accelscope.llm.inprocess.loading import LoadedModel
from accelscope.llm.inprocess.slot import Slot

__all__ = ["ContinuousBatchingModel", "ContinuousProgress"]

_MAX_REQUEST_TOKENS = 4096
"""Longest request (prompt plus ``max_tokens``) the paged cache is sized for."""
_MAX_BATCH_TOKENS = 1024
"""Tokens per forward pass: longer prompts are prefilled in chunks."""
_PAGE_TOKENS = 256

Manager = Any
"""``transformers``' ``ContinuousBatchingManager`` (imported only when a model is loaded)."""


@dataclass(frozen=True, kw_only=True)
class ContinuousProgress:
    """What the scheduler holds at one moment."""

    scheduled: int
    """Requests handed to the scheduler and not yet finished (waiting or generating there)."""


class ContinuousBatchingModel(InProcessModel):
    """Continuous batching (see the module docstring)."""

    batching: ClassVar[Batching] = "continuous"

    def _setup(self) -> None:
        if self.cache != "dynamic" or self.compile:
            # said, not ignored: the paged cache is the scheduler's own, and its step is not
            # the generate loop that transformers compiles
            raise BadInputError(
                "--cache static and --compile apply to --batching static only: continuous "
                "batching keeps its own paged KV cache"
            )
        self._manager: Manager | None = None
        self._manager_lock = threading.Lock()
        self._routes: dict[str, Slot] = {}
        self._routes_lock = threading.Lock()
        self._ids = itertools.count()

    def progress(self) -> ContinuousProgress:
        """What the scheduler holds now (a test waits on it for routed requests)."""
        with self._routes_lock:
            return ContinuousProgress(scheduled=len(self._routes))

    # -- the strategy ---------------------------------------------------------------------------

    def _start(self, loaded: LoadedModel) -> threading.Thread:
        """Create and start the manager, then run one token through it so a setup that cannot
        work fails here, as one line."""
        why = self._try_start(loaded)
        if why:
            raise BadInputError(f"continuous batching is not available in-process: {why}")
        return threading.Thread(
            target=self._route_loop, name="accelscope-inprocess-router", daemon=True
        )

    def _capacity_refusal(self, prompt_tokens: int, max_tokens: int) -> str:
        limit = self._request_limit(self._require_loaded())
        if prompt_tokens + max_tokens > limit:
            return (
                f"prompt of {prompt_tokens} tokens + max_tokens {max_tokens} exceeds "
                f"the {limit} tokens a request may hold in in-process continuous batching"
            )
        return ""

    def _hand_over(self, slot: Slot) -> str:
        loaded = self._require_loaded()
        slot.request_id = f"accelscope-{next(self._ids)}"
        slot.start()
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
                    eos_token_id=sorted(loaded.eos_ids) if loaded.eos_ids else -1,
                )
            except Exception as error:  # noqa: BLE001 - this request's error, never a raise
                self._unroute(slot)
                why = exception_line(error, named=True)
                return f"continuous batching refused the request: {why}"
        if accepted is None:
            self._unroute(slot)
            return "the continuous-batching manager is not running"
        return ""

    def _withdraw(self, slot: Slot) -> None:
        if not slot.request_id:
            return
        self._unroute(slot)
        with self._manager_lock:
            manager = self._manager
        if manager is not None:
            manager.cancel_request(slot.request_id)

    def _stop_worker(self) -> None:
        pass  # the router polls ``_stopping`` between results

    def _release(self) -> None:
        with self._manager_lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            try:
                manager.stop(block=True, timeout=30, hard_stop=True)
                manager.destroy()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
        self._fail_routed(CLOSED)

    # -- the manager ----------------------------------------------------------------------------

    @staticmethod
    def _request_limit(loaded: LoadedModel) -> int:
        context = loaded.context_tokens or _MAX_REQUEST_TOKENS
        return min(context, _MAX_REQUEST_TOKENS)

    def _try_start(self, loaded: LoadedModel) -> str:
        """Start a manager and check it generates one token; why not ("" when it does)."""
        try:
            from transformers import ContinuousBatchingConfig
        except ImportError:
            return "this transformers has no ContinuousBatchingConfig (transformers >= 5 needed)"
        blocks_per_request = math.ceil(self._request_limit(loaded) / _PAGE_TOKENS) + 1
        # transformers 5.17 calls the page ``block_size``; later ones ``page_size`` (seen on the
        # GPU machine's transformers 5.17: a TypeError for page_size).
        fields = inspect.signature(ContinuousBatchingConfig).parameters
        page: dict[str, Any] = {
            "page_size" if "page_size" in fields else "block_size": _PAGE_TOKENS
        }
        generation = copy.deepcopy(loaded.generation_config)
        generation.do_sample = False
        generation.eos_token_id = sorted(loaded.eos_ids) if loaded.eos_ids else -1
        try:
            cb_config = ContinuousBatchingConfig(
                **page,
                num_blocks=self.max_batch * blocks_per_request,
                max_batch_tokens=max(_MAX_BATCH_TOKENS, self.max_batch),
                max_requests_per_batch=self.max_batch,
            )
            manager = loaded.model.init_continuous_batching(
                generation_config=generation, continuous_batching_config=cb_config
            )
            manager.start()
        except Exception as error:  # noqa: BLE001 - the reason continuous batching is refused
            return exception_line(error, named=True)
        probe = self._encode("warm up")[:8] or [loaded.pad_id]
        why = ""
        try:
            request_id = manager.add_request(
                probe, request_id="accelscope-probe", max_new_tokens=1, record_timestamps=True
            )
            output = manager.get_result(request_id=request_id, timeout=120) if request_id else None
        except Exception as error:  # noqa: BLE001 - the reason continuous batching is refused
            output = None
            why = exception_line(error, named=True)
        if output is None or output.error or not output.generated_tokens:
            fatal = manager.background_thread_status.fatal_error
            why = why or (one_line(str(output.error)) if output is not None else "")
            why = why or (exception_line(fatal, named=True) if fatal else "no token came back")
            try:
                manager.stop(block=True, timeout=30, hard_stop=True)
                manager.destroy()
            except Exception:  # noqa: BLE001 - already failing
                pass
            return why
        with self._manager_lock:
            self._manager = manager
        return ""

    def _route_loop(self) -> None:
        """Hand each finished output to its client; restart the manager if it died."""
        while not self._stopping.is_set():
            with self._manager_lock:
                manager = self._manager
            if manager is None:  # a restart failed: try again
                if self._try_start(self._require_loaded()):
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
            if output.is_finished():
                self._deliver(output)

    def _deliver(self, output: Any) -> None:
        """A finished ``GenerationOutput`` to its client (none when it gave up)."""
        with self._routes_lock:
            slot = self._routes.pop(output.request_id, None)
        if slot is None:
            return
        eos = self._require_loaded().eos_ids
        tokens = [int(t) for t in output.generated_tokens]
        times = list(output.timestamps or [])
        if tokens and tokens[-1] in eos:  # the end-of-sequence token carries no text
            tokens.pop()
        error = f"generation failed: {one_line(output.error)}" if output.error else ""
        slot.complete(tokens, times[: len(tokens)], error, time.perf_counter())

    def _restart(self, dead: Manager) -> None:
        """The manager's loop stopped (a fatal error): fail what it held, start a new one."""
        fatal = dead.background_thread_status.fatal_error
        why = exception_line(fatal, named=True) if fatal else "the generation loop stopped"
        self._fail_routed(f"generation failed: {why}")
        with self._manager_lock:
            self._manager = None
        with contextlib.suppress(Exception):  # replacing it anyway
            dead.destroy()

    def _unroute(self, slot: Slot) -> None:
        with self._routes_lock:
            self._routes.pop(slot.request_id, None)

    def _fail_routed(self, error: str) -> None:
        with self._routes_lock:
            routes, self._routes = list(self._routes.values()), {}
        for slot in routes:
            slot.finish_now(error)
