"""Measurement core: adaptive timer, statistics, peak memory, thread pinning."""

from accelscope.hardware.sync import IntervalTimer
from accelscope.measurement.memory import MemoryPeak, MemoryProbe, track_peak_memory
from accelscope.measurement.record import Measurement, StopReason
from accelscope.measurement.stats import Summary, median_ci, percentile, summarise
from accelscope.measurement.threads import ThreadSettings, available_cores, pinned_threads
from accelscope.measurement.timer import HostInterval, Timer, TimerConfig

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
    "summarise",
    "track_peak_memory",
]
