"""Telemetry as an audit reads it: series parsed from a Prometheus ``query_range`` answer (over
HTTP or exported to a file), grouped into devices (a GPU, or a MIG instance of one), and laid
on one time grid of ``step_s`` slots so every figure is a count of slots.

A device is ``(host, GPU UUID or index, MIG instance id)``. Its holder in a slot is the
``namespace/pod`` label of the series that sample came from (dcgm-exporter's Kubernetes
mapping), empty when no pod held it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from accelscope.audit.fields import PERCENT, canonical_name, holder, label
from accelscope.errors import BadInputError

__all__ = [
    "Device",
    "Grid",
    "Series",
    "build_devices",
    "cpu_nodes",
    "gpu_requests",
    "merge_series",
    "parse_export_text",
    "parse_query_range",
    "query_range_answer",
]


@dataclass(frozen=True)
class Series:
    """One exported series: its canonical field, labels, times (s) and values."""

    field: str
    labels: dict[str, str]
    times_s: NDArray[np.float64]
    values: NDArray[np.float64]


def _one_response(payload: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(payload, dict):
        raise BadInputError(f"{where}: not a Prometheus query_range answer (a JSON object)")
    if payload.get("status") == "error":
        raise BadInputError(
            f"{where}: Prometheus answered {payload.get('errorType', 'error')}: "
            f"{payload.get('error', '')}"
        )
    data = payload.get("data")
    if payload.get("status") != "success" or not isinstance(data, dict):
        raise BadInputError(f"{where}: no 'status: success' with 'data' (not a query_range answer)")
    if data.get("resultType") != "matrix":
        raise BadInputError(
            f"{where}: resultType {data.get('resultType')!r}, expected 'matrix' (a range query)"
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise BadInputError(f"{where}: data.result is not a list")
    return result


def _series(canonical: str, labels: dict[str, str], times: Any, values: Any) -> Series:
    """A parsed series, its values in the field's unit (percentages brought to 0..1)."""
    numbers = np.asarray(values, dtype=np.float64)
    if canonical in PERCENT:
        numbers = numbers / 100.0
    return Series(canonical, labels, np.asarray(times, dtype=np.float64), numbers)


