"""The telemetry vocabulary an audit reads, as data: every name a field has had in dcgm-exporter
and node-exporter, the unit it comes in, and how to bring it to accelscope's unit.

Facts and sources: docs/design/audit-telemetry-facts.md. dcgm-exporter exports a field under
exactly the name its counters CSV gives; DCGM 4.6 renamed the fields (same IDs and units:
``DCGM_FI_DEV_GPU_UTIL`` → ``DCGM_FI_DEV_GPU_UTIL_RATIO``, still 0..100 in 4.6), and 1.x
exporters used lowercase names. Every activity is normalised to a 0..1 fraction by what its
name says: GPU_UTIL is a percentage under all of these names (``..._GPU_UTIL_RATIO`` too, in
DCGM 4.6), the profiling fields are ratios. dcgm-exporter 4.9 renames fields again (and turns
utilisation into a ratio) under names not known here: they are not read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FIELDS", "PERCENT", "Field", "canonical_name", "holder", "label"]


@dataclass(frozen=True)
class Field:
    """One quantity: its canonical name, every name it is exported under, and its unit."""

    name: str
    aliases: tuple[str, ...]
    unit: str
    """``percent`` (brought to 0..1), ``fraction``, ``MiB``, ``W``, ``mJ counter``,
    ``s counter`` or ``count``."""
    meaning: str


FIELDS: tuple[Field, ...] = (
    Field(
        "gpu_util",
        ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "dcgm_gpu_utilization"),
        "percent",
        "nvidia-smi's GPU utilisation: share of the sample window in which any kernel ran",
    ),
    Field(
        "gr_active",
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
            "dcgm_fi_prof_gr_engine_active",
        ),
        "fraction",
        "graphics/compute engine active",
    ),
    Field(
        "sm_active",
        ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", "dcgm_fi_prof_sm_active"),
        "fraction",
        "cycles an SM has at least one warp assigned, averaged over SMs",
    ),
    Field(
        "sm_occupancy",
        (
            "DCGM_FI_PROF_SM_OCCUPANCY",
            "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
            "dcgm_fi_prof_sm_occupancy",
        ),
        "fraction",
        "resident warps over the SMs' maximum",
    ),
    Field(
        "tensor_active",
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
            "dcgm_fi_prof_pipe_tensor_active",
        ),
        "fraction",
        "cycles any tensor pipe is active",
    ),
    Field(
        "dram_active",
        ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", "dcgm_fi_prof_dram_active"),
        "fraction",
        "cycles the device memory interface is busy",
    ),
    Field("fb_used_mib", ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used"), "MiB", "framebuffer used"),
    Field("fb_free_mib", ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"), "MiB", "framebuffer free"),
    Field(
        "power_w",
        ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", "dcgm_power_usage"),
        "W",
        "board power draw",
    ),
    Field(
        "energy_mj",
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "dcgm_total_energy_consumption"),
        "mJ counter",
        "energy since the driver was loaded (resets on reload)",
    ),
    Field(
        "gpu_requests",
        ("kube_pod_container_resource_requests",),
        "count",
        "kube-state-metrics: GPUs (or MIG instances) a pod's container requests",
    ),
    Field(
        "cpu_seconds",
        ("node_cpu_seconds_total",),
        "s counter",
        "node-exporter CPU time per cpu and mode",
    ),
)

_BY_ALIAS = {alias: f.name for f in FIELDS for alias in f.aliases}
PERCENT = {f.name for f in FIELDS if f.unit == "percent"}

LABELS: dict[str, tuple[str, ...]] = {
    "host": ("Hostname", "hostname", "instance", "node"),
    "gpu": ("gpu",),
    "uuid": ("UUID", "uuid"),
    "model": ("modelName",),
    "mig_profile": ("GPU_I_PROFILE",),
    "mig_id": ("GPU_I_ID",),
    "pod": ("exported_pod", "pod", "pod_name"),
    "namespace": ("exported_namespace", "namespace", "pod_namespace"),
    "container": ("exported_container", "container", "container_name"),
    "cpu": ("cpu",),
    "kube_node": ("node",),
    "resource": ("resource",),
    "mode": ("mode",),
}
"""Canonical label → the names exporters and scrapes have given it, preferred first
(``exported_*``: Prometheus renamed the exporter's own label on a clash, so the bare one is the
scrape target's, the exporter pod; see :func:`holder`)."""


def canonical_name(metric: str) -> str | None:
    """The canonical field of an exported metric name; ``None`` when it is not one we read."""
    return _BY_ALIAS.get(metric)


def holder(labels: dict[str, str], workload_exported: bool) -> str:
    """``namespace/pod`` of the workload holding the GPU; empty when none. With
    ``workload_exported`` (any series of the data carries ``exported_pod``), a bare ``pod``
    label names the scrape target, the exporter, not a workload."""
    if workload_exported:
        pod = labels.get("exported_pod", "")
        namespace = labels.get("exported_namespace", "")
    else:
        pod = labels.get("pod") or labels.get("pod_name", "")
        namespace = labels.get("namespace") or labels.get("pod_namespace", "")
    return "/".join(p for p in (namespace, pod) if p) if pod else ""


def label(labels: dict[str, str], canonical: str) -> str:
    """The value of ``canonical`` under any of its names (empty when absent)."""
    for name in LABELS[canonical]:
        value = labels.get(name)
        if value:
            return value
    return ""
