"""``accelscope load``: MLPerf-LoadGen-style scenarios in-process, and the highest load that
still meets a p99 latency bound.

A seeded query source (server: Poisson or gamma arrivals fixed up front; offline: all at once;
single-stream: closed loop) feeds a dynamic batcher; an executor runs batches on the system
under test in real threads, or in simulated time for exact queueing checks. Latency runs from
each query's scheduled arrival (no coordinated omission). Validity follows LoadGen: minimum
duration and query count, the early-stopping rule for the tail, and the generator's own lag.
Each run first measures the harness floor: the latency of a null system under test on the same
real-time path, below which service times cannot be told from the harness's own cost.
"""

from accelscope.load.batcher import NO_BATCHING, BatchPolicy
from accelscope.load.capacity_search import (
    CapacitySearch,
    PolicyCapacity,
    SearchSettings,
    policy_grid,
    search_capacity,
)
from accelscope.load.clock import LoadClock, RealClock, SimClock
from accelscope.load.early_stopping import (
    EarlyStopping,
    binomial_cdf,
    min_passing_queries,
    percentile_estimate,
    server_early_stopping,
)
from accelscope.load.executor import Completion, QueryExecutor, SimulatedExecutor, ThreadedExecutor
from accelscope.load.floor import HarnessFloor, measure_harness_floor
from accelscope.load.scenarios import run_offline, run_server, run_single_stream
from accelscope.load.schedule import Query, arrival_offsets_s
from accelscope.load.summary import Distribution, Scenario, TrialSettings, TrialSummary
from accelscope.load.sut import ServiceModel, SystemUnderTest

__all__ = [
    "NO_BATCHING",
    "BatchPolicy",
    "CapacitySearch",
    "Completion",
    "Distribution",
    "EarlyStopping",
    "HarnessFloor",
    "LoadClock",
    "PolicyCapacity",
    "Query",
    "QueryExecutor",
    "RealClock",
    "Scenario",
    "SearchSettings",
    "ServiceModel",
    "SimClock",
    "SimulatedExecutor",
    "SystemUnderTest",
    "ThreadedExecutor",
    "TrialSettings",
    "TrialSummary",
    "arrival_offsets_s",
    "binomial_cdf",
    "measure_harness_floor",
    "min_passing_queries",
    "percentile_estimate",
    "policy_grid",
    "run_offline",
    "run_server",
    "run_single_stream",
    "search_capacity",
    "server_early_stopping",
]
