"""Accuracy: output fidelity against a reference, and task metrics on eval data."""

from accelscope.accuracy.fidelity import Fidelity, compare_outputs
from accelscope.accuracy.metrics import METRICS, metric_fn, top1_accuracy

__all__ = ["METRICS", "Fidelity", "compare_outputs", "metric_fn", "top1_accuracy"]
