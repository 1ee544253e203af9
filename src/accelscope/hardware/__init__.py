"""What the machine is: CPU, GPUs, memory, library versions, and which precisions run fast.

Layering: this package imports only the stdlib, psutil, torch (lazily), ``accelscope.errors``,
``accelscope.spec`` and itself.
"""

from __future__ import annotations

from accelscope.hardware.cpu import CpuInfo
from accelscope.hardware.fastpaths import PrecisionSupport, precision_support
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.gpu import GpuInfo

__all__ = [
    "CpuInfo",
    "Environment",
    "GpuInfo",
    "PrecisionSupport",
    "collect_environment",
    "precision_support",
]
