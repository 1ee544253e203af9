"""One what-if change, injected into the user's unmodified script from inside its process.

The parent describes the change as plain JSON (``{"kind": "dataloader", "set": {...}}``, see
:data:`KINDS`); the instrumentation calls the injector where the change applies: when a
``DataLoader`` is built, around the main model's top-level forward, and at start-up. Every
injector says afterwards whether it found something to change (``applied``) and what it did.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["KINDS", "CachedDataset", "Injector", "describe", "same_sample"]

KINDS = ("none", "dataloader", "batch", "autocast", "compile", "cache", "threads")


def _nbytes(value: Any) -> int:
    """Bytes held by the tensors/arrays in a (nested) sample."""
    if hasattr(value, "nbytes") and isinstance(getattr(value, "nbytes", None), int):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0


def same_sample(a: Any, b: Any) -> bool:
    """True when two samples are equal (tensors, arrays, nested containers, scalars)."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_sample(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_sample(x, y) for x, y in zip(a, b, strict=True))
    if type(a).__module__ == "numpy" and type(b).__module__ == "numpy":
        import numpy as np

        return bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an exotic sample type: assume it differs
        return False


class CachedDataset:
    """A map-style dataset whose first ``count`` samples were materialised up front.

    Index ``i`` returns cached sample ``i % count``: the sampler the DataLoader builds from
    :meth:`__len__` only asks for cached indices, and a user sampler still gets a sample.
    """

    def __init__(self, base: Any, count: int) -> None:
        self.samples = [base[i] for i in range(count)]
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Any:
        return self.samples[index % self.count]


