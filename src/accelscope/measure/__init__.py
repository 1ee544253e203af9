"""Measurement core: adaptive timer, statistics, peak memory, thread pinning."""

from accelscope.hardware.sync import IntervalTimer
from accelscope.measure.measurement import Measurement, StopReason
from accelscope.measure.memory import MemoryPeak, MemoryProbe, track_peak_memory
from accelscope.measure.stats import Summary, median_ci, percentile, summarize
from accelscope.measure.threads import ThreadSettings, available_cores, pinned_threads
from accelscope.measure.timer import HostInterval, Timer, TimerConfig

__all__ = [
    "HostInterval",
    "IntervalTimer",
    "Measurement",
    "MemoryPeak",
    "MemoryProbe",
    "StopReason",
    "Summary",
    "ThreadSettings",
    "Timer",
    "TimerConfig",
    "available_cores",
    "median_ci",
    "percentile",
    "pinned_threads",
    "summarize",
    "track_peak_memory",
]
