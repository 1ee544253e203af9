"""Efficiency learned from published results, with the spread a prediction interval needs.

Each published row gives ``y = log(throughput per device / peak per device)``: how much of the
accelerator's peak one sample's work turns into throughput, up to the benchmark's own constant
(its work per sample). The model is a linear mixed model on that log scale::

    y = m[group] + u[family] + v[family, class] + e

- ``group`` is the benchmark and scenario (``resnet50/Offline``): a fixed mean each;
- ``u[family]`` is how well an accelerator family's stack does across every workload
  (random: ``N(0, tau_family^2)``), and ``v[family, class]`` how it does on one workload class
  beyond that (random: ``N(0, tau_class^2)``);
- ``e`` is what is left between submitters, systems and rounds (``N(0, sigma[class]^2)``, one
  spread per workload class, pooled toward the overall spread when a class has few rows).

Given the variances, the effects solve Henderson's mixed-model equations (weighted least
squares with the random effects' ridge penalty ``1/tau^2``); the variances are then re-read
from the residuals and the effects (moment estimates), for a fixed number of rounds. A
prediction for a family is ``m + u + v`` with that sum's posterior variance (from the
equations' inverse) plus ``sigma^2``; an unseen family or family-and-class adds its whole
``tau^2``, so the interval widens where there is no calibration rather than guessing. The
interval is Student-t on the log scale.

Empirical Bayes, with every variance read off the same table: the leave-one-out in
:mod:`accelscope.plan.projection.validation` checks the intervals' coverage.

**The user's own measurements** (:meth:`EfficiencyModel.updated`) are rows of the same model:
a measured point ``y = m[group] + u[family] + v[family, class] + e`` with ``e``'s variance the
class's ``sigma^2`` (another stack, another system, like any published row) plus the
measurement's own run-to-run variance ``s^2``: ``R = sigma^2 + s^2``. With the variances held
at their fitted values, the posterior of the measured family's two effects is updated by the
normal-normal (Kalman) gain ``K = C x / (x' C x + R)``: ``b' = b + K (y - x' b)``. The gain is
applied to ``u[family]`` and ``v[family, class]`` only, the group means and the other families
held at the published table's estimates (Schmidt's "consider" update); the share of the gain
the group mean would take goes to ``u[family]``, so the measured family's level ``m + u + v``
moves exactly as far as the full update moves it, and its variance (Joseph's form, valid for
any gain: ``(I - K x') C (I - K x')' + K R K'``) is the full update's. A user's run is another
model on another stack: as one more row of the full update, an eager run 4.6x below the
submitters' moved every family's projection by 4-5 % through the group mean; held, other
families do not move. A family (or family and class) with no published row enters with its prior
``N(0, tau^2)``, so one measurement narrows it most; a family with many rows barely moves. A
prediction's ``sigma^2`` (the next system's own spread) stays: a measurement never narrows an
interval below it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

__all__ = ["EfficiencyModel", "Measured", "Observation", "Prediction", "fit"]

_POOL_WEIGHT = 6.0
"""A class's residual spread is pooled with the overall spread as if the overall one were this
many residual degrees of freedom of the class (a class with few rows borrows it)."""
_TAU_FLOOR = 0.02
"""Smallest random-effect standard deviation (log scale) the fit may settle on: a moment
estimate can reach zero on a few rows, which would claim that families never differ."""
_VARIANCE_ROUNDS = 30
"""Rounds of variance estimates, each followed by the effects' solve. The spreads are
quantiles, which step as residuals change order, so they may settle on a short cycle rather
than a point: the rounds are capped, deterministically."""
_TOLERANCE = 1e-9
_SCALE_QUANTILE = 0.8
_NORMAL_80 = statistics.NormalDist().inv_cdf(0.9)
"""A normal distribution's 80 % central half-width over its standard deviation (1.2816)."""


@dataclass(frozen=True)
class Observation:
    """One published row on the model's scale."""

    group: str
    """Benchmark and scenario, e.g. ``resnet50/Offline``."""
    family: str
    workload_class: str
    log_value: float
    """``log(throughput per device / peak per device)``."""


