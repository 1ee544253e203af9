"""A fixture fleet for ``audit``: seven days of dcgm-exporter and node-exporter series, every
value chosen so the audit's hours, dollars and actions can be computed by hand.

``fleet()`` returns the series; ``dumps_query_range`` renders them as the JSON a Prometheus
``query_range`` answers (the offline export ``audit --from`` reads), ``to_openmetrics`` as the
OpenMetrics text ``promtool tsdb create-blocks-from openmetrics`` backfills into a TSDB. The
generator is seeded (the noise on the diurnal service); ``scale`` adds copies of the GPU nodes
for the scale benchmark. As a script: ``python -m accelscope.testing.fleet --out fleet.json
--openmetrics fleet.om``.

The fleet (60 s samples by default, 2026-11-09 00:00 UTC for 7 days; llm-train draws 300 W):

========  ======================  =====================================================
node      GPU                      workload
========  ======================  =====================================================
node-a    A100-SXM4-40GB gpu0      ``ml/etl-train``: input-bound (GPU_UTIL 90 %, SM 10 %)
node-a    A100-SXM4-40GB gpu1      ``ml/llm-train``: healthy (SM 85 %, tensor 60 %); its
                                   energy counter resets on day 3
node-a    A100-SXM4-40GB gpu2      ``ml/fp32-train``: SM 70 %, tensor 0.5 % (no AMP)
node-b    A100-SXM4-40GB gpu0 MIG  3g.20gb ``prod/ranker``, 2g.10gb ``prod/embedder``,
                                   1g.5gb idle and unallocated; no GPU_UTIL (MIG)
node-c    L4 gpu0                  ``prod/chat-api``: diurnal (70 % 08-20 UTC, 10 % at
                                   night); no samples on day 2 10:00-12:00
node-c    L4 gpu1                  ``research/jupyter-alice``: held, idle all week
node-d    A100-SXM4-40GB gpu0, 1   ``team-x/small-infer-1``, ``-2``: SM 15 %, 4 GB; DCGM
                                   4.6 field names and the ``hostname`` label
node-e/f  (CPU pool)               node_cpu_seconds_total, 2 CPUs, 20 % busy
========  ======================  =====================================================

kube-state-metrics' ``kube_pod_container_resource_requests`` gives each pod's GPU (or MIG
instance) request all week, plus one cpu request that the audit must ignore.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

import numpy as np

from accelscope.audit.telemetry import Series, query_range_answer

__all__ = ["DAYS", "START_S", "STEP_S", "dumps_query_range", "fleet", "to_openmetrics"]

START_S = datetime(2026, 11, 9, tzinfo=UTC).timestamp()
STEP_S = 60.0
DAYS = 7
_OLD = {
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "gr_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "fb_used_mib": "DCGM_FI_DEV_FB_USED",
    "fb_free_mib": "DCGM_FI_DEV_FB_FREE",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "energy_mj": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
}
_NEW = {
    **_OLD,
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL_RATIO",
    "gr_active": "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
    "sm_active": "DCGM_FI_PROF_SM_UTIL_RATIO",
    "tensor_active": "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
    "dram_active": "DCGM_FI_PROF_DRAM_UTIL_RATIO",
    "power_w": "DCGM_FI_DEV_BOARD_POWER_WATTS",
}
A100 = "NVIDIA A100-SXM4-40GB"
L4 = "NVIDIA L4"


def _times(days: int, step_s: float) -> np.ndarray:
    return START_S + np.arange(int(days * 86400 / step_s)) * step_s


def _gpu(
    host: str,
    gpu: int,
    model: str,
    pod: str,
    profile: Mapping[str, np.ndarray | float],
    times: np.ndarray,
    *,
    host_label: str = "Hostname",
    names: dict[str, str] = _OLD,
    mig: tuple[str, str] | None = None,
) -> list[Series]:
    labels = {
        "gpu": str(gpu),
        "UUID": f"GPU-{host}-{gpu}",
        "device": f"nvidia{gpu}",
        "modelName": model,
        host_label: host,
    }
    if mig:
        labels["GPU_I_PROFILE"], labels["GPU_I_ID"] = mig
    if pod:
        namespace, name = pod.split("/")
        labels.update(namespace=namespace, pod=name, container="main")
    out = []
    for field, value in profile.items():
        values = np.broadcast_to(np.asarray(value, dtype=float), times.shape).copy()
        if field == "gpu_util":
            values = values * 100.0  # dcgm-exporter: percent
        keep = ~np.isnan(values)
        out.append(Series(names[field], dict(labels), times[keep], values[keep]))
    return out


def fleet(seed: int = 0, days: int = DAYS, scale: int = 1, step_s: float = STEP_S) -> list[Series]:
    """The fixture fleet's series (``Series.field`` holds the *exported* metric name here),
    one sample every ``step_s``. ``scale`` > 1 repeats the GPU nodes under other host names
    (the scale benchmark)."""
    rng = np.random.default_rng(seed)
    t = _times(days, step_s)
    hour = (t - START_S) // 3600 % 24
    day_time = (hour >= 8) & (hour < 20)
    series: list[Series] = []
    for copy in range(scale):
        suffix = "" if copy == 0 else f"-{copy}"
        a, b, c, d = (f"node-{x}{suffix}" for x in "abcd")
        series += _gpu(a, 0, A100, "ml/etl-train", _input_bound(), t)
        per_sample_mj = 300.0 * step_s * 1000.0  # 300 W
        energy = per_sample_mj * np.arange(1, t.size + 1)
        reset = int(3 * 86400 / step_s)
        energy[reset:] = per_sample_mj * np.arange(1, t.size - reset + 1)  # driver reload
        series += _gpu(a, 1, A100, "ml/llm-train", {**_healthy(), "energy_mj": energy}, t)
        series += _gpu(a, 2, A100, "ml/fp32-train", _no_amp(), t)
        series += _gpu(
            b, 0, A100, "prod/ranker", _mig(0.6, 0.5, 0.3, 15000), t, mig=("3g.20gb", "1")
        )
        series += _gpu(
            b, 0, A100, "prod/embedder", _mig(0.3, 0.25, 0.1, 6000), t, mig=("2g.10gb", "2")
        )
        series += _gpu(b, 0, A100, "", _mig(0.0, 0.0, 0.0, 0), t, mig=("1g.5gb", "3"))
        activity = np.where(day_time, 0.7, 0.1)
        noise = rng.uniform(-0.01, 0.01, t.size)
        gap = (t >= START_S + 86400 * 2 + 10 * 3600) & (t < START_S + 86400 * 2 + 12 * 3600)
        diurnal = {
            "gpu_util": np.where(gap, np.nan, activity + noise),
            "gr_active": np.where(gap, np.nan, activity + noise),
            "sm_active": np.where(gap, np.nan, 0.8 * activity),
            "tensor_active": np.where(gap, np.nan, 0.3 * activity),
            "dram_active": np.where(gap, np.nan, 0.4 * activity),
            "fb_used_mib": np.where(gap, np.nan, 9000.0),
            "fb_free_mib": np.where(gap, np.nan, 13000.0),
        }
        series += _gpu(c, 0, L4, "prod/chat-api", diurnal, t)
        series += _gpu(c, 1, L4, "research/jupyter-alice", _idle(), t)
        for gpu in (0, 1):
            series += _gpu(
                d,
                gpu,
                A100,
                f"team-x/small-infer-{gpu + 1}",
                _small(),
                t,
                host_label="hostname",
                names=_NEW,
            )
    for node, pod, resource in _REQUESTS:
        labels = {
            "namespace": pod.split("/")[0],
            "pod": pod.split("/")[1],
            "container": "main",
            "node": node,
            "resource": resource,
            "unit": "integer" if resource.startswith("nvidia") else "core",
        }
        series.append(Series("kube_pod_container_resource_requests", labels, t, np.ones(t.size)))
    for host in ("node-e", "node-f"):
        for cpu in ("0", "1"):
            for mode, rate in (("idle", 0.8), ("user", 0.2)):
                values = (rate * step_s * np.arange(t.size)).astype(np.float64)
                labels = {"instance": host, "cpu": cpu, "mode": mode}
                series.append(Series("node_cpu_seconds_total", labels, t, values))
    return series


_REQUESTS = (
    ("node-a", "ml/etl-train", "nvidia_com_gpu"),
    ("node-a", "ml/etl-train", "cpu"),  # not a GPU: ignored
    ("node-a", "ml/llm-train", "nvidia_com_gpu"),
    ("node-a", "ml/fp32-train", "nvidia_com_gpu"),
    ("node-b", "prod/ranker", "nvidia_com_mig_3g_20gb"),
    ("node-b", "prod/embedder", "nvidia_com_mig_2g_10gb"),
    ("node-c", "prod/chat-api", "nvidia_com_gpu"),
    ("node-c", "research/jupyter-alice", "nvidia_com_gpu"),
    ("node-d", "team-x/small-infer-1", "nvidia_com_gpu"),
    ("node-d", "team-x/small-infer-2", "nvidia_com_gpu"),
)
"""kube-state-metrics' requests of the fixture's pods (one container each, all week)."""


def _input_bound() -> dict[str, np.ndarray | float]:
    return {
        "gpu_util": 0.90,
        "gr_active": 0.85,
        "sm_active": 0.10,
        "tensor_active": 0.01,
        "dram_active": 0.05,
        "fb_used_mib": 30000.0,
        "fb_free_mib": 10960.0,
    }


def _healthy() -> dict[str, np.ndarray | float]:
    return {
        "gpu_util": 0.98,
        "gr_active": 0.95,
        "sm_active": 0.85,
        "tensor_active": 0.60,
        "dram_active": 0.55,
        "fb_used_mib": 38000.0,
        "fb_free_mib": 2960.0,
    }


def _no_amp() -> dict[str, np.ndarray | float]:
    return {
        "gpu_util": 0.95,
        "gr_active": 0.90,
        "sm_active": 0.70,
        "tensor_active": 0.005,
        "dram_active": 0.30,
        "fb_used_mib": 20000.0,
        "fb_free_mib": 20960.0,
    }


def _mig(gr: float, sm: float, tensor: float, fb: float) -> dict[str, np.ndarray | float]:
    return {
        "gr_active": gr,
        "sm_active": sm,
        "tensor_active": tensor,
        "dram_active": sm / 2,
        "fb_used_mib": fb,
        "fb_free_mib": 1000.0,
    }


def _idle() -> dict[str, np.ndarray | float]:
    return {
        "gpu_util": 0.0,
        "gr_active": 0.0,
        "sm_active": 0.0,
        "tensor_active": 0.0,
        "dram_active": 0.0,
        "fb_used_mib": 1200.0,
        "fb_free_mib": 21800.0,
    }


def _small() -> dict[str, np.ndarray | float]:
    return {
        "gpu_util": 0.40,
        "gr_active": 0.20,
        "sm_active": 0.15,
        "tensor_active": 0.10,
        "dram_active": 0.10,
        "fb_used_mib": 4000.0,
        "fb_free_mib": 36960.0,
    }


def to_openmetrics(series: Sequence[Series]) -> str:
    """The series as OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``:
    every sample timestamped (seconds), each series in ascending time, ``# EOF`` last."""
    lines: list[str] = []
    for s in series:
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
        head = f"{s.field}{{{labels}}}"
        lines.extend(
            f"{head} {float(v)!r} {float(t):.3f}" for t, v in zip(s.times_s, s.values, strict=True)
        )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def dumps_query_range(series: Iterable[Series]) -> str:
    """The series as the compact JSON text of a ``query_range`` answer."""
    return json.dumps(query_range_answer(series), separators=(",", ":"))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m accelscope.testing.fleet --out fleet.json [--openmetrics fleet.om]``."""
    import argparse

    parser = argparse.ArgumentParser(description="Write the audit fixture fleet.")
    parser.add_argument("--out", required=True, help="query_range JSON export to write")
    parser.add_argument("--openmetrics", help="also write OpenMetrics text for promtool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--days", type=int, default=DAYS)
    parser.add_argument("--step", type=float, default=STEP_S, help="seconds between samples")
    parser.add_argument("--copies", type=int, default=1, help="repeat the GPU nodes")
    args = parser.parse_args(argv)
    series = fleet(seed=args.seed, days=args.days, scale=args.copies, step_s=args.step)
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(dumps_query_range(series))
    if args.openmetrics:
        with open(args.openmetrics, "w", encoding="utf-8") as out:
            out.write(to_openmetrics(series))


if __name__ == "__main__":
    main()
