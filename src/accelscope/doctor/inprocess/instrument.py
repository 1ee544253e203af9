"""Instrumentation of an unmodified PyTorch program by patching torch, not the program.

Installed in the process that runs the user's loop (the bootstrap child, or the caller in API
mode), it feeds the :class:`~accelscope.doctor.inprocess.recorder.Recorder`:

* global module forward pre/post hooks find the top-level forward (nesting depth 0) and the
  *main model* (the first top-level module with parameters), whose forwards drive inference
  step boundaries; after the first step the global hooks are replaced by hooks on the
  top-level modules only, so nested modules keep PyTorch's hook-free fast path;
* global optimizer step hooks (training step boundaries) and ``Optimizer.zero_grad``;
* ``Tensor.backward`` / ``torch.autograd.backward``;
* ``DataLoader.__iter__`` and the iterator's ``__next__`` (time blocked waiting for input), and
  ``DataLoader.__init__`` (the loader's settings, and what-if edits);
* leaf calls (``full=True``): host->device copies (``.to``/``.cuda`` of a CPU tensor to a
  device, with whether the source was pinned; CPU->CPU ``.to`` is a no-op and not counted) and
  synchronisations (``.item``, ``.tolist``, ``.numpy``, ``.cpu`` or a blocking ``.to('cpu')``
  of a device tensor, ``bool()/float()/int()`` of a tensor, ``torch.cuda.synchronize``).
  On CUDA their host time includes waiting for queued device work; what the GPU did meanwhile
  comes from its own timeline (:mod:`.device_trace`), never from these host spans.

Only the thread that installed the instrumentation is recorded (DataLoader pin-memory threads
and user threads pass straight through), and forked children (DataLoader workers) record
nothing.

Time: the leaf wrappers stamp their calls with the recorder's own clock
(:attr:`Recorder.clock_ns <accelscope.doctor.inprocess.recorder.Recorder>`, integer ns) and hand
the stamps straight back to :meth:`Recorder.leaf`; they never interpret them. The recorder keeps
integer ticks for exact exclusive-time arithmetic and reports seconds (see its module doc).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

from accelscope.doctor.inprocess.inject import Injector
from accelscope.doctor.inprocess.recorder import (
    COPY,
    COPY_BYTES,
    INPUT,
    N_COPY,
    N_PAGEABLE,
    N_SYNC,
    SYNC,
    Recorder,
)

__all__ = ["Instrumentation"]

_SYNC_METHODS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__")

_FORKED = {"child": False}


def _after_fork() -> None:
    _FORKED["child"] = True


os.register_at_fork(after_in_child=_after_fork)


def _rss_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def _tensor_bytes(values: Any) -> int:
    import torch

    if isinstance(values, torch.Tensor):
        return int(values.nbytes)
    if isinstance(values, dict):
        return sum(_tensor_bytes(v) for v in values.values())
    if isinstance(values, list | tuple):
        return sum(_tensor_bytes(v) for v in values)
    return 0


def _train_state(optimizer: Any, rss_before_bytes: int | None) -> dict[str, Any]:
    """Bytes of the optimizer's parameters, their gradients and its states (the
    :class:`~accelscope.doctor.profile.TrainState` record)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {
        "optimizer": type(optimizer).__name__,
        "parameter_bytes": sum(int(p.nbytes) for p in params),
        "gradient_bytes": sum(int(p.grad.nbytes) for p in params if p.grad is not None),
        "optimizer_state_bytes": _tensor_bytes(list(optimizer.state.values())),
        "rss_before_first_step_bytes": rss_before_bytes,
    }


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def _batch_items(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Leading dimension of the first tensor argument (the batch size), 1 if none."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return int(value.shape[0]) if value.dim() else 1
    return 1


def _may_move(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` may change the device: not for ``.to(dtype)``
    alone (the common CPU-side conversion), which is then not bracketed with events."""
    import torch

    if "device" in kwargs:
        return True
    return bool(args) and not isinstance(args[0], torch.dtype)


class Instrumentation:
    """Patches torch so that ``recorder`` sees the loop's phases (see the module doc).

    Args:
        recorder: Receives the events.
        full: Also wrap the leaf calls (copies, syncs); what-if runs only need step times.
        injector: The what-if change to apply, if any.
        main_model: The model that drives steps (API mode); found automatically otherwise.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        full: bool = True,
        injector: Injector | None = None,
        main_model: Any = None,
    ) -> None:
        self.rec = recorder
        self.full = full
        self.injector = injector
        self.main: Any = main_model
        self.tid = threading.get_ident()
        self.depth = 0
        self.top_modules: list[Any] = [main_model] if main_model is not None else []
        self.narrowed = False
        self.compiled = False
        self.loaders: list[dict[str, Any]] = []
        self.main_facts: dict[str, Any] = {}
        self.autocast_seen: str | None = None
        self.losses: dict[int, Any] = {}
        """Step index -> the detached scalar loss of its last ``backward()`` (what-if runs)."""
        self.train_state: dict[str, Any] | None = None
        self._rss_before_bytes: int | None = None
        self._main_device = "cpu"
        self._undo: list[Callable[[], None]] = []
        self._global_handles: list[Any] = []
        self._module_handles: list[Any] = []

    # -- helpers -------------------------------------------------------------------------------

    def _ours(self) -> bool:
        return threading.get_ident() == self.tid and not _FORKED["child"]

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        own = getattr(owner, "__dict__", {})
        had_own, original = name in own, own.get(name)
        setattr(owner, name, replacement)

        def undo() -> None:
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # the inherited attribute shows through again

        self._undo.append(undo)

    # -- install / uninstall -----------------------------------------------------------------

    def install(self) -> None:
        """Apply every patch and hook."""
        import torch
        import torch.optim.optimizer as optim
        from torch.nn.modules import module as nn_module
        from torch.utils.data import dataloader

        if self.main is not None:
            self._identify(self.main)
            self._narrow()
        else:
            self._global_handles = [
                nn_module.register_module_forward_pre_hook(self._pre_global),
                nn_module.register_module_forward_hook(
                    self._post, with_kwargs=True, always_call=True
                ),
            ]
        handles = [
            optim.register_optimizer_step_pre_hook(self._opt_pre),
            optim.register_optimizer_step_post_hook(self._opt_post),
        ]

        def remove_optimizer_hooks() -> None:
            for handle in handles:
                handle.remove()

        self._undo.append(remove_optimizer_hooks)
        self._wrap_phase(
            torch.optim.Optimizer,
            "zero_grad",
            self.rec.optimizer_begin,
            lambda: self.rec.optimizer_end(False),
        )
        self._wrap_phase(torch.Tensor, "backward", self.rec.backward_begin, self.rec.backward_end)
        self._wrap_loss(torch.Tensor)
        self._wrap_phase(
            torch.autograd, "backward", self.rec.backward_begin, self.rec.backward_end, method=False
        )
        self._wrap_phase(
            dataloader._BaseDataLoaderIter, "__next__", self.rec.input_begin, self.rec.input_end
        )
        self._wrap_phase(
            dataloader.DataLoader, "__iter__", lambda: self.rec.begin(INPUT), self.rec.end
        )
        self._wrap_loader_init(dataloader.DataLoader)
        if self.full:
            for name in _SYNC_METHODS:
                self._wrap_sync(torch.Tensor, name)
            self._wrap_sync(torch.Tensor, "cpu", device_only=True)
            self._wrap_sync(torch.cuda, "synchronize", method=False)
            for name in ("to", "cuda"):
                self._wrap_copy(torch.Tensor, name)
            self._wrap_pin(torch.Tensor)

    def uninstall(self) -> None:
        """Undo every patch and remove every hook (API mode leaves torch as it found it)."""
        for handle in self._global_handles + self._module_handles:
            handle.remove()
        self._global_handles, self._module_handles = [], []
        while self._undo:
            self._undo.pop()()

    # -- module hooks --------------------------------------------------------------------------

    def _identify(self, module: Any) -> None:
        import torch

        self.main = module
        params = list(module.parameters())
        dtypes: dict[str, int] = {}
        for p in params:
            key = str(p.dtype).removeprefix("torch.")
            dtypes[key] = dtypes.get(key, 0) + p.numel()
        self._main_device = str(params[0].device.type) if params else "cpu"
        compiled = getattr(module, "_compiled_call_impl", None) is not None or hasattr(
            module, "_orig_mod"
        )
        self.main_facts = {
            "class": type(module).__name__,
            "parameters": sum(p.numel() for p in params),
            "parameter_dtypes": dtypes,
            "device": self._main_device,
            "compiled": bool(compiled),
            "autocast_available": bool(torch.amp.is_autocast_available(self._main_device)),
            "conv2d": any(isinstance(m, torch.nn.Conv2d) for m in module.modules()),
        }

    def _pre_global(self, module: Any, args: tuple[Any, ...]) -> Any:
        changed = self._pre(module, args, {})
        return None if changed is None else changed[0]

    def _pre_kwargs(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._pre(module, args, kwargs)

    def _pre(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if not self._ours():
            return None
        depth = self.depth
        self.depth = depth + 1
        if depth:
            return None
        if not self.narrowed and module not in self.top_modules:
            self.top_modules.append(module)
        if self.main is None and _has_parameters(module):
            self._identify(module)
        main = module is self.main
        if main and self._rss_before_bytes is None:
            self._rss_before_bytes = _rss_bytes()
        changed = None
        if main and self.injector is not None:
            if self.injector.compile and not self.compiled:
                self._compile(module)
            changed = self.injector.before_forward(module, args, kwargs)
            if changed is not None:
                args, kwargs = changed
        if main:
            import torch

            if torch.is_autocast_enabled(self._main_device):
                self.autocast_seen = str(torch.get_autocast_dtype(self._main_device))
        self.rec.forward_begin(main, _batch_items(args, kwargs) if main else 0)
        return changed

    def _post(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        if not self._ours():
            return None
        self.depth = max(0, self.depth - 1)
        if self.depth:
            return None
        main = module is self.main
        self.rec.forward_end(main)
        result = None
        if main and self.injector is not None:
            result = self.injector.after_forward(module, out)
        if not self.narrowed and self.rec.steps:
            self._narrow()
        return result

    def _narrow(self) -> None:
        """Swap the global hooks for hooks on the top-level modules seen so far."""
        for handle in self._global_handles:
            handle.remove()
        self._global_handles = []
        for module in self.top_modules:
            self._module_handles.append(
                module.register_forward_pre_hook(self._pre_kwargs, with_kwargs=True)
            )
            self._module_handles.append(
                module.register_forward_hook(self._post, with_kwargs=True, always_call=True)
            )
        self.narrowed = True

    def _compile(self, module: Any) -> None:
        import torch

        self.compiled = True
        if self.main_facts.get("compiled"):
            if self.injector is not None:
                self.injector.notes.append("not applied: the model was already compiled")
            return
        if not self.narrowed:
            self.top_modules = [module]
            self._narrow()
            self.depth = 1  # the call in progress keeps its (now per-module) post hook
        module.forward = torch.compile(module.forward)
        if self.injector is not None:
            self.injector.applied = True
            self.injector.notes.append(f"torch.compile({type(module).__name__}.forward)")

    # -- optimizer -----------------------------------------------------------------------------

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._ours():
            self.rec.optimizer_begin()
            if self.injector is not None:
                self.injector.before_optimizer_step(optimizer)

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._ours():
            if self.injector is not None:
                self.injector.after_optimizer_step(optimizer)
            if self.train_state is None:
                self.train_state = _train_state(optimizer, self._rss_before_bytes)
            self.rec.optimizer_end(True)

    def _wrap_loss(self, owner: Any) -> None:
        """``loss.backward()`` of a scalar: keep the loss (what-if runs, to compare losses;
        detached, read once at the end so no step waits for it) and let the what-if scale it
        (a GradScaler)."""
        inner = owner.backward
        ours, keep = self._ours, not self.full

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if ours() and tensor.numel() == 1:
                if keep:
                    self.losses[len(self.rec.steps)] = tensor.detach().clone()
                if self.injector is not None:
                    tensor = self.injector.scale_loss(tensor)
            return inner(tensor, *args, **kwargs)

        backward.__wrapped__ = inner  # type: ignore[attr-defined]
        backward.__name__ = "backward"
        self._patch(owner, "backward", backward)

    def losses_payload(self) -> list[list[float]]:
        """``[[step, loss], ...]`` (floats; a non-finite loss stays NaN/inf)."""
        import torch

        if not self.losses:
            return []
        steps = sorted(self.losses)
        stacked = torch.stack([self.losses[i].float().reshape(()) for i in steps]).cpu()
        tolist = getattr(torch.Tensor.tolist, "__wrapped__", torch.Tensor.tolist)  # not a sync
        return [[float(i), float(v)] for i, v in zip(steps, tolist(stacked), strict=True)]

    # -- wrappers ------------------------------------------------------------------------------

    def _wrap_phase(
        self,
        owner: Any,
        name: str,
        begin: Callable[[], None],
        end: Callable[[], None],
        method: bool = True,
    ) -> None:
        original = getattr(owner, name)
        ours = self._ours

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not ours():
                return original(*args, **kwargs)
            begin()
            try:
                return original(*args, **kwargs)
            finally:
                end()

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(original, "__name__", name)
        self._patch(owner, name, wrapper)

    def _wrap_sync(
        self, owner: Any, name: str, method: bool = True, device_only: bool = False
    ) -> None:
        original = getattr(owner, name)
        # the recorder's integer-ns ticks, only passed back to rec.leaf (see the module doc)
        ours, rec, clock = self._ours, self.rec, self.rec.clock_ns

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not ours() or (device_only and args and args[0].is_cpu):
                return original(*args, **kwargs)
            start = clock()
            out = original(*args, **kwargs)
            rec.leaf(SYNC, start, clock())
            rec.count(N_SYNC)
            return out

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(original, "__name__", name)
        self._patch(owner, name, wrapper)

    def _wrap_copy(self, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        ours, rec, clock = self._ours, self.rec, self.rec.clock_ns

        def readback(self_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            """``cuda_tensor.to('cpu')``: a blocking readback, like ``.cpu()``."""
            start = clock()
            out = original(self_, *args, **kwargs)
            if getattr(getattr(out, "device", None), "type", None) == "cpu":
                rec.leaf(SYNC, start, clock())
                rec.count(N_SYNC)
            return out

        def wrapper(self_: Any, *args: Any, **kwargs: Any) -> Any:
            if not ours():
                return original(self_, *args, **kwargs)
            if not self_.is_cpu:
                if (
                    name == "to"
                    and getattr(self_, "is_cuda", False)
                    and not kwargs.get("non_blocking", False)
                    and _may_move(args, kwargs)
                ):
                    return readback(self_, args, kwargs)
                return original(self_, *args, **kwargs)
            start = clock()
            out = original(self_, *args, **kwargs)
            end = clock()
            if (
                out is not self_
                and getattr(out, "device", None) is not None
                and out.device.type not in ("cpu", "meta")
            ):
                rec.leaf(COPY, start, end)
                rec.count(N_COPY)
                rec.count(COPY_BYTES, int(self_.nbytes))
                if not self_.is_pinned():
                    rec.count(N_PAGEABLE)
            return out

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__name__ = name
        self._patch(owner, name, wrapper)

    def _wrap_pin(self, owner: Any) -> None:
        original = owner.pin_memory
        ours, rec, clock = self._ours, self.rec, self.rec.clock_ns

        def pin_memory(self_: Any, *args: Any, **kwargs: Any) -> Any:
            if not ours():
                return original(self_, *args, **kwargs)
            start = clock()
            out = original(self_, *args, **kwargs)
            rec.leaf(COPY, start, clock())
            return out

        self._patch(owner, "pin_memory", pin_memory)

    def _wrap_loader_init(self, loader_cls: Any) -> None:
        original = loader_cls.__init__
        signature = inspect.signature(original)
        instrumentation = self

        def __init__(self_: Any, *args: Any, **kwargs: Any) -> None:
            injector = instrumentation.injector
            if injector is not None and not _FORKED["child"]:
                try:
                    bound = signature.bind(self_, *args, **kwargs)
                except TypeError:
                    bound = None
                if bound is not None:
                    arguments = dict(bound.arguments)
                    extra = arguments.pop("kwargs", None) if "kwargs" in arguments else None
                    injector.dataloader(arguments)
                    arguments.pop("self", None)
                    if extra:
                        arguments.update(extra)
                    original(self_, **arguments)
                    instrumentation._loader_facts(self_)
                    return
            original(self_, *args, **kwargs)
            instrumentation._loader_facts(self_)

        self._patch(loader_cls, "__init__", __init__)

    def _loader_facts(self, loader: Any) -> None:
        if not self._ours():
            return
        from torch.utils.data import IterableDataset

        dataset = getattr(loader, "dataset", None)
        try:
            length: int | None = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            length = None
        self.loaders.append(
            {
                "num_workers": int(getattr(loader, "num_workers", 0) or 0),
                "pin_memory": bool(getattr(loader, "pin_memory", False)),
                "batch_size": getattr(loader, "batch_size", None),
                "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
                "prefetch_factor": getattr(loader, "prefetch_factor", None),
                "dataset": type(dataset).__name__,
                "dataset_len": length,
                "iterable": isinstance(dataset, IterableDataset),
            }
        )
