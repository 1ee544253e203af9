"""Flag types for where and how a model runs on a GPU: ``--device cpu|cuda|cuda:N`` and
``--tf32 on|off`` (shared by bench, measure, load, roofline and ceilings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelscope.errors import BadInputError
from accelscope.spec import DeviceRef, parse_device_ref, parse_switches

__all__ = ["DEVICE_HELP", "TF32_HELP", "Tf32", "parse_device", "parse_tf32", "parse_tf32_list"]

DEVICE_HELP = "cpu, cuda or cuda:N (a CUDA ordinal)."
TF32_HELP = "on: fp32 may use TF32 tensor cores (CUDA); off (default): IEEE fp32."


@dataclass(frozen=True)
class Tf32:
    """TF32 settings: one (``--tf32 on``) or a sweep axis (bench's ``--tf32 off,on``)."""

    values: tuple[bool, ...]


def parse_device(value: Any) -> DeviceRef:
    """``--device cpu``, ``cuda`` or ``cuda:N``."""
    return parse_device_ref(value)


def parse_tf32_list(value: Any) -> Tf32:
    """``--tf32 on``, ``off`` or ``off,on``."""
    return value if isinstance(value, Tf32) else Tf32(parse_switches(value, "--tf32"))


def parse_tf32(value: Any) -> Tf32:
    """``--tf32 on`` or ``off`` (one value)."""
    found = parse_tf32_list(value)
    if len(found.values) != 1:
        raise BadInputError("--tf32 takes one value here: on or off")
    return found
