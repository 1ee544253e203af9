"""Count FLOPs and bytes of every aten operator a model runs, from tensor sizes at dispatch.

A ``TorchDispatchMode`` sees each operator once, at the level it is dispatched (under
``inference_mode`` that is often the composite op: ``aten::linear``, ``aten::conv2d``,
``aten::layer_norm``). For each call it records the FLOPs (:mod:`.flops`) and the bytes read and
written:

- bytes read = the distinct input storages, bytes written = the distinct output storages; several
  views of one storage count the bytes they span once (never more than their own sizes), and a
  broadcast (stride-0) view counts only the memory it really spans;
- an op whose outputs all alias its inputs and that mutates nothing (a view: ``view``, ``t``,
  ``permute``, a no-op ``contiguous``) moves 0 bytes; an in-place op (``add_``) reads its inputs
  and writes its output;
- this is the **lower bound** of memory traffic: each byte once per op, as if caches held
  nothing between ops and everything within one (no re-reads, no write-allocate, no spills).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from accelscope.roofline.flops import categorize, flops_of

__all__ = ["OpRecord", "count_ops", "dtype_name", "tensor_span_bytes", "tensors_bytes"]

_DTYPE_NAMES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "int16": "int16",
}
_COMPUTE_CATEGORIES = frozenset({"matmul", "conv", "attention"})


@dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One dispatched operator call: what it computed and moved.

    ``flops`` is ``None`` when :mod:`.flops` has no rule for the op (listed, never guessed).
    ``dtype`` is the compute dtype (``fp32``, ``bf16``, …): the first input's for matrix
    products, convolutions and attention, else the first floating-point output's.
    """

    name: str
    category: str
    dtype: str
    flops: float | None
    read_bytes: int
    written_bytes: int

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.read_bytes + self.written_bytes


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` → ``bf16`` (unknown dtypes keep torch's name)."""
    text = str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(text, text)


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def tensor_span_bytes(tensor: Any) -> tuple[int, int]:
    """``(start, end)`` byte offsets the tensor's elements span inside its storage.

    A broadcast (stride-0) dimension adds nothing, so ``end - start`` is the memory really
    touched, which can be less than ``numel x element size`` (never more for dense tensors).
    """
    size = tensor.element_size()
    if tensor.numel() == 0:
        return 0, 0
    start = tensor.storage_offset() * size
    extent = 1 + sum((d - 1) * abs(s) for d, s in zip(tensor.shape, tensor.stride(), strict=True))
    return start, start + min(extent, tensor.numel()) * size


def _storage_key(tensor: Any) -> int | None:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # opaque (mkldnn) or storage-less tensors
        return None


def tensors_bytes(tensors: list[Any]) -> tuple[int, set[int]]:
    """Bytes the tensors occupy, each storage counted once; and the storages' keys.

    Views of one storage count the union of the ranges they span, capped at the sum of their own
    sizes (so two halves of a buffer count the buffer, a tensor passed twice counts once).
    """
    spans: dict[int, list[tuple[int, int]]] = {}
    total = 0
    for tensor in tensors:
        key = _storage_key(tensor)
        if key is None or key == 0:
            total += tensor.numel() * tensor.element_size()
            continue
        spans.setdefault(key, []).append(tensor_span_bytes(tensor))
    for ranges in spans.values():
        union = max(end for _, end in ranges) - min(start for start, _ in ranges)
        total += min(union, sum(end - start for start, end in ranges))
    return total, set(spans)


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = [argument.name for argument in func._schema.arguments]
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def _op_dtype(category: str, inputs: list[Any], outputs: list[Any]) -> str:
    if category in _COMPUTE_CATEGORIES and inputs:
        return dtype_name(inputs[0].dtype)
    for tensor in outputs:
        if tensor.is_floating_point():
            return dtype_name(tensor.dtype)
    for tensor in (*inputs, *outputs):
        return dtype_name(tensor.dtype)
    return "none"


def record_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> OpRecord:
    """The :class:`OpRecord` of one call of the aten overload ``func``."""
    name = str(func._schema.name)
    inputs = list(_tensors(args)) + list(_tensors(kwargs))
    outputs = list(_tensors(out))
    read, input_keys = tensors_bytes(inputs)
    written, output_keys = tensors_bytes(outputs)
    mutates = bool(func._schema.is_mutable)
    category = categorize(name)
    if outputs and not mutates and output_keys and output_keys <= input_keys:
        read, written = 0, 0  # a view: the outputs alias the inputs, no data moves
        category = "view" if category in ("movement", "uncounted") else category
    flops = flops_of(name, _bind(func, args, kwargs), out)
    return OpRecord(
        name=name,
        category=category,
        dtype=_op_dtype(category, inputs, outputs),
        flops=flops,
        read_bytes=read,
        written_bytes=written,
    )


def count_ops(fn: Callable[[], Any]) -> tuple[list[OpRecord], Any]:
    """Run ``fn`` once under a dispatch mode; return every aten call in order, and its result."""
    from torch.utils._python_dispatch import TorchDispatchMode

    records: list[OpRecord] = []

    class _Counter(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            records.append(record_call(func, tuple(args), dict(kwargs), out))
            return out

    with _Counter():  # type: ignore[no-untyped-call]
        result = fn()
    return records, result
