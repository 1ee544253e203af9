"""Traffic inputs: constant, hourly profile, rate trace, request trace; bad files exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.traffic import load_traffic, parse_traffic_text
from accelscope.testing import CliRunner, assert_one_line_error

DAY = 86400


def _hourly(rates: list[float], header: bool = True) -> str:
    rows = [f"{h},{r}" for h, r in enumerate(rates)]
    return "\n".join((["hour,qps"] if header else []) + rows) + "\n"


def test_constant_traffic_forms() -> None:
    for spec in ("peak=300qps", "300qps", "300", "constant=0.3k", "peak=300/s"):
        traffic = load_traffic(spec)
        assert traffic.peak_qps == pytest.approx(300)
        assert traffic.hourly_qps == pytest.approx([300.0] * 24)


def test_hourly_profile_with_and_without_header(tmp_path: Path) -> None:
    rates = [float(10 * h) for h in range(24)]
    for header in (True, False):
        path = tmp_path / f"h{header}.csv"
        path.write_text(_hourly(rates, header), encoding="utf-8")
        traffic = load_traffic(str(path))
        assert traffic.hourly_qps == tuple(rates) and traffic.peak_qps == 230.0


def test_rate_trace_is_time_weighted_per_hour_of_day() -> None:
    # two days sampled every 30 min: 100 qps in hour 9 of each day, 10 qps otherwise
    rows = ["timestamp,qps"]
    for day in range(2):
        for half in range(48):
            t = day * DAY + half * 1800
            rows.append(f"{t},{100 if half // 2 == 9 else 10}")
    traffic = parse_traffic_text("\n".join(rows), "t.csv")
    assert traffic.hourly_qps[9] == pytest.approx(100) and traffic.hourly_qps[3] == pytest.approx(
        10
    )
    assert traffic.peak_qps == 100 and not traffic.notes


def test_iso_timestamps_and_a_short_trace_note() -> None:
    text = "timestamp,qps\n2026-01-01T10:00:00,5\n2026-01-01T10:10:00,15\n2026-01-01T10:20:00,10\n"
    traffic = parse_traffic_text(text, "short.csv")
    assert traffic.peak_qps == 15 and "covers" in traffic.notes[0]
    assert traffic.hourly_qps[0] == pytest.approx(10)  # mean, assumed all day


def test_request_trace_gives_hourly_rates_and_a_60s_peak() -> None:
    stamps = []
    for hour in range(24):  # one request per 10 s, and a burst of 600 in one minute at 12:00
        stamps += [hour * 3600 + 10 * i for i in range(360)]
    stamps += [12 * 3600 + 0.1 * i for i in range(600)]
    stamps.sort()
    traffic = parse_traffic_text("timestamp\n" + "\n".join(map(str, stamps)), "req.csv")
    assert traffic.hourly_qps[5] == pytest.approx(0.1)
    assert traffic.hourly_qps[12] == pytest.approx((360 + 600) / 3600)
    assert traffic.peak_qps == pytest.approx((600 + 6) / 60)
    # requests in the same instant are legitimate in a per-request trace
    assert parse_traffic_text("1\n1\n2\n", "same.csv").peak_qps > 0


BAD = {
    "empty": ("", "empty"),
    "only comments": ("# nothing\n\n", "empty"),
    "header only": ("timestamp,qps\n", "no data rows"),
    "unsorted": ("timestamp,qps\n10,1\n5,2\n20,3\n", "line 3: timestamps are not sorted"),
    "duplicate": ("timestamp,qps\n10,1\n10,2\n20,3\n", "line 3: duplicate timestamp"),
    "negative": (
        "timestamp,qps\n10,1\n20,-2\n",
        "line 3: field 'qps': must be a non-negative rate, got '-2'",
    ),
    "non-numeric": (
        "timestamp,qps\n10,1\n20,lots\n",
        "line 3: field 'qps': must be a number, got 'lots'",
    ),
    "bad timestamp": (
        "timestamp,qps\n10,1\nyesterday,2\n",
        "line 3: field 'timestamp': must be Unix seconds or ISO-8601, got 'yesterday'",
    ),
    "earliest bad cell": ("timestamp,qps\n10,1\n20,x\nnow,2\n", "line 3: field 'qps'"),
    "bad hour": (_hourly([1.0] * 24).replace("\n7,1.0", "\n7.5,1.0"), "field 'hour'"),
    "missing hour": (_hourly([1.0] * 24).replace("\n7,1.0", ""), "missing 7"),
    "duplicate hour": ("hour,qps\n" + "0,1\n" * 24, "duplicate hour 0"),
    "ragged": ("timestamp,qps\n10,1\n20,2,3\n", "same 1 (timestamp) or 2"),
    "all zero": (_hourly([0.0] * 24), "every rate is zero"),
    "unsorted requests": ("5\n3\n9\n", "line 2: timestamps are not sorted"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_traffic_file_is_one_line_exit_2(case: str, tmp_path: Path, cli: CliRunner) -> None:
    text, expected = BAD[case]
    path = tmp_path / "traffic.csv"
    path.write_text(text, encoding="utf-8")
    code, out, err = cli(
        "plan",
        "--traffic",
        path,
        "--sla-p99",
        "100ms",
        "--model",
        "m",
        "--capacity",
        "5",
        "--store",
        tmp_path / "r.db",
    )
    assert out == ""
    assert_one_line_error(code, err, expected)
    assert err.startswith(f"error: traffic file {path}"), err
    assert not (tmp_path / "r.db").exists()


def test_bad_traffic_specs() -> None:
    for spec, match in (
        ("peak=fast", "not understood"),
        ("peak=-3qps", "not understood"),
        ("nowhere.csv", "no such file"),
        ("peak=0", "positive"),
    ):
        with pytest.raises(BadInputError, match=match):
            load_traffic(spec)
