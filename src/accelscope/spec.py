"""Frozen, hashable specifications: what is measured, never how it turned out.

``RunSpec`` is the identity of one measured configuration and the resume key of a sweep.
``TensorSpec`` describes one model input with a symbolic batch dimension.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from enum import Enum, StrEnum
from typing import Any

from accelscope.errors import BadInputError

__all__ = [
    "BATCH_DIM",
    "Device",
    "DeviceRef",
    "Precision",
    "RunSpec",
    "TensorSpec",
    "parse_batch_sizes",
    "parse_device",
    "parse_device_ref",
    "parse_options",
    "parse_precision",
    "parse_switches",
    "parse_tensor_spec",
]

BATCH_DIM = "N"
"""Symbol for the batch dimension in a :class:`TensorSpec` shape."""


class Precision(StrEnum):
    """Numeric precision a configuration runs in."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    FP8 = "fp8"


class Device(StrEnum):
    """Kind of device a configuration runs on."""

    CPU = "cpu"
    CUDA = "cuda"


_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")
_DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "double": "float64",
    "long": "int64",
    "int": "int32",
}


def _enum_value(kind: type[Enum], text: str, what: str) -> Any:
    try:
        return kind(text.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise BadInputError(f"unknown {what} {text!r}; choose one of: {choices}") from None


def parse_precision(text: str) -> Precision:
    """Parse ``fp32``/``bf16``/... into a :class:`Precision`; bad text is a ``BadInputError``."""
    return _enum_value(Precision, text, "precision")  # type: ignore[no-any-return]


def parse_device(text: str) -> Device:
    """Parse ``cpu``/``cuda`` (``cuda:0`` is accepted as ``cuda``); the index is dropped, so
    commands that honour an index parse with :func:`parse_device_ref`."""
    return _enum_value(Device, text.split(":", 1)[0], "device")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class DeviceRef:
    """A device as the user names it: its kind and, for CUDA, the ordinal (``cuda:1``).

    ``index`` is the CUDA ordinal as this process sees it (after ``CUDA_VISIBLE_DEVICES``);
    ``cuda`` alone means ordinal 0. Whether that ordinal exists is checked against the machine
    (:func:`accelscope.hardware.gpu.check_device`), before any work.
    """

    kind: Device
    index: int = 0

    def __post_init__(self) -> None:
        if self.index < 0:
            raise BadInputError(f"device index must be 0 or more, got {self.index}")
        if self.kind is Device.CPU and self.index:
            raise BadInputError(f"device cpu takes no index (got cpu:{self.index})")

    def __str__(self) -> str:
        return "cpu" if self.kind is Device.CPU else f"cuda:{self.index}"


def parse_device_ref(value: object) -> DeviceRef:
    """Parse ``cpu``, ``cuda`` or ``cuda:N`` (N a CUDA ordinal) into a :class:`DeviceRef`."""
    if isinstance(value, DeviceRef):
        return value
    text = str(value).strip().lower()
    kind_text, sep, index_text = text.partition(":")
    kind: Device = _enum_value(Device, kind_text, "device")
    if not sep:
        return DeviceRef(kind)
    if not re.fullmatch(r"\d+", index_text.strip()):
        raise BadInputError(
            f"device {value!s}: the index after ':' must be a CUDA ordinal such as cuda:0"
        )
    return DeviceRef(kind, int(index_text))


_SWITCH_VALUES = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def parse_switches(value: object, what: str = "setting") -> tuple[bool, ...]:
    """Parse ``on``/``off`` (also ``true``/``false``), or a list of them (``off,on``), into
    booleans in the order given without repeats."""
    if isinstance(value, bool):
        return (value,)
    parts = value if isinstance(value, list | tuple) else str(value).split(",")
    found: list[bool] = []
    for part in parts:
        if isinstance(part, bool):
            switch = part
        else:
            key = str(part).strip().lower()
            if key not in _SWITCH_VALUES:
                raise BadInputError(f"{what} {str(part).strip()!r}: give on or off")
            switch = _SWITCH_VALUES[key]
        if switch not in found:
            found.append(switch)
    if not found:
        raise BadInputError(f"{what}: give on or off")
    return tuple(found)


def parse_options(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Parse ``key=value`` backend options (a value may be a list: ``channels_last=true,false``)."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise BadInputError(
                f"option {item!r} must look like key=value (e.g. channels_last=true)"
            )
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """Parse ``"1,8,32"`` into positive batch sizes, in the order given, without repeats."""
    sizes: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[+-]?\d+", part):
            raise BadInputError(f"batch size {part!r} is not an integer (expected e.g. 1,8,32)")
        value = int(part)
        if value <= 0:
            raise BadInputError(f"batch size must be a positive integer, got {value}")
        if value not in sizes:
            sizes.append(value)
    return tuple(sizes)


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    """One model input: name, shape (``"N"`` marks the batch dimension), dtype, value range.

    ``low``/``high`` bound the synthetic values: integers are drawn from ``[low, high)``
    (token ids, class indices), floats from a standard normal when both are ``None``.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(r"[A-Za-z_][\w.\-]*", self.name):
            raise BadInputError(f"input name {self.name!r} is not a valid identifier")
        dtype = _DTYPE_ALIASES.get(self.dtype, self.dtype)
        if dtype not in _DTYPES:
            raise BadInputError(
                f"input {self.name!r}: unknown dtype {self.dtype!r}; choose one of: "
                + ", ".join(_DTYPES)
            )
        object.__setattr__(self, "dtype", dtype)
        for dim in self.shape:
            if isinstance(dim, str):
                if dim != BATCH_DIM:
                    raise BadInputError(
                        f"input {self.name!r}: dimension {dim!r} must be an integer or "
                        f"{BATCH_DIM!r} (the batch)"
                    )
            elif isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
                raise BadInputError(
                    f"input {self.name!r}: dimension {dim!r} must be a positive integer"
                )
        if self.low is not None and self.high is not None and self.high <= self.low:
            raise BadInputError(f"input {self.name!r}: high must be greater than low")

    @property
    def is_integer(self) -> bool:
        """True for integer and bool dtypes (token ids, masks)."""
        return self.dtype.startswith(("int", "uint")) or self.dtype == "bool"

    def concrete_shape(self, batch_size: int) -> tuple[int, ...]:
        """The shape with the batch dimension replaced by ``batch_size``."""
        return tuple(batch_size if d == BATCH_DIM else int(d) for d in self.shape)

    def to_text(self) -> str:
        """The ``name:N,3,224,224:float32`` form accepted by :func:`parse_tensor_spec`."""
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.name}:{dims}:{self.dtype}"


def parse_tensor_spec(text: str) -> TensorSpec:
    """Parse ``name:N,3,224,224:float32`` (dtype optional; ``x`` also separates dims).

    An integer input may carry a value range: ``input_ids:N,128:int64:0-30522``.
    """
    parts = text.strip().split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise BadInputError(
            f"input spec {text!r} must look like NAME:SHAPE[:DTYPE[:LOW-HIGH]], "
            "e.g. x:N,3,224,224:float32"
        )
    name, shape_text = parts[0], parts[1]
    dims: list[int | str] = []
    for raw in re.split("[,x\u00d7]", shape_text):
        raw = raw.strip()
        if raw.upper() in (BATCH_DIM, "B", "BATCH"):
            dims.append(BATCH_DIM)
        elif re.fullmatch(r"[+-]?\d+", raw):
            dims.append(int(raw))
        else:
            raise BadInputError(f"input spec {text!r}: dimension {raw!r} is not an integer or N")
    dtype = parts[2] if len(parts) >= 3 and parts[2] else "float32"
    low: float | None = None
    high: float | None = None
    if len(parts) == 4:
        match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*", parts[3])
        if not match:
            raise BadInputError(f"input spec {text!r}: value range must look like 0-30522")
        low, high = float(match.group(1)), float(match.group(2))
    return TensorSpec(name=name, shape=tuple(dims), dtype=dtype, low=low, high=high)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Identity of one measured configuration; hashable and used as the resume key.

    ``model`` is the model reference as the user gave it (zoo name, ``file.py:fn``, path);
    ``model_digest`` pins the exact file content when there is one, so a changed model file is a
    different configuration. ``options`` holds backend options as sorted ``(key, value)`` pairs.
    ``node_type`` names the cluster node type that measures it (``--executor ray --node-type``);
    empty for this machine, and then left out of the key, so local keys never change.
    ``device_index`` is the CUDA ordinal (``--device cuda:1``) and ``tf32`` whether fp32
    matrix products and convolutions may use TF32 tensor cores (CUDA only; off means IEEE
    fp32 on every backend); both are left out of the key at their defaults (0, off), so keys
    of configurations measured before they existed never change.
    """

    model: str
    backend: str
    precision: Precision
    batch_size: int
    threads: int
    device: Device = Device.CPU
    model_digest: str = ""
    options: tuple[tuple[str, str], ...] = field(default=())
    node_type: str = ""
    device_index: int = 0
    tf32: bool = False

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise BadInputError(f"batch size must be a positive integer, got {self.batch_size}")
        if self.threads <= 0:
            raise BadInputError(f"threads must be a positive integer, got {self.threads}")
        if self.device_index < 0:
            raise BadInputError(f"device index must be 0 or more, got {self.device_index}")
        if self.device is Device.CPU and self.device_index:
            raise BadInputError(f"device cpu takes no index (got cpu:{self.device_index})")
        object.__setattr__(self, "options", tuple(sorted(self.options)))

    @property
    def device_ref(self) -> DeviceRef:
        """The device with its ordinal (``cuda:1``)."""
        return DeviceRef(self.device, self.device_index)

    @property
    def precision_label(self) -> str:
        """The precision as a table shows it: ``fp32``, or ``tf32`` for fp32 with TF32 tensor
        cores allowed (``bf16+tf32`` for a reduced precision whose fp32 leftovers may use it)."""
        if not self.tf32:
            return self.precision.value
        return "tf32" if self.precision is Precision.FP32 else f"{self.precision.value}+tf32"

    @property
    def key(self) -> str:
        """Stable 16-hex-digit digest of every field: the resume and de-duplication key."""
        payload = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short human label, e.g. ``eager/fp32/b8/t2``."""
        opts = "".join(f"/{k}={v}" for k, v in self.options)
        device = f"/cuda:{self.device_index}" if self.device_index else ""
        where = f"@{self.node_type}" if self.node_type else ""
        return (
            f"{self.backend}/{self.precision_label}/b{self.batch_size}/t{self.threads}{opts}"
            f"{device}{where}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (enums as their values, options as lists)."""
        data = asdict(self)
        data["precision"] = self.precision.value
        data["device"] = self.device.value
        data["options"] = [list(kv) for kv in self.options]
        if not self.node_type:
            del data["node_type"]
        if not self.device_index:
            del data["device_index"]
        if not self.tf32:
            del data["tf32"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            model=data["model"],
            backend=data["backend"],
            precision=Precision(data["precision"]),
            batch_size=int(data["batch_size"]),
            threads=int(data["threads"]),
            device=Device(data["device"]),
            model_digest=data.get("model_digest", ""),
            options=tuple((str(k), str(v)) for k, v in data.get("options", [])),
            node_type=str(data.get("node_type", "")),
            device_index=int(data.get("device_index", 0)),
            tf32=bool(data.get("tf32", False)),
        )
