"""tune's stored documents: a failure stored by its kind's name, a verdict's ratio stored as the
statistics module's own estimate (an unbounded side as null), the run's settings typed, and
documents in the shapes earlier versions stored still load. ``TuneConfig.compile`` builds one
configuration's document from the typed outcome the tuner hands on."""

from __future__ import annotations

import json
import math

from accelscope.llm.documents import Arrivals, CapacitySummary, LlmTrial, RequestRecord, Slo
from accelscope.llm.summary import summarise_trial
from accelscope.measurement.stats import RatioEstimate
from accelscope.tune.documents import TuneConfig, TuneRun, TuneSettings, TuneVerdict
from accelscope.tune.failures import FailureKind
from accelscope.tune.outcome import Attempt, Failed, Measured, Rejected, Spent
from accelscope.tune.quality import QualityResult
from accelscope.tune.space import Config

ATTEMPT = Attempt(
    config=Config((("max-num-seqs", 8),)),
    role="candidate",
    phase="full",
    command=("serve", "--max-num-seqs", "8"),
    launch="serve --max-num-seqs 8",
)
SPENT = Spent(wall_s=12.0, tuner_cpu_s=1.5, tuner_peak_rss_bytes=1 << 20)


def _trial(concurrency: int) -> LlmTrial:
    records = [
        RequestRecord(
            index=i,
            scheduled_s=i * 0.05,
            sent_s=i * 0.05,
            first_token_s=i * 0.05 + 0.02,
            end_s=i * 0.05 + 0.12,
            chunk_times_s=[i * 0.05 + 0.02 + k * 0.01 for k in range(11)],
            output_tokens=11,
            prompt_tokens=16,
        )
        for i in range(30)
    ]
    return LlmTrial(
        index=0,
        label=f"concurrency {concurrency}",
        arrivals=Arrivals(concurrency=concurrency),
        summary=summarise_trial(records, slo=Slo.parse("ttft=500ms", 90.0)),
    )


def _round_trip(config: TuneConfig) -> TuneConfig:
    stored = json.loads(json.dumps(config.model_dump(mode="json"), allow_nan=False))
    return TuneConfig.from_payload(stored)


def test_a_failure_is_stored_by_name_and_the_old_sentence_still_loads() -> None:
    failed = Failed(kind=FailureKind.OUT_OF_MEMORY, why="exited", log_tail="oom", first_error="E")
    config = TuneConfig.compile(ATTEMPT, failed, startup_s=None, spent=SPENT)
    assert config.model_dump(mode="json")["failure"] == "out_of_memory"
    assert config.failure is not None and config.failure.description == "out of memory"
    assert _round_trip(config) == config
    # the shape tune stored before: the kind's sentence
    old = TuneConfig.from_payload(
        {"key": "k", "status": "failed", "failure": "configuration refused by the engine"}
    )
    assert old.failure is FailureKind.INVALID
    assert [k.description for k in FailureKind] == [
        "exited before it was ready",
        "not ready in time",
        "out of memory",
        "configuration refused by the engine",
        "died while it was measured",
        "ready but did not answer",
    ]


def test_the_verdict_stores_the_ratio_estimate_itself() -> None:
    estimate = RatioEstimate(
        ratio=1.4, low=1.1, high=math.inf, p_value=0.01, confidence=0.95, method="m", units="u"
    )
    verdict = TuneVerdict(best="a", ratio=estimate, text="t")
    stored = json.loads(json.dumps(verdict.model_dump(mode="json"), allow_nan=False))
    assert stored["ratio"]["high"] is None  # JSON has no infinity: as tune stored it before
    loaded = TuneVerdict.from_payload(stored)
    assert loaded.ratio == estimate and isinstance(loaded.ratio, RatioEstimate)
    assert loaded.ratio.separated
    # a ratio stored by an earlier version, both sides null
    old = dict(stored["ratio"], low=None, high=None)
    unbounded = TuneVerdict.from_payload({"best": "a", "text": "t", "gain": old}).gain
    assert unbounded is not None and unbounded.low == 0.0 and math.isinf(unbounded.high)
    assert not unbounded.separated


def test_compile_reads_the_objective_from_the_measured_outcome() -> None:
    point = _trial(4)
    fixed = Measured(trials=(point,), point=point)
    config = TuneConfig.compile(ATTEMPT, fixed, startup_s=3.0, spent=SPENT, price_usd_per_hour=3.6)
    good = point.summary.goodput
    assert good is not None and config.goodput_tokens_per_s == good.output_tokens_per_s
    assert config.status == "measured" and config.usable and config.load == 4.0
    assert config.cost_per_million_good_tokens_usd == 3.6 / (good.output_tokens_per_s * 3600) * 1e6
    assert (config.wall_s, config.startup_s, config.launch) == (12.0, 3.0, ATTEMPT.launch)
    none_passed = CapacitySummary(capacity=None, stopped="the first load missed the SLO")
    searched = Measured(trials=(point,), point=point, capacity=none_passed)
    missed = TuneConfig.compile(ATTEMPT, searched, startup_s=3.0, spent=SPENT)
    assert missed.goodput_tokens_per_s is None and not missed.usable
    assert missed.why == "no load met the SLO (the first load missed the SLO)"
    died = Failed(kind=FailureKind.DIED, why="the server exited", log_tail="last words")
    dead = TuneConfig.compile(
        ATTEMPT, Measured(trials=(point,), point=point, died=died), startup_s=3.0, spent=SPENT
    )
    assert dead.status == "failed" and dead.failure is FailureKind.DIED and not dead.usable
    assert dead.log_tail == "last words" and dead.trials == [point]
    quality = QualityResult(
        method="greedy tokens",
        agreement=0.5,
        threshold=0.9,
        positions=40,
        prompts=8,
        passed=False,
        why="too unlike",
    )
    rejected = TuneConfig.compile(
        ATTEMPT, Rejected(why="too unlike", quality=quality), startup_s=3.0, spent=SPENT
    )
    assert rejected.status == "rejected" and rejected.quality == quality
    assert rejected.failure is None and rejected.trials == []


def test_settings_and_runs_of_earlier_versions_load() -> None:
    settings = TuneSettings.from_payload(
        {
            "engine": "vllm",
            "model": "/m",
            "spaces": ["max-num-seqs=1,8"],
            "capacity": "rate",
            "slo": Slo.parse("ttft=1s", 90.0).model_dump(mode="json"),
            "search": "auto",
        }
    )
    assert settings.kv_cache_gib is None and settings.slo is not None
    run = TuneRun.from_payload(
        {
            "engine": "vllm",
            "model": "/m",
            "strategy": "screen",
            "configs": [{"key": "a", "status": "failed", "failure": "not ready in time"}],
            "verdict": {
                "best": "a",
                "text": "t",
                "ratio": {"ratio": 1.2, "low": 1.05, "high": 1.4, "p_value": 0.02,
                          "confidence": 0.95, "method": "paired", "units": "3 rounds"},
            },
        }
    )  # fmt: skip
    assert run.configs[0].failure is FailureKind.TIMEOUT
    assert run.verdict is not None and run.verdict.ratio is not None
    assert run.verdict.ratio.low == 1.05
