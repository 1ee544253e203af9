"""``accelscope plan``: from measured capacity to instances, dollars and memory fit.

Layer 8: pure analysis over the catalog (``catalog``), the traffic (``traffic``), the other
analyses' documents (``documents``), capacities (``capacity``) and the fused floor they are
projected with (``fusion``), fleet cost (``fleet``), the plan that joins them (``service``),
LLM memory (``llm_memory``) and API break-even (``api_cost``). It never prints, draws, or
touches the store.
"""

from accelscope.plan.api_cost import ApiComparison, compare_api
from accelscope.plan.capacity import CapacityEstimate, project_capacity
from accelscope.plan.catalog import Catalog, Instance, load_catalog
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.llm_memory import MemoryEstimate, estimate_memory, shape_from_config
from accelscope.plan.service import CapacityPlan, Evidence, build_plan
from accelscope.plan.traffic import Traffic, load_traffic

__all__ = [
    "ApiComparison",
    "CapacityEstimate",
    "CapacityPlan",
    "Catalog",
    "Evidence",
    "Instance",
    "MemoryEstimate",
    "PlanSettings",
    "Traffic",
    "build_plan",
    "compare_api",
    "estimate_memory",
    "load_catalog",
    "load_traffic",
    "project_capacity",
    "shape_from_config",
]
