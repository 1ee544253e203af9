"""What an ``llm`` trial sends (lengths, prefix scenarios, arrivals, seeded prompts, prompts
files), the capacity search over a scripted trial function, and the decode floor computed by
hand on a small model shape.

Covers: accelscope.llm.workload, accelscope.llm.capacity, accelscope.llm.floor."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from accelscope.errors import BadInputError
from accelscope.llm.capacity import search_capacity, trial_passes
from accelscope.llm.documents import (
    ClientLag,
    Distribution,
    Metrics,
    SloState,
    SloTerm,
    SloVerdict,
    TokenStats,
    TrialSummary,
    Window,
)
from accelscope.llm.floor import EFFICIENT, decode_floor, decoding_batch, read_bytes_per_step
from accelscope.llm.records import RequestRecord
from accelscope.llm.workload import (
    Arrivals,
    Lengths,
    PrefixScenario,
    Workload,
    build_requests,
    read_prompts,
)
from accelscope.plan.llm_memory import ModelShape


def _one_line(exc: pytest.ExceptionInfo[BadInputError], *mentions: str) -> None:
    text = str(exc.value)
    assert text and "\n" not in text, text
    for mention in mentions:
        assert mention in text, (mention, text)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from accelscope.testing.llm_model import build_tiny_llama

    directory = build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


# -- Lengths, PrefixScenario, Arrivals -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("128", 128, 128), ("64:256", 64, 256), (" 64 : 256 ", 64, 256), ("1", 1, 1), ("5:5", 5, 5)],
)
def test_lengths_parse(text: str, low: int, high: int) -> None:
    lengths = Lengths.parse(text, "--input-tokens")
    assert (lengths.low, lengths.high) == (low, high)
    assert str(lengths) == (str(low) if low == high else f"{low}:{high}")
    rng = random.Random(0)
    assert all(low <= lengths.sample(rng) <= high for _ in range(50))


@pytest.mark.parametrize(
    "text", ["", "abc", "0", "-1", "1.5", "256:64", "0:5", "5:", ":5", "1:2:3"]
)
def test_lengths_parse_rejects(text: str) -> None:
    with pytest.raises(BadInputError) as exc:
        Lengths.parse(text, "--output-tokens")
    _one_line(exc, "--output-tokens")


def test_prefix_scenario_parse() -> None:
    cold = PrefixScenario.parse("cold")
    assert cold.cold and str(cold) == "cold"
    shared = PrefixScenario.parse("shared=512")
    assert (shared.shared_tokens, shared.hit_rate) == (512, 1.0) and not shared.cold
    assert str(shared) == "shared=512 (hit rate 1)"
    half = PrefixScenario.parse(" shared = 64 ", 0.5)
    assert (half.shared_tokens, half.hit_rate) == (64, 0.5)
    assert PrefixScenario.parse("shared=64", 0.0).cold  # nobody carries it


@pytest.mark.parametrize(
    ("text", "hit_rate", "mention"),
    [
        ("warm", 1.0, "--prefix"),
        ("shared", 1.0, "--prefix"),
        ("shared=0", 1.0, "--prefix"),
        ("shared=-4", 1.0, "--prefix"),
        ("shared=1.5", 1.0, "--prefix"),
        ("cold", -0.1, "--prefix-hit-rate"),
        ("shared=8", 1.5, "--prefix-hit-rate"),
        ("shared=8", math.nan, "--prefix-hit-rate"),
    ],
)
def test_prefix_scenario_rejects(text: str, hit_rate: float, mention: str) -> None:
    with pytest.raises(BadInputError) as exc:
        PrefixScenario.parse(text, hit_rate)
    _one_line(exc, mention)


def test_arrivals_labels() -> None:
    assert Arrivals(rate_per_s=4.0).label == "4 req/s"
    assert Arrivals(rate_per_s=2.5, cv=3.0).label == "2.5 req/s, gamma CV 3"
    assert Arrivals(concurrency=8).label == "concurrency 8"
    assert Arrivals(concurrency=2).model_dump(mode="json") == {
        "rate_per_s": None,
        "concurrency": 2,
        "cv": 1.0,
        "speed": None,
    }


@pytest.mark.parametrize(
    ("kwargs", "mention"),
    [
        ({}, "a rate, a concurrency or a trace speed"),
        ({"rate_per_s": 1.0, "concurrency": 2}, "a rate, a concurrency or a trace speed"),
        ({"rate_per_s": 0.0}, "--rate"),
        ({"rate_per_s": -1.0}, "--rate"),
        ({"rate_per_s": math.inf}, "--rate"),
        ({"rate_per_s": math.nan}, "--rate"),
        ({"concurrency": 0}, "--concurrency"),
        ({"concurrency": -3}, "--concurrency"),
        ({"rate_per_s": 1.0, "cv": 0.0}, "--burstiness"),
        ({"rate_per_s": 1.0, "cv": -1.0}, "--burstiness"),
        ({"rate_per_s": 1.0, "cv": math.inf}, "--burstiness"),
        ({"rate_per_s": 1.0, "cv": math.nan}, "--burstiness"),
    ],
)
def test_arrivals_rejects(kwargs: dict[str, Any], mention: str) -> None:
    with pytest.raises(BadInputError) as exc:
        Arrivals(**kwargs)
    _one_line(exc, mention)


# -- build_requests --------------------------------------------------------------------------


def _prompts(requests: list[Any]) -> list[str]:
    return [r.prompt for r in requests]


def test_same_seed_same_prompts_other_offset_other_prompts() -> None:
    workload = Workload(input_tokens=Lengths(16, 32), output_tokens=Lengths(4, 8), seed=7)
    rate = Arrivals(rate_per_s=5.0)
    first = build_requests(workload, rate, 20)
    again = build_requests(workload, rate, 20)
    assert first == again
    other = build_requests(workload, rate, 20, seed_offset=1_000_003)
    assert set(_prompts(first)).isdisjoint(_prompts(other))
    reseeded = build_requests(Workload(input_tokens=Lengths(16, 32), seed=8), rate, 20)
    assert _prompts(reseeded) != _prompts(first)
    assert [r.index for r in first] == list(range(20))
    assert all(4 <= r.max_tokens <= 8 for r in first)
    assert {r.max_tokens for r in first} != {first[0].max_tokens}  # a range, sampled


def test_open_loop_requests_carry_increasing_arrivals_closed_loop_none() -> None:
    workload = Workload(seed=3)
    opened = build_requests(workload, Arrivals(rate_per_s=50.0), 200)
    offsets = [r.scheduled_s for r in opened]
    assert all(isinstance(t, float) for t in offsets)
    assert offsets == sorted(offsets)  # type: ignore[type-var]
    assert 200 / offsets[-1] == pytest.approx(50.0, rel=0.25)  # type: ignore[operator]
    closed = build_requests(workload, Arrivals(concurrency=4), 10)
    assert [r.scheduled_s for r in closed] == [None] * 10


def test_without_a_tokenizer_a_word_stands_for_a_token() -> None:
    requests = build_requests(
        Workload(input_tokens=Lengths(24, 24), seed=1), Arrivals(concurrency=1), 5
    )
    for request in requests:
        assert len(request.prompt.split()) == 24
        assert request.prompt_tokens is None


def test_build_requests_needs_one_request() -> None:
    with pytest.raises(BadInputError) as exc:
        build_requests(Workload(), Arrivals(concurrency=1), 0)
    _one_line(exc, "--requests")


@pytest.mark.parametrize("length", [2, 7, 50, 200])
def test_exact_prompt_token_counts_with_a_tokenizer(tokenizer: Any, length: int) -> None:
    workload = Workload(input_tokens=Lengths(length, length), seed=11)
    for request in build_requests(workload, Arrivals(concurrency=1), 10, tokenizer=tokenizer):
        ids = tokenizer.encode(request.prompt, add_special_tokens=False)
        assert len(ids) == length, request.prompt
        assert request.prompt_tokens == length


def test_a_one_token_prompt_is_never_empty(tokenizer: Any) -> None:
    """With the test tokenizer a word starts with a bare "▁" piece, which decodes to nothing:
    cutting at 1 token must not send an empty prompt (servers refuse one). Where no cut of
    the words is exactly 1 token, the prompt says how many it has."""
    workload = Workload(input_tokens=Lengths(1, 1), seed=11)
    for request in build_requests(workload, Arrivals(concurrency=1), 10, tokenizer=tokenizer):
        assert request.prompt.strip(), request
        count = len(tokenizer.encode(request.prompt, add_special_tokens=False))
        assert request.prompt_tokens == count >= 1


def _common_prefix(sequences: list[list[Any]]) -> int:
    n = 0
    for column in zip(*sequences, strict=False):
        if len(set(column)) != 1:
            break
        n += 1
    return n


def test_shared_prefix_at_hit_rate_one_is_exactly_p_tokens(tokenizer: Any) -> None:
    shared = 40
    workload = Workload(input_tokens=Lengths(100, 100), prefix=PrefixScenario(shared, 1.0), seed=5)
    requests = build_requests(workload, Arrivals(concurrency=1), 12, tokenizer=tokenizer)
    encoded = [tokenizer.encode(r.prompt, add_special_tokens=False) for r in requests]
    assert _common_prefix(encoded) == shared
    assert all(len(ids) == 100 for ids in encoded)
    assert all(r.prompt_tokens == 100 for r in requests)


def test_shared_prefix_without_a_tokenizer_is_p_words() -> None:
    shared = 16
    workload = Workload(input_tokens=Lengths(64, 64), prefix=PrefixScenario(shared, 1.0), seed=9)
    words = [r.prompt.split() for r in build_requests(workload, Arrivals(concurrency=1), 20)]
    assert _common_prefix(words) == shared
    assert all(len(w) == 64 for w in words)


def test_shared_prefix_at_half_hit_rate_about_half_carry_it() -> None:
    shared = 16
    workload = Workload(input_tokens=Lengths(48, 48), prefix=PrefixScenario(shared, 0.5), seed=2)
    words = [r.prompt.split() for r in build_requests(workload, Arrivals(concurrency=1), 400)]
    carried = build_requests(
        Workload(input_tokens=Lengths(48, 48), prefix=PrefixScenario(shared, 1.0), seed=2),
        Arrivals(concurrency=1),
        1,
    )[0].prompt.split()[:shared]
    with_prefix = sum(1 for w in words if w[:shared] == carried)
    assert 160 <= with_prefix <= 240  # binomial(400, 0.5): 200 +- 4 sigma


def test_cold_prompts_share_no_eight_word_prefix() -> None:
    workload = Workload(input_tokens=Lengths(32, 32), prefix=PrefixScenario(), seed=4)
    heads = [
        tuple(r.prompt.split()[:8]) for r in build_requests(workload, Arrivals(concurrency=1), 300)
    ]
    assert len(set(heads)) == len(heads)


def test_prompts_file_requests_come_from_the_file(tmp_path: Path, tokenizer: Any) -> None:
    prompts = (("first prompt here", 5), ("second one", None))
    workload = Workload(prompts=prompts, output_tokens=Lengths(9, 9), seed=1)
    requests = build_requests(workload, Arrivals(concurrency=1), 30, tokenizer=tokenizer)
    assert {r.prompt for r in requests} == {"first prompt here", "second one"}
    for request in requests:
        assert request.max_tokens == (5 if request.prompt.startswith("first") else 9)
        assert request.prompt_tokens == len(
            tokenizer.encode(request.prompt, add_special_tokens=False)
        )
    assert workload.summary().model_dump(mode="json")["prompts_count"] == 2
    assert workload.summary().model_dump(mode="json")["input_tokens"] is None


# -- read_prompts ----------------------------------------------------------------------------


def _file(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "prompts.jsonl"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_read_prompts_good_file(tmp_path: Path) -> None:
    lines = [
        json.dumps({"prompt": "hello there", "max_tokens": 5}),
        "",
        json.dumps({"prompt": "ünïcode ✓", "other": 1}),
        "   ",
    ]
    path = _file(tmp_path, "\n".join(lines) + "\n")
    assert read_prompts(path) == (("hello there", 5), ("ünïcode ✓", None))


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("", ["prompts file is empty"]),
        ("\n  \n", ["prompts file is empty"]),
        ('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": oops}\n', [":3:", "not JSON"]),
        ('{"prompt": "a"}\n{"text": "b"}\n', [":2:", '"prompt"']),
        ('{"prompt": ""}\n', [":1:", '"prompt"']),
        ('{"prompt": 5}\n', [":1:", '"prompt"']),
        ('["a", "b"]\n', [":1:", '"prompt"']),
        ('{"prompt": "a", "max_tokens": 0}\n', [":1:", '"max_tokens"']),
        ('{"prompt": "a", "max_tokens": -3}\n', [":1:", '"max_tokens"']),
        ('{"prompt": "a", "max_tokens": 1.5}\n', [":1:", '"max_tokens"']),
        ('{"prompt": "a", "max_tokens": "5"}\n', [":1:", '"max_tokens"']),
        ('{"prompt": "a", "max_tokens": true}\n', [":1:", '"max_tokens"']),
        (b"\xff\xfe not utf-8\n", ["cannot read"]),
    ],
)
def test_read_prompts_rejects(tmp_path: Path, text: str | bytes, mentions: list[str]) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(BadInputError) as exc:
        read_prompts(path)
    _one_line(exc, str(path), *mentions)


def test_read_prompts_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError) as exc:
        read_prompts(tmp_path / "nope.jsonl")
    _one_line(exc, "nope.jsonl", "no such prompts file")


# -- capacity search -------------------------------------------------------------------------


def _summary(
    passed: bool,
    *,
    completed: int = 50,
    client_bound: bool = False,
    state: SloState | None = None,
    why: str | None = None,
) -> TrialSummary:
    """A trial of 50 requests whose TTFT term is met (``passed``) or missed, unless ``state``
    and ``why`` say otherwise."""
    state = state or ("met" if passed else "missed")
    if why is None:
        why = "" if passed else "9 of 50 over 500 ms (more than 1%)"
    lag = 0.2 if client_bound else 0.001
    term = SloTerm(bound_s=0.5, over=0 if passed else 9, n=50, state=state, why=why)
    return TrialSummary(
        requests=50,
        completed=completed,
        errors=50 - completed,
        client_bound=client_bound,
        client_lag_s=ClientLag(p50=lag, p99=lag, max=lag, limit=0.05),
        slo=SloVerdict(ttft_s=0.5, terms={"ttft_s": term}, met=passed),
    )


class ScriptedServer:
    """Passes every trial at a load up to ``limit`` (and fails the loads in ``noisy``)."""

    def __init__(self, limit: float, noisy: tuple[float, ...] = ()) -> None:
        self.limit = limit
        self.noisy = noisy
        self.loads: list[float] = []

    def __call__(self, load: float) -> TrialSummary:
        self.loads.append(load)
        return _summary(load <= self.limit and load not in self.noisy)


def test_capacity_is_the_highest_measured_passing_rate() -> None:
    server = ScriptedServer(6.3)
    result = search_capacity(server, start=1.0, max_trials=12, rel_tolerance=0.1)
    passing = [p.load for p in result.points if p.passed]
    failing = [p.load for p in result.points if not p.passed]
    assert result.capacity == max(passing)  # measured, never interpolated
    assert result.capacity in server.loads
    assert result.capacity <= 6.3 < min(failing)
    assert min(failing) / result.capacity <= 1.1  # the bracket closed within the tolerance
    assert result.unit == "req/s" and result.stopped == ""
    assert server.loads[:4] == [1.0, 2.0, 4.0, 8.0]  # doubling until the first failure
    assert all(p.passed == (p.load <= 6.3) for p in result.points)
    assert all(p.why for p in result.points if not p.passed)


def test_capacity_with_a_noisy_failure_below_the_limit() -> None:
    server = ScriptedServer(6.3, noisy=(4.0,))
    result = search_capacity(server, start=1.0, max_trials=12)
    passing = [p.load for p in result.points if p.passed]
    assert result.capacity == max(passing)
    assert 2.0 < result.capacity < 4.0  # bisected below the failure it measured


def test_capacity_in_concurrency_is_an_integer() -> None:
    server = ScriptedServer(6.3)
    result = search_capacity(server, start=1.0, integer=True, unit="concurrency", max_trials=12)
    assert all(float(load).is_integer() for load in server.loads)
    assert result.capacity == 6.0
    assert 7.0 in server.loads and not result.points[server.loads.index(7.0)].passed
    assert result.unit == "concurrency"
    assert len(set(server.loads)) == len(server.loads)  # no load tried twice


def test_budget_exhausted_before_any_failure_is_reported() -> None:
    server = ScriptedServer(100.0)
    result = search_capacity(server, start=1.0, max_trials=3)
    assert server.loads == [1.0, 2.0, 4.0]
    assert result.capacity == 4.0
    assert "budget (3)" in result.stopped


def test_budget_exhausted_while_bisecting_is_reported() -> None:
    """1, 2, 4 pass, 8 fails, 5.66 passes: the bracket 5.66..8 is still wider than the
    tolerance when the 5 trials are spent; the result must say so, not look converged."""
    server = ScriptedServer(6.3)
    result = search_capacity(server, start=1.0, max_trials=5, rel_tolerance=0.1)
    assert len(result.points) == 5
    assert result.capacity == pytest.approx(math.sqrt(32.0))
    assert "budget" in result.stopped, result.stopped


def test_nothing_passes_capacity_none() -> None:
    server = ScriptedServer(0.0)
    result = search_capacity(server, start=1.0, max_trials=20)
    assert result.capacity is None
    assert "no load down to" in result.stopped and "met the SLO" in result.stopped
    assert min(server.loads) == 1.0 / 8.0  # stops at the floor: three halvings
    concurrency = search_capacity(ScriptedServer(0.0), start=1.0, integer=True)
    assert concurrency.capacity is None and len(concurrency.points) == 1
    assert "no load down to 1" in concurrency.stopped


def test_nothing_passes_within_the_budget() -> None:
    result = search_capacity(ScriptedServer(0.0), start=1.0, max_trials=2)
    assert result.capacity is None and len(result.points) == 2
    assert result.stopped  # says why there is no capacity


@pytest.mark.parametrize(
    ("start", "trials"), [(0.0, 8), (-1.0, 8), (math.inf, 8), (math.nan, 8), (1.0, 0)]
)
def test_capacity_rejects_bad_settings(start: float, trials: int) -> None:
    with pytest.raises(BadInputError) as exc:
        search_capacity(ScriptedServer(1.0), start=start, max_trials=trials)
    _one_line(exc, "capacity search")


def test_trial_passes() -> None:
    assert trial_passes(_summary(True)) == (True, "")
    passed, why = trial_passes(_summary(False))
    assert not passed and why.startswith("TTFT: 9 of 50")
    passed, why = trial_passes(_summary(True, client_bound=True))
    assert not passed and "client-bound" in why and "200 ms" in why
    assert trial_passes(_summary(True, completed=0)) == (False, "no request completed")
    no_slo = TrialSummary(requests=3, completed=3, errors=0, client_bound=False)
    assert trial_passes(no_slo) == (False, "no SLO")
    unclaimed = _summary(True, state="unclaimed", why="not enough (3 < 44)")
    assert trial_passes(unclaimed) == (False, "TTFT: not enough (3 < 44)")


# -- decode floor ----------------------------------------------------------------------------


def _shape(tied: bool = False) -> ModelShape:
    return ModelShape(
        model_type="llama",
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=16,
        intermediate=128,
        vocab=400,
        tied_embeddings=tied,
        gated_mlp=True,
    )


# attention per layer: q 64*4*16 + k,v 2*64*2*16 + o 4*16*64 = 12288; two layers 24576
# gated MLP: 3 * 64 * 128 = 24576 per layer, 49152; norms (2*2 + 1) * 64 = 320
# output projection 400 * 64 = 25600 (tied: the embedding table, read whole)
ACTIVE = 24576 + 49152 + 320 + 25600
KV_VALUES = 2 * 2 * 2 * 16  # K and V, layers, KV heads, head dim


def _decoding(first: float, end: float, **extra: Any) -> RequestRecord:
    return RequestRecord(
        index=0, scheduled_s=0.0, sent_s=0.0, first_token_s=first, end_s=end, **extra
    )


RECORDS = [
    _decoding(0.0, 1.0),  # 1.0 s inside [0, 1]
    _decoding(0.5, 1.5),  # 0.5 s
    _decoding(0.2, 0.7),  # 0.5 s
    _decoding(0.0, 1.0, error="HTTP 500"),  # not counted
    _decoding(0.0, 1.0, cancelled=True),  # not counted
    RequestRecord(index=1, scheduled_s=0.0, sent_s=0.0, end_s=1.0),  # no token: not counted
]


def _floor_summary(tpot: float | None, ttft: float | None = None) -> TrialSummary:
    metrics = Metrics(
        tpot_s=Distribution(n=1, p50=tpot) if tpot else Distribution(),
        ttft_s=Distribution(n=1, p50=ttft) if ttft else Distribution(),
    )
    return TrialSummary(
        requests=len(RECORDS),
        completed=3,
        errors=1,
        window=Window(start_s=0.0, end_s=1.0, length_s=1.0, requests=len(RECORDS)),
        tokens=TokenStats(prompt_mean=100.0, output_mean=50.0),
        metrics=metrics,
    )


@pytest.mark.parametrize("tied", [False, True])
def test_read_bytes_per_step_by_hand(tied: bool) -> None:
    weights, active = read_bytes_per_step(_shape(tied), 2.0)
    assert active == ACTIVE and weights == 2.0 * ACTIVE
    assert _shape(tied).kv_values_per_token() == KV_VALUES


def test_decoding_batch_by_hand() -> None:
    assert decoding_batch(RECORDS, 0.0, 1.0) == pytest.approx(2.0)
    assert decoding_batch(RECORDS, 0.5, 1.0) == pytest.approx((0.5 + 0.5 + 0.2) / 0.5)
    assert decoding_batch(RECORDS, 1.0, 1.0) == 0.0


def test_decode_floor_bandwidth_bound_by_hand() -> None:
    bandwidth = 1e9
    context = 100.0 + 50.0 / 2
    step = 2.0 * ACTIVE + 2.0 * context * KV_VALUES * 2.0
    floor_s = step / bandwidth
    measured = floor_s / 0.8
    found = decode_floor(
        _shape(),
        weight_bytes=2.0,
        kv_bytes=2.0,
        bandwidth_bytes_per_s=bandwidth,
        bandwidth_source="--bandwidth (given)",
        records=RECORDS,
        summary=_floor_summary(measured, ttft=0.001),
        peak_flops_per_s=1e12,
        peak_source="--peak-flops (given)",
    )
    assert found.weights_read_bytes == 2.0 * ACTIVE
    assert found.active_parameters == ACTIVE
    assert found.kv_bytes_per_token == KV_VALUES * 2.0
    assert found.decode_batch_mean == pytest.approx(2.0)
    assert found.context_mean_tokens == context
    assert found.tpot_floor_s == pytest.approx(floor_s)
    assert found.tpot_measured_p50_s == measured
    assert found.decode_efficiency == pytest.approx(0.8)
    assert EFFICIENT <= 0.8
    assert found.bound.startswith("memory-bandwidth bound")
    assert found.bandwidth_source == "--bandwidth (given)" and found.estimated is True
    assert found.ttft_floor_s == pytest.approx(2.0 * ACTIVE * 100.0 / 1e12)
    assert found.prefill_efficiency == pytest.approx(found.ttft_floor_s / 0.001)
    assert found.peak_source == "--peak-flops (given)"
    assert "2.00" in found.notes[1]
    json.dumps(found.model_dump(mode="json"))  # JSON-ready


def test_decode_floor_overhead_bound_and_batch_at_least_one() -> None:
    lone = [_decoding(0.0, 0.25)]  # a quarter of the window: batch 0.25, floored at 1
    context = 125.0
    step = 1.0 * ACTIVE + 1.0 * context * KV_VALUES * 1.0
    floor_s = step / 2e9
    found = decode_floor(
        _shape(tied=True),
        weight_bytes=1.0,
        kv_bytes=1.0,
        bandwidth_bytes_per_s=2e9,
        bandwidth_source="catalog",
        records=lone,
        summary=_floor_summary(floor_s * 20),
    )
    assert found.decode_batch_mean == pytest.approx(0.25)
    assert found.tpot_floor_s == pytest.approx(floor_s)
    assert found.decode_efficiency == pytest.approx(0.05)
    assert found.bound.startswith("20.0x above the decode floor")
    assert found.ttft_floor_s is None  # no peak given: no TTFT floor


def test_decode_floor_without_tpot_is_not_measured() -> None:
    found = decode_floor(
        _shape(),
        weight_bytes=2.0,
        kv_bytes=2.0,
        bandwidth_bytes_per_s=1e9,
        bandwidth_source="x",
        records=RECORDS,
        summary=_floor_summary(None),
    )
    assert found.decode_efficiency is None
    assert found.bound.startswith("not measured")
    assert found.tpot_floor_s > 0