@dataclass(frozen=True)
class Measured:
    """A user's own measurement on the model's scale, as :meth:`EfficiencyModel.updated` takes
    it: the observation, its own variance, and what to call it in a label."""

    observation: Observation
    log_variance: float
    """The measurement's own variance on the log scale (its run-to-run spread squared), on top
    of the class's spread between systems."""
    label: str
    """What narrowed an interval, as a label says it: ``your run 20261128-... on c7i.large``."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.log_variance) and self.log_variance >= 0):
            raise ValueError(
                f"a measurement's log variance is finite and >= 0, got {self.log_variance}"
            )
        if not math.isfinite(self.observation.log_value):
            raise ValueError(f"a measured log value is finite, got {self.observation.log_value}")
        if not self.label:
            raise ValueError("a measurement needs a label (what narrowed the interval)")


@dataclass(frozen=True)
class Prediction:
    """A predicted ``log`` value with its standard deviation and degrees of freedom."""

    log_mean: float
    log_sd: float
    dof: float
    basis: str
    """What calibrated it: this family on this class, this family on other classes only, or no
    published calibration for this family."""
    rows: int
    """Published rows of this family that inform it (0: none)."""

    @property
    def point(self) -> float:
        """The median prediction on the ratio scale."""
        return math.exp(self.log_mean)

    def interval(self, coverage: float = 0.8) -> tuple[float, float]:
        """The central ``coverage`` prediction interval on the ratio scale."""
        if not 0 < coverage < 1:
            raise ValueError(f"coverage must be in (0, 1), got {coverage}")
        from scipy import stats  # on first use: scipy.stats costs ~1 s of every plan's start

        half = float(stats.t.ppf(0.5 + coverage / 2, self.dof)) * self.log_sd
        return math.exp(self.log_mean - half), math.exp(self.log_mean + half)

    def shifted(self, log_offset: float, extra_variance: float, basis: str) -> Prediction:
        """This prediction moved by ``log_offset`` with ``extra_variance`` added (an update
        from the user's own measurements)."""
        return Prediction(
            self.log_mean + log_offset,
            math.sqrt(self.log_sd**2 + extra_variance),
            self.dof,
            basis,
            self.rows,
        )


@dataclass(frozen=True)
class EfficiencyModel:
    """The fitted model: the coefficients (group means, then family effects, then family x
    class effects), their posterior covariance, and the spreads."""

    groups: tuple[str, ...]
    families: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    coefficients: np.ndarray
    covariance: np.ndarray
    group_rows: dict[str, int]
    family_rows: dict[str, int]
    class_rows: dict[tuple[str, str], int]
    sigma: dict[str, float]
    sigma_pooled: float
    tau_family: float
    tau_class: float
    dof: float
    observations: int
    measured: tuple[Measured, ...] = ()
    """The user's measurements the coefficients were updated with (:meth:`updated`); the
    ``*_rows`` counts stay those of the published table."""

    def _sigma(self, workload_class: str) -> float:
        return self.sigma.get(workload_class, self.sigma_pooled)

    @property
    def group_mean(self) -> dict[str, float]:
        """Each group's fitted mean (log scale)."""
        return {g: float(self.coefficients[i]) for i, g in enumerate(self.groups)}

    @property
    def family_effect(self) -> dict[str, float]:
        """Each family's effect across workloads (log scale)."""
        offset = len(self.groups)
        return {f: float(self.coefficients[offset + i]) for i, f in enumerate(self.families)}

    def predict(self, group: str, family: str, workload_class: str) -> Prediction:
        """The prediction for ``family`` on ``group`` (a benchmark/scenario the table holds)."""
        if group not in self.groups:
            raise KeyError(f"no published group {group!r}")
        x = np.zeros(len(self.coefficients))
        x[self.groups.index(group)] = 1.0
        variance = self._sigma(workload_class) ** 2
        if family in self.families:
            x[len(self.groups) + self.families.index(family)] = 1.0
        else:
            variance += self.tau_family**2
        pair = (family, workload_class)
        if pair in self.pairs:
            x[len(self.groups) + len(self.families) + self.pairs.index(pair)] = 1.0
        else:
            variance += self.tau_class**2
        variance += float(x @ self.covariance @ x)
        n_family = self.family_rows.get(family, 0)
        n_class = self.class_rows.get(pair, 0)
        if n_class:
            basis = f"{family} published on {workload_class} ({n_class} rows)"
        elif n_family:
            basis = f"{family} published on other workloads only ({n_family} rows)"
        else:
            basis = f"no published calibration for {family}"
        narrowed = self.narrowed_by(family)
        if narrowed:
            basis += f"; narrowed by {narrowed}"
        return Prediction(
            float(x @ self.coefficients), math.sqrt(variance), self.dof, basis, n_family
        )

    def narrowed_by(self, family: str) -> str:
        """The labels of the measurements on ``family`` this model was updated with (``""``:
        none). Other families move only through the group mean, which many rows hold."""
        return ", ".join(m.label for m in self.measured if m.observation.family == family)

    def updated(self, measured: Sequence[Measured]) -> EfficiencyModel:
        """This model with each measurement added as one more row (the module's update), the
        variances held at their fitted values. A family, or family and class, no row has yet
        enters with its prior ``N(0, tau^2)``; a group the table lacks is refused."""
        families, pairs = list(self.families), list(self.pairs)
        beta = self.coefficients.copy()
        covariance = self.covariance.copy()
        for m in measured:
            o = m.observation
            if o.group not in self.groups:
                raise ValueError(f"no published group {o.group!r} to update")
            if o.family not in families:
                at = len(self.groups) + len(families)
                beta, covariance = _insert(beta, covariance, at, self.tau_family**2)
                families.append(o.family)
            pair = (o.family, o.workload_class)
            if pair not in pairs:
                beta, covariance = _insert(beta, covariance, len(beta), self.tau_class**2)
                pairs.append(pair)
            own_family = len(self.groups) + families.index(o.family)
            own_pair = len(self.groups) + len(families) + pairs.index(pair)
            x = np.zeros(len(beta))
            x[[self.groups.index(o.group), own_family, own_pair]] = 1.0
            spread = self._sigma(o.workload_class) ** 2 + m.log_variance
            cx = covariance @ x
            innovation_variance = float(x @ cx) + spread
            # the full update's gain, kept on the family's two effects (Schmidt's "consider"
            # update: the group means and the other families are held); the share the group
            # mean would take goes to the family effect, so the measured family's level moves
            # as far as the full update moves it
            group = self.groups.index(o.group)
            gain = np.zeros(len(beta))
            gain[own_family] = (cx[own_family] + cx[group]) / innovation_variance
            gain[own_pair] = cx[own_pair] / innovation_variance
            beta = beta + gain * (o.log_value - float(x @ beta))
            # Joseph's form, valid for any gain: (I - K x')C(I - K x')' + K R K'
            covariance = (
                covariance
                - np.outer(gain, cx)
                - np.outer(cx, gain)
                + innovation_variance * np.outer(gain, gain)
            )
        return replace(
            self,
            families=tuple(families),
            pairs=tuple(pairs),
            coefficients=beta,
            covariance=covariance,
            measured=(*self.measured, *measured),
        )


def _insert(
    beta: np.ndarray, covariance: np.ndarray, at: int, prior_variance: float
) -> tuple[np.ndarray, np.ndarray]:
    """``beta`` and ``covariance`` with a new coefficient at index ``at``: prior mean 0,
    variance ``prior_variance``, independent of the rest (a random effect not yet seen)."""
    beta = np.insert(beta, at, 0.0)
    covariance = np.insert(np.insert(covariance, at, 0.0, axis=0), at, 0.0, axis=1)
    covariance[at, at] = prior_variance
    return beta, covariance


def _abs_quantile(residuals: np.ndarray) -> float:
    """The normal standard deviation whose central 80 % matches these residuals'."""
    return float(np.quantile(np.abs(residuals), _SCALE_QUANTILE)) / _NORMAL_80


def _codes(labels: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct labels in first-seen order, and each label's index among them."""
    index: dict[Any, int] = {}
    codes = np.array([index.setdefault(label, len(index)) for label in labels], dtype=np.intp)
    return list(index), codes


def fit(observations: Sequence[Observation]) -> EfficiencyModel:
    """Fit the model to ``observations`` (at least three rows)."""
    # matrices of a few dozen columns: BLAS threads only spin (5x slower on a busy machine)
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit(observations)


def _fit(observations: Sequence[Observation]) -> EfficiencyModel:
    n = len(observations)
    if n < 3:
        raise ValueError(f"need at least 3 published rows to fit, got {n}")
    y = np.array([o.log_value for o in observations])
    groups, g = _codes([o.group for o in observations])
    families, f = _codes([o.family for o in observations])
    pairs, c = _codes([(o.family, o.workload_class) for o in observations])
    strata, s = _codes([o.workload_class for o in observations])
    n_groups, n_families, n_pairs = len(groups), len(families), len(pairs)
    design = np.zeros((n, n_groups + n_families + n_pairs))
    rows = np.arange(n)
    design[rows, g] = 1.0
    design[rows, n_groups + f] = 1.0
    design[rows, n_groups + n_families + c] = 1.0
    n_s = np.bincount(s, minlength=len(strata)).astype(float)
    groups_in_stratum = np.array([len(set(g[s == k].tolist())) for k in range(len(strata))])
    class_dof = np.maximum(1.0, n_s - groups_in_stratum)
    dof = max(3.0, float(n - n_groups - n_families))
    inflation = math.sqrt(n / dof)

    sigma = np.full(len(strata), 0.2)
    pooled, tau_u, tau_v = 0.2, 0.3, 0.2
    for _ in range(_VARIANCE_ROUNDS):
        weights = 1.0 / sigma[s] ** 2
        penalty = np.concatenate(
            [np.zeros(n_groups), np.full(n_families, tau_u**-2), np.full(n_pairs, tau_v**-2)]
        )
        normal = design.T @ (design * weights[:, None]) + np.diag(penalty)
        covariance = np.linalg.inv(normal)
        beta = covariance @ (design.T @ (weights * y))
        r = y - design @ beta
        # quantile-matched spreads: the 80th percentile of the absolute residuals over a
        # normal's (corrected for the fitted means). Residuals are heavy-tailed (a low target
        # load, another serving stack): their root mean square would widen every 80 %
        # interval for the few far rows, their median absolute value would narrow it below 80 %
        pooled = _abs_quantile(r) * inflation
        own = np.array([_abs_quantile(r[s == k]) for k in range(len(strata))])
        own *= np.sqrt(n_s / class_dof)
        sigma = np.sqrt(
            (class_dof * own**2 + _POOL_WEIGHT * pooled**2) / (class_dof + _POOL_WEIGHT)
        )
        # moment estimates: the spread of the shrunken effects plus their posterior variance
        diag = np.diag(covariance)
        u = beta[n_groups : n_groups + n_families]
        v = beta[n_groups + n_families :]
        tau_u_new = math.sqrt(
            max(_TAU_FLOOR**2, float(np.mean(u**2 + diag[n_groups : n_groups + n_families])))
        )
        tau_v_new = math.sqrt(
            max(_TAU_FLOOR**2, float(np.mean(v**2 + diag[n_groups + n_families :])))
        )
        settled = abs(tau_u_new - tau_u) < _TOLERANCE and abs(tau_v_new - tau_v) < _TOLERANCE
        tau_u, tau_v = tau_u_new, tau_v_new
        if settled:
            break
    weights = 1.0 / sigma[s] ** 2
    penalty = np.concatenate(
        [np.zeros(n_groups), np.full(n_families, tau_u**-2), np.full(n_pairs, tau_v**-2)]
    )
    covariance = np.linalg.inv(design.T @ (design * weights[:, None]) + np.diag(penalty))
    beta = covariance @ (design.T @ (weights * y))
    return EfficiencyModel(
        groups=tuple(groups),
        families=tuple(families),
        pairs=tuple(pairs),
        coefficients=beta,
        covariance=covariance,
        group_rows={name: int(np.sum(g == i)) for i, name in enumerate(groups)},
        family_rows={name: int(np.sum(f == i)) for i, name in enumerate(families)},
        class_rows={pair: int(np.sum(c == i)) for i, pair in enumerate(pairs)},
        sigma={name: float(sigma[i]) for i, name in enumerate(strata)},
        sigma_pooled=pooled,
        tau_family=tau_u,
        tau_class=tau_v,
        dof=dof,
        observations=n,
    )
