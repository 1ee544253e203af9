"""Hand-made documents (contracts.md) for the plan tests (the analysis, the CLI and the report)."""

from __future__ import annotations

import copy
from typing import Any

CEILINGS: dict[str, Any] = {
    "device": "cpu",
    "device_name": "Intel Xeon (test)",
    "environment_fingerprint": "abcd",
    "measured_at": "2026-11-21T00:00:00+00:00",
    "matmul_flops_per_s": {"fp32": 1.5e11, "bf16": 2.0e12},
    "bandwidth_bytes_per_s": 8e9,
    "bandwidth_detail_bytes_per_s": {"copy": 8e9, "triad": 7e9},
    "theoretical": {
        "flops_per_s": {"fp32": 2.05e11, "bf16": 3.28e12},
        "bandwidth_bytes_per_s": 6.4e9,
        "derivation": "test",
    },
}
ROOFLINE: dict[str, Any] = {
    "model": "resnet50",
    "backend": "eager",
    "precision": "bf16",
    "batch_size": 8,
    "device": "cpu",
    "environment_fingerprint": "abcd",
    "measured_time_s": 0.4,
    "floor_time_s": 0.05,
    "total_flops": 6.6e10,
    "total_bytes": 4e8,
    "ceilings": CEILINGS,
    "operators": [
        {
            "name": "aten::convolution",
            "dtype": "bf16",
            "calls": 53,
            "flops": 6.5e10,
            "bytes": 3e8,
            "measured_time_s": 0.35,
        },
        {
            "name": "aten::add",
            "dtype": "bf16",
            "calls": 16,
            "flops": 1e8,
            "bytes": 1e8,
            "measured_time_s": 0.05,
            "extra_key": "tolerated",
        },
    ],
}
CAPACITY: dict[str, Any] = {
    "model": "resnet50",
    "label": "eager bf16 b8 t2",
    "spec": {},
    "scenario": "server",
    "sla_p99_s": 0.1,
    "capacity_qps": 40.0,
    "batching": {"max_batch": 8, "max_delay_s": 0.01},
    "environment_fingerprint": "abcd",
    "device": "cpu",
    "valid": True,
}


def roofline_payload() -> dict[str, Any]:
    """A fresh copy of the ResNet-50-shaped roofline payload."""
    return copy.deepcopy(ROOFLINE)


def capacity_payload() -> dict[str, Any]:
    """A fresh copy of the load capacity payload."""
    return copy.deepcopy(CAPACITY)