def merge_series(series: Sequence[Series]) -> list[Series]:
    """One series per (field, labels): the pieces of a series that arrive in several answers
    (time chunks of a long window) joined in time order, a repeated timestamp kept once."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Series]] = {}
    for s in series:
        groups.setdefault((s.field, tuple(sorted(s.labels.items()))), []).append(s)
    merged = []
    for parts in groups.values():
        if len(parts) == 1:
            merged.append(parts[0])
            continue
        times = np.concatenate([p.times_s for p in parts])
        values = np.concatenate([p.values for p in parts])
        times, first = np.unique(times, return_index=True)
        merged.append(Series(parts[0].field, parts[0].labels, times, values[first]))
    return merged


def parse_query_range(payload: Any, where: str) -> tuple[list[Series], dict[str, int]]:
    """Series of every field we read in a ``query_range`` answer (or a list of them), and how
    many series of other metrics were ignored, by name."""
    answers = payload if isinstance(payload, list) else [payload]
    series: list[Series] = []
    ignored: dict[str, int] = {}
    for number, answer in enumerate(answers):
        place = where if len(answers) == 1 else f"{where} (answer {number + 1})"
        for item in _one_response(answer, place):
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                raise BadInputError(f"{place}: a result without its 'metric' labels")
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            name = labels.pop("__name__", "")
            canonical = canonical_name(name)
            if canonical is None:
                ignored[name or "(unnamed)"] = ignored.get(name or "(unnamed)", 0) + 1
                continue
            values = item.get("values")
            if not isinstance(values, list):
                raise BadInputError(f"{place}: series {name} has no 'values' list")
            try:
                if any(len(v) != 2 for v in values):
                    raise ValueError("a sample is not a [time, value] pair")
                times = [float(v[0]) for v in values]
                numbers = [float(v[1]) for v in values]
            except (TypeError, ValueError, IndexError) as exc:
                raise BadInputError(f"{place}: series {name}: malformed sample ({exc})") from exc
            series.append(_series(canonical, labels, times, numbers))
    return series, ignored


def query_range_answer(series: Iterable[Series]) -> dict[str, Any]:
    """Series whose ``field`` is the *exported* metric name, as the answer a Prometheus
    ``query_range`` gives (the export format ``audit --from`` reads)."""
    result = [
        {
            "metric": {"__name__": s.field} | s.labels,
            "values": [
                [float(t), repr(float(v))] for t, v in zip(s.times_s, s.values, strict=True)
            ],
        }
        for s in series
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


_DECODER = json.JSONDecoder()
_NUMBERS = str.maketrans({"[": " ", "]": " ", '"': " "})


_NO_COMMA = re.compile(r"\[[^,\[\]]*\]")


def _values_fast(text: str, start: int) -> tuple[NDArray[np.float64], int] | None:
    """The ``[[t,"v"],...]`` array starting at ``start`` as an (n, 2) array, and where its
    result item ends; ``None`` when it is anything but plain ``[number, "number"]`` pairs
    closing the item (the caller falls back to json)."""
    if text.startswith("[]", start):
        end, pairs_end = start + 2, start + 2
    else:
        found = text.find("]]", start)
        if found < 0:
            return None
        end, pairs_end = found + 2, found + 2
    if not text.startswith("}", pairs_end):
        return None
    raw = text[start:end]
    if raw == "[]":
        return np.empty((0, 2)), end + 1
    count = raw.count("[") - 1
    if (
        count < 1
        or raw.count("]") != count + 1
        or raw.count(",") != 2 * count - 1
        or _NO_COMMA.search(raw)  # a pair of one value: counts alone would not see it
    ):
        return None
    try:
        numbers = np.array(raw.translate(_NUMBERS).replace(",", " ").split(), dtype=np.float64)
    except ValueError:
        return None
    if numbers.size != 2 * count:
        return None
    return numbers.reshape(-1, 2), end + 1


def parse_export_text(text: str, where: str) -> tuple[list[Series], dict[str, int]]:
    """:func:`parse_query_range` of a JSON text, without building a Python object per sample
    when the text is one plain ``query_range`` answer (each ``values`` array read straight into
    numpy): a 1,000-GPU week fits in memory. Anything else goes through ``json``."""
    head = text[:4096]
    if (
        not head.lstrip().startswith("{")
        or '"matrix"' not in head
        or '"status":"success"' not in head.replace(" ", "")
    ):
        return _parse_json(text, where)
    series: list[Series] = []
    ignored: dict[str, int] = {}
    position = 0
    while True:
        found = text.find('{"metric":', position)
        if found < 0:
            break
        try:
            labels_raw, after = _DECODER.raw_decode(text, found + len('{"metric":'))
        except json.JSONDecodeError:
            return _parse_json(text, where)
        marker = after + len(',"values":')
        if not text.startswith(',"values":', after) or not isinstance(labels_raw, dict):
            return _parse_json(text, where)
        parsed = _values_fast(text, marker)
        if parsed is None:
            return _parse_json(text, where)
        pairs, position = parsed
        labels = {str(k): str(v) for k, v in labels_raw.items()}
        name = labels.pop("__name__", "")
        canonical = canonical_name(name)
        if canonical is None:
            ignored[name or "(unnamed)"] = ignored.get(name or "(unnamed)", 0) + 1
            continue
        series.append(_series(canonical, labels, pairs[:, 0].copy(), pairs[:, 1].copy()))
    if not series and not ignored:
        return _parse_json(text, where)
    return series, ignored


def _parse_json(text: str, where: str) -> tuple[list[Series], dict[str, int]]:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{where} is not JSON: {exc}") from exc
    return parse_query_range(payload, where)


@dataclass(frozen=True)
class Grid:
    """The audit window ``[start_s, end_s)`` in slots of ``step_s``."""

    start_s: float
    end_s: float
    step_s: float

    def __post_init__(self) -> None:
        if not (self.step_s > 0 and self.end_s > self.start_s):
            raise BadInputError("the audit window is empty (end before start, or step <= 0)")

    @property
    def slots(self) -> int:
        """Number of slots in the window."""
        return math.ceil((self.end_s - self.start_s) / self.step_s)

    @property
    def slot_h(self) -> float:
        """Hours per slot."""
        return self.step_s / 3600.0

    def index(self, times_s: NDArray[np.float64]) -> NDArray[np.int64]:
        """Slot of each time (-1 outside the window)."""
        idx = np.floor((times_s - self.start_s) / self.step_s).astype(np.int64)
        idx[(idx < 0) | (idx >= self.slots)] = -1
        return idx


@dataclass
class Device:
    """One GPU or MIG instance: identity, each field on the grid (NaN: no sample), holders."""

    key: str
    host: str
    gpu: str
    uuid: str
    model: str
    mig_profile: str
    values: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    holders: NDArray[np.object_] | None = None
    duplicated_slots: int = 0
    """Slots where two holders reported the same field (time-slicing: unattributable)."""

    @property
    def is_mig(self) -> bool:
        """True for a MIG instance."""
        return bool(self.mig_profile)


def _key(labels: dict[str, str]) -> tuple[str, str, str, str]:
    host = label(labels, "host")
    gpu = label(labels, "gpu")
    uuid = label(labels, "uuid")
    mig = label(labels, "mig_id")
    return host, gpu, uuid, mig


def build_devices(series: Sequence[Series], grid: Grid) -> list[Device]:
    """GPU-level series grouped into devices on ``grid``. A device is its GPU UUID and MIG
    instance (host and index when there is no UUID); series with no sample in the window are
    left out; GPU_UTIL of a MIG instance is dropped (not supported there: absent or 0)."""
    exported = any("exported_pod" in s.labels for s in series)
    devices: dict[tuple[str, str], Device] = {}
    clashes: dict[tuple[str, str], dict[str, int]] = {}
    for s in series:
        if s.field in ("cpu_seconds", "gpu_requests"):
            continue
        host, gpu, uuid, mig = _key(s.labels)
        if not host and not uuid and not gpu:
            raise BadInputError(
                f"a {s.field} series has none of the labels that name a GPU "
                f"(Hostname/hostname, gpu, UUID): {sorted(s.labels)}"
            )
        if mig and s.field == "gpu_util":
            continue
        idx = grid.index(s.times_s)
        keep = idx >= 0
        if not keep.any():
            continue
        key = (uuid or f"{host}/{gpu}", mig)
        device = devices.get(key)
        if device is None:
            name = f"{host}/gpu{gpu}" + (f"/mig{mig}" if mig else "")
            device = Device(
                key=name,
                host=host,
                gpu=gpu,
                uuid=uuid,
                model=label(s.labels, "model"),
                mig_profile=label(s.labels, "mig_profile"),
                holders=np.full(grid.slots, "", dtype=object),
            )
            devices[key] = device
        if not device.model:
            device.model = label(s.labels, "model")
        slots = idx[keep]
        target = device.values.setdefault(s.field, np.full(grid.slots, np.nan))
        who = holder(s.labels, exported)
        assert device.holders is not None
        if s.field in ("gr_active", "gpu_util"):  # the fields that say a slot was in use
            clash = ~np.isnan(target[slots]) & (device.holders[slots] != who)
            counts = clashes.setdefault(key, {})
            counts[s.field] = counts.get(s.field, 0) + int(np.count_nonzero(clash))
        target[slots] = s.values[keep]
        if who:
            device.holders[slots] = who
    for key, device in devices.items():
        counts = clashes.get(key, {})
        device.duplicated_slots = counts.get("gr_active", counts.get("gpu_util", 0))
    return sorted(devices.values(), key=lambda d: d.key)


_MIG_RESOURCE = re.compile(r"nvidia_com_mig_(\d+)g_")


def gpu_requests(series: Sequence[Series], grid: Grid) -> dict[str, NDArray[np.float64]]:
    """GPUs requested on each node per slot (kube-state-metrics), in GPU equivalents: an
    ``nvidia_com_gpu`` is one, an ``nvidia_com_mig_<g>g_...`` instance g/7. Other resources
    (cpu, memory) are ignored."""
    by_node: dict[str, NDArray[np.float64]] = {}
    for s in series:
        if s.field != "gpu_requests":
            continue
        resource = label(s.labels, "resource")
        mig = _MIG_RESOURCE.match(resource)
        if resource == "nvidia_com_gpu":
            weight = 1.0
        elif mig:
            weight = int(mig.group(1)) / 7
        else:
            continue
        node = label(s.labels, "kube_node")
        slots = grid.index(s.times_s)
        keep = slots >= 0
        one = np.zeros(grid.slots)
        one[slots[keep]] = s.values[keep] * weight  # one value per slot for this container
        by_node[node] = by_node.get(node, np.zeros(grid.slots)) + one
    return by_node


def cpu_nodes(series: Sequence[Series], grid: Grid) -> dict[str, NDArray[np.float64]]:
    """Busy share of each node-exporter host per slot (1 - idle CPU-seconds rate / CPUs)."""
    by_host: dict[str, dict[str, list[Series]]] = {}
    for s in series:
        if s.field == "cpu_seconds":
            mode = label(s.labels, "mode")
            by_host.setdefault(label(s.labels, "host"), {}).setdefault(mode, []).append(s)
    busy: dict[str, NDArray[np.float64]] = {}
    for host, modes in by_host.items():
        idle = modes.get("idle", [])
        if not idle:
            continue
        rate = np.zeros(grid.slots)
        cpus = np.zeros(grid.slots)
        for s in idle:
            rate_one, mask = counter_rate(s, grid)
            rate += np.where(mask, rate_one, 0.0)
            cpus += mask
        with np.errstate(invalid="ignore", divide="ignore"):
            share = 1.0 - rate / cpus  # the CPUs with a rate in each slot
        busy[host] = np.where(cpus > 0, np.clip(share, 0.0, 1.0), np.nan)
    return busy


def counter_rate(s: Series, grid: Grid) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Per-second rate of a counter in each slot, a reset (a drop) counted as a restart from
    zero; and which slots have a rate."""
    order = np.argsort(s.times_s)
    t, v = s.times_s[order], s.values[order]
    rate = np.zeros(grid.slots)
    mask = np.zeros(grid.slots, dtype=bool)
    if t.size < 2:
        return rate, mask
    dv = np.diff(v)
    dv = np.where(dv < 0, v[1:], dv)  # a reset: the counter restarted from 0
    dt = np.diff(t)
    idx = grid.index(t[1:])
    ok = (idx >= 0) & (dt > 0)
    rate[idx[ok]] = dv[ok] / dt[ok]
    mask[idx[ok]] = True
    return rate, mask


def counter_increase(s: Series, grid: Grid) -> float:
    """Total increase of a counter inside the window, resets handled."""
    order = np.argsort(s.times_s)
    t, v = s.times_s[order], s.values[order]
    inside = (t >= grid.start_s) & (t < grid.end_s)
    t, v = t[inside], v[inside]
    if v.size < 2:
        return 0.0
    dv = np.diff(v)
    return float(np.sum(np.where(dv < 0, v[1:], dv)))