class Injector:
    """Applies the change ``spec`` (see :data:`KINDS`) where the instrumentation calls it.

    Args:
        spec: ``{"kind": ..., ...}``; ``dataloader`` has ``set`` (DataLoader kwargs), ``batch``
            has ``factor``, ``autocast`` has ``dtype`` (``bfloat16``/``float16``) and optionally
            ``channels_last`` (the model and its 4-D inputs in channels-last memory format: how
            convolutions run fast in bf16) and ``grad_scaler`` (a training loop's loss scaled
            by a ``torch.amp.GradScaler``: its gradients unscaled before ``optimizer.step()``,
            the step skipped when they are not finite, the scale updated after), ``threads``
            has ``threads``.
        needed_steps: Steps the run will take (warm-up + measured), to size the cache.
    """

    def __init__(self, spec: dict[str, Any], needed_steps: int) -> None:
        self.kind = str(spec.get("kind", "none"))
        if self.kind not in KINDS:
            raise ValueError(f"unknown what-if kind {self.kind!r}")
        self.spec = spec
        self.needed_steps = needed_steps
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.applied = False
        self.compile = self.kind == "compile"
        self._autocast: list[Any] = []
        self._scaled_loader = False
        self._tile: list[int] = []
        self._channels_last_done = False
        self._scaler: Any = None
        self._skip_step = False

    # -- start-up ----------------------------------------------------------------------------

    def start(self) -> None:
        """Changes made before the script runs (thread count)."""
        if self.kind != "threads":
            return
        import torch

        threads = int(self.spec["threads"])
        torch.set_num_threads(threads)
        original = torch.set_num_threads

        def keep(n: int) -> None:  # the script's own setting would undo the what-if
            self.notes.append(f"ignored the script's torch.set_num_threads({n})")
            original(threads)

        torch.set_num_threads = keep  # type: ignore[assignment]
        self.applied = True
        self.notes.append(f"torch intra-op threads set to {threads}")

    # -- DataLoader ----------------------------------------------------------------------------

    def dataloader(self, arguments: dict[str, Any]) -> None:
        """Edit a ``DataLoader(...)`` call's bound arguments in place."""
        if self.kind == "dataloader":
            changes = dict(self.spec.get("set", {}))
            needs_workers = "prefetch_factor" in changes or "persistent_workers" in changes
            if needs_workers and int(arguments.get("num_workers") or 0) == 0:
                self.notes.append("not applied: the DataLoader has no workers")
                return
            arguments.update(changes)
            self.applied = True
            self.notes.append(", ".join(f"{k}={v}" for k, v in changes.items()))
        elif self.kind == "batch":
            size = arguments.get("batch_size", 1)
            if size is None or arguments.get("batch_sampler") is not None:
                return
            factor = int(self.spec["factor"])
            arguments["batch_size"] = int(size) * factor
            self._scaled_loader = self.applied = True
            self.notes.append(f"DataLoader batch_size {size} -> {int(size) * factor}")
        elif self.kind == "cache":
            self._cache(arguments)

    def _cache(self, arguments: dict[str, Any]) -> None:
        from torch.utils.data import IterableDataset

        dataset: Any = arguments.get("dataset")
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
            self.notes.append("not applied: the dataset is not map-style (no indexing)")
            return
        try:
            total = len(dataset)
        except TypeError:
            self.notes.append("not applied: the dataset has no length")
            return
        if total == 0:
            return
        batch = arguments.get("batch_size") or 1
        count = min(total, (self.needed_steps + 2) * int(batch))
        probes = range(min(8, count))  # a 50 % random flip passes one check half the time
        deterministic = all(same_sample(dataset[i], dataset[i]) for i in probes)
        started_s = time.perf_counter()
        cached = CachedDataset(dataset, count)
        fill_s = time.perf_counter() - started_s
        arguments["dataset"] = cached
        per_sample = _nbytes(cached.samples[0]) if cached.samples else 0
        self.applied = True
        self.details = {
            "samples": count,
            "dataset_len": total,
            "bytes_per_sample": per_sample,
            "deterministic": deterministic,
            "fill_s": fill_s,
        }
        self.notes.append(
            f"cached {count} of {total} samples in memory up front "
            f"(~{per_sample * total / 2**20:.0f} MiB for the whole dataset); filling took "
            f"{fill_s:.2f} s, ~{fill_s * total / count:.1f} s for the whole dataset once: the "
            "first epoch still pays the decode, later epochs do not"
        )
        if not deterministic:
            self.notes.append(
                "changes results: __getitem__ returned different values for the same index "
                "(random augmentation?); a cache would freeze it"
            )

    # -- forward -----------------------------------------------------------------------------

    def before_forward(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """Around the main model's top-level forward: enter autocast, tile the batch."""
        import torch

        if self.kind == "autocast":
            device = _device_type(module)
            if torch.is_autocast_enabled(device):
                self.notes.append("not applied: autocast was already on")
                return None
            dtype = getattr(torch, str(self.spec["dtype"]))
            changed = None
            if self.spec.get("channels_last"):
                changed = self._channels_last(module, args, kwargs)
            context = torch.autocast(device, dtype=dtype)
            context.__enter__()  # type: ignore[no-untyped-call]
            self._autocast.append(context)
            if not self.applied:
                self.applied = True
                self.notes.append(f"torch.autocast({device!r}, {dtype}) around the forward")
            return changed
        if self.kind == "batch" and not self._scaled_loader:
            factor = int(self.spec["factor"])
            first = next(
                (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None
            )
            if first is None or first.dim() == 0:
                return None
            size = first.shape[0]

            def tile(value: Any) -> Any:
                if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == size:
                    return value.repeat(factor, *([1] * (value.dim() - 1)))
                return value

            self._tile.append(size)
            if not self.applied:
                self.applied = True
                self.notes.append(
                    f"no DataLoader batch to scale: the forward's inputs are repeated x{factor} "
                    "along dim 0 and its outputs cut back to the original batch"
                )
            return tuple(tile(a) for a in args), {k: tile(v) for k, v in kwargs.items()}
        return None

    # -- training: a GradScaler around the loss and the optimizer step ------------------------

    def scale_loss(self, loss: Any) -> Any:
        """The loss ``backward()`` is called on: scaled by the GradScaler where one is asked."""
        if self.kind != "autocast" or not self.spec.get("grad_scaler") or not self.applied:
            return loss
        if self._scaler is None:
            import torch

            self._scaler = torch.amp.GradScaler(loss.device.type)
            self.details["grad_scaler"] = True
            self.details["scaler_skipped_steps"] = 0
            self.notes.append(f"torch.amp.GradScaler({loss.device.type!r}) scales the loss")
        return self._scaler.scale(loss)

    def before_optimizer_step(self, optimizer: Any) -> None:
        """Unscale the gradients; drop them (the step then changes nothing) if any is not
        finite, as ``GradScaler.step`` skips such a step."""
        if self._scaler is None:
            return
        import torch

        self._scaler.unscale_(optimizer)
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        checks = [torch.isfinite(g).all() for g in grads]
        if checks and not bool(torch.stack(checks).all()):
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    parameter.grad = None
            self.details["scaler_skipped_steps"] = int(self.details["scaler_skipped_steps"]) + 1

    def after_optimizer_step(self, optimizer: Any) -> None:
        """Update the loss scale (halved after a skipped step, grown after a run of good ones)."""
        if self._scaler is None:
            return
        self._scaler.update()
        self.details["loss_scale"] = float(self._scaler.get_scale())

    def _channels_last(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The model (once) and the forward's 4-D tensor inputs in channels-last format."""
        import torch

        fmt = torch.channels_last
        if not self._channels_last_done:
            self._channels_last_done = True
            module.to(memory_format=fmt)  # in place: the optimizer keeps its parameters
            self.notes.append("model and 4-D inputs in channels_last memory format")

        def convert(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dim() == 4:
                return value.contiguous(memory_format=fmt)
            return value

        return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}

    def after_forward(self, module: Any, output: Any) -> Any:
        """Leave autocast; cut a tiled output back to the script's batch."""
        if self._autocast:
            self._autocast.pop().__exit__(None, None, None)
        if self._tile:
            size = self._tile.pop()
            return _cut(output, size, size * int(self.spec["factor"]))
        return None


def _device_type(module: Any) -> str:
    for parameter in module.parameters():
        return str(parameter.device.type)
    return "cpu"


def _cut(value: Any, size: int, tiled: int) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value[:size] if value.dim() and value.shape[0] == tiled else value
    if isinstance(value, dict):
        return type(value)({k: _cut(v, size, tiled) for k, v in value.items()})
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_cut(v, size, tiled) for v in value)
    if isinstance(value, list):
        return [_cut(v, size, tiled) for v in value]
    return value


def describe(spec: dict[str, Any]) -> str:
    """A short human description of a what-if spec."""
    kind = spec.get("kind", "none")
    if kind == "dataloader":
        return "DataLoader " + ", ".join(f"{k}={v}" for k, v in dict(spec.get("set", {})).items())
    if kind == "batch":
        return f"batch size x{spec.get('factor')}"
    if kind == "autocast":
        extra = " + channels_last" if spec.get("channels_last") else ""
        extra += " + GradScaler" if spec.get("grad_scaler") else ""
        return f"autocast {spec.get('dtype')}{extra}"
    if kind == "compile":
        return "torch.compile of the model"
    if kind == "cache":
        return "dataset cached in memory"
    if kind == "threads":
        return f"torch threads = {spec.get('threads')}"
    return "unchanged"
