"""API vs own hardware: what a month of tokens costs on a per-token API and on rented
instances, and the monthly volume where owning becomes cheaper (break-even).

Own cost: enough instances, always on, to serve the month's tokens at the given throughput
with the given headroom (traffic assumed spread evenly over the month; a peaky load needs more).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from accelscope.errors import BadInputError
from accelscope.plan.fleet import HOURS_PER_MONTH

__all__ = ["ApiComparison", "compare_api"]

_SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600.0


@dataclass(frozen=True, kw_only=True)
class ApiComparison:
    """The two monthly bills and the break-even volume (tokens/month)."""

    tokens_per_month: float
    output_share: float
    input_price_per_million: float
    output_price_per_million: float
    instance: str
    price_per_hour: float
    throughput_tokens_per_s: float
    throughput_basis: str
    headroom: float
    api_monthly: float
    own_instances: int
    own_monthly: float
    own_per_million_full_use: float
    api_per_million: float
    break_even_tokens_per_month: float | None
    cheaper: str
    mode: Literal["api"] = "api"
    """Which ``plan`` document this is (stored: :func:`accelscope.serialise.dump`)."""
    assumptions: tuple[str, ...]


def compare_api(
    *,
    tokens_per_month: float,
    output_share: float,
    input_price: float,
    output_price: float,
    instance: str,
    price_per_hour: float,
    throughput_tokens_per_s: float,
    throughput_basis: str,
    headroom: float = 0.2,
) -> ApiComparison:
    """Compare an API's bill (prices in $ per million tokens) with renting ``instance``."""
    for value, what in (
        (tokens_per_month, "tokens per month"),
        (input_price, "input price"),
        (output_price, "output price"),
        (price_per_hour, "instance price"),
        (throughput_tokens_per_s, "throughput"),
    ):
        if not math.isfinite(value) or value <= 0:
            raise BadInputError(f"{what} must be positive, got {value!r}")
    if not 0 <= output_share <= 1:
        raise BadInputError(f"output share must be between 0% and 100%, got {output_share!r}")
    api_per_million = (1 - output_share) * input_price + output_share * output_price
    api_monthly = tokens_per_month / 1e6 * api_per_million
    per_instance_month = throughput_tokens_per_s * _SECONDS_PER_MONTH / (1 + headroom)
    instances = max(1, math.ceil(tokens_per_month / per_instance_month - 1e-9))
    instance_month = price_per_hour * HOURS_PER_MONTH
    own_monthly = instances * instance_month
    full_use = price_per_hour / (throughput_tokens_per_s * 3600.0) * 1e6
    break_even = instance_month / api_per_million * 1e6
    # above one instance's capacity, its cost is never recovered: no break-even
    break_even_value = None if break_even > per_instance_month else break_even
    cheaper = "own" if own_monthly < api_monthly else "api"
    assumptions: tuple[str, ...] = (
        f"throughput {throughput_tokens_per_s:.4g} tokens/s per instance ({throughput_basis}), "
        "counting input and output tokens together",
        f"{output_share:.0%} of tokens are output; API price blended to "
        f"${api_per_million:.4g} per million tokens",
        f"own instances always on ({HOURS_PER_MONTH:g} h/month) with {headroom:.0%} headroom; "
        "traffic spread evenly over the month; no staff, storage or egress costs",
    )
    if break_even_value is None:
        assumptions += (
            f"even at full use, own tokens cost ${full_use:.4g}/M > the API's "
            f"${api_per_million:.4g}/M: no break-even",
        )
    return ApiComparison(
        tokens_per_month=tokens_per_month,
        output_share=output_share,
        input_price_per_million=input_price,
        output_price_per_million=output_price,
        instance=instance,
        price_per_hour=price_per_hour,
        throughput_tokens_per_s=throughput_tokens_per_s,
        throughput_basis=throughput_basis,
        headroom=headroom,
        api_monthly=api_monthly,
        own_instances=instances,
        own_monthly=own_monthly,
        own_per_million_full_use=full_use,
        api_per_million=api_per_million,
        break_even_tokens_per_month=break_even_value,
        cheaper=cheaper,
        assumptions=assumptions,
    )
