"""Traffic: a 24-hour profile of request rates (queries/s) and the peak to size a fleet for.

Three inputs (``--traffic``): a constant (``peak=300qps``), an hourly profile file (24 rows
``hour,qps``), or a trace file (``timestamp,qps`` rows, or one ``timestamp`` per request).
Timestamps are Unix seconds or ISO-8601; hours of the day are in the timestamps' own clock
(UTC for Unix seconds). A file's columns are validated with pydantic (``hour``, ``timestamp``,
``qps``); every malformed file is one error line naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from accelscope.errors import BadInputError
from accelscope.plan.quantities import parse_rate_per_s
from accelscope.validation import NonNegativeNumber, first_problem

__all__ = ["HOURS", "Traffic", "constant_traffic", "load_traffic", "parse_traffic_text"]

HOURS = 24
PEAK_BIN_S = 60.0
"""A per-request trace's peak is its busiest 60-second window (requests / 60 s)."""
_MAX_BYTES = 512 * 1024 * 1024


class Traffic(BaseModel):
    """Mean request rate for each hour of the day, and the peak rate to provision for.

    ``peak_qps`` is at least the largest hourly mean: a trace's short bursts can exceed it.
    """

    model_config = ConfigDict(frozen=True)

    hourly_qps: tuple[NonNegativeNumber, ...] = Field(min_length=HOURS, max_length=HOURS)
    peak_qps: NonNegativeNumber
    description: str
    notes: tuple[str, ...] = ()

    @property
    def mean_qps(self) -> float:
        """Mean rate over the day."""
        return math.fsum(self.hourly_qps) / HOURS

    @property
    def requests_per_day(self) -> float:
        """Requests in one day at the hourly means."""
        return math.fsum(self.hourly_qps) * 3600.0


def constant_traffic(qps: float, description: str | None = None) -> Traffic:
    """The same rate all day."""
    return Traffic(
        hourly_qps=(qps,) * HOURS, peak_qps=qps, description=description or f"constant {qps:g} qps"
    )


def hourly_traffic(hourly_qps: Sequence[float], description: str) -> Traffic:
    """A 24-hour profile; the peak is its busiest hour."""
    return Traffic(hourly_qps=tuple(hourly_qps), peak_qps=max(hourly_qps), description=description)


def _finite(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {text!r}")
    return value


def _hour(text: Any) -> int:
    value = _finite(text)
    if not value.is_integer() or not 0 <= value < HOURS:
        raise ValueError(f"must be a whole hour 0-23, got {text!r}")
    return int(value)


def _rate(text: Any) -> float:
    value = _finite(text)
    if value < 0:
        raise ValueError(f"must be a non-negative rate, got {text!r}")
    return value


def _timestamp(text: Any) -> float:
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"must be a finite number of Unix seconds, got {text!r}")
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"must be Unix seconds or ISO-8601, got {text!r}") from None
    if moment.tzinfo is None:  # naive: keep its wall clock for the hour of day
        return (moment - datetime(1970, 1, 1)).total_seconds()
    return moment.timestamp()


_HOUR = TypeAdapter(list[Annotated[int, BeforeValidator(_hour)]])
_RATE = TypeAdapter(list[Annotated[float, BeforeValidator(_rate)]])
_TIMESTAMP = TypeAdapter(list[Annotated[float, BeforeValidator(_timestamp)]])
"""A file's columns, validated a column at a time (a trace can hold millions of rows)."""


class _File:
    """Error context: every problem names the file (and the line where there is one)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, problem: str, line: int | None = None) -> BadInputError:
        where = f" line {line}" if line is not None else ""
        return BadInputError(f"traffic file {self.name}{where}: {problem}")

    def columns(
        self, rows: list[tuple[int, list[str]]], *fields: tuple[str, TypeAdapter[list[Any]]]
    ) -> list[list[Any]]:
        """The values of each named column of ``rows``; the bad cell on the earliest line is
        the error (naming its line and field)."""
        found: list[list[Any]] = []
        worst: tuple[int, str, str] | None = None
        for column, (field, adapter) in enumerate(fields):
            try:
                found.append(adapter.validate_python([cells[column] for _, cells in rows]))
            except ValidationError as exc:
                loc, problem, _ = first_problem(exc)
                row = int(loc[0])
                if worst is None or row < worst[0]:
                    worst = (row, field, problem)
        if worst is not None:
            row, field, problem = worst
            raise self.fail(f"field {field!r}: {problem}", rows[row][0])
        return found


def _rows(text: str, source: _File) -> tuple[list[tuple[int, list[str]]], list[str] | None]:
    rows = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        rows.append((number, cells))
    if not rows:
        raise source.fail("empty (no data rows)")
    header = None
    first = rows[0][1]
    if all(not _looks_numeric(cell) and not _looks_iso(cell) for cell in first):
        header = [cell.lower() for cell in first]
        rows = rows[1:]
        if not rows:
            raise source.fail("has a header but no data rows")
    widths = {len(cells) for _, cells in rows}
    if len(widths) != 1 or widths.pop() not in (1, 2):
        bad = next(n for n, cells in rows if len(cells) != len(rows[0][1]) or len(cells) > 2)
        raise source.fail("every row needs the same 1 (timestamp) or 2 (time, qps) columns", bad)
    return rows, header


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _looks_iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _hourly(rows: list[tuple[int, list[str]]], source: _File) -> Traffic:
    hours, rates = source.columns(rows, ("hour", _HOUR), ("qps", _RATE))
    profile: dict[int, float] = {}
    for (line, _), hour, rate in zip(rows, hours, rates, strict=True):
        if hour in profile:
            raise source.fail(f"duplicate hour {hour}", line)
        profile[hour] = rate
    missing = [h for h in range(HOURS) if h not in profile]
    if missing:
        raise source.fail(f"an hourly profile needs all 24 hours; missing {missing[0]}")
    return hourly_traffic([profile[h] for h in range(HOURS)], f"hourly profile {source.name}")


def _check_order(times: list[tuple[int, float]], source: _File, *, strict: bool) -> None:
    for (_, before), (line, after) in itertools.pairwise(times):
        if after < before:
            raise source.fail("timestamps are not sorted (earlier than the row before)", line)
        if strict and after == before:
            raise source.fail("duplicate timestamp", line)


def _hour_of_day(t_s: float) -> int:
    return int(t_s // 3600) % HOURS


def _spread(start_s: float, end_s: float, weight: float, sums: list[float]) -> None:
    """Add ``weight`` per second of [start, end) to each hour-of-day bucket it overlaps."""
    t = start_s
    while t < end_s:
        boundary = (math.floor(t / 3600.0) + 1) * 3600.0
        stop = min(boundary, end_s)
        sums[_hour_of_day(t)] += weight * (stop - t)
        t = stop


def _from_coverage(
    rates: list[float],
    covered: list[float],
    peak: float,
    total: float,
    span_s: float,
    description: str,
) -> Traffic:
    if all(c > 0 for c in covered):
        hourly = tuple(r / c for r, c in zip(rates, covered, strict=True))
        return Traffic(hourly_qps=hourly, peak_qps=max(peak, *hourly), description=description)
    mean = total / span_s
    note = (
        f"the trace covers {span_s / 3600:.2g} h, not every hour of the day: its mean rate "
        f"({mean:.4g} qps) is assumed all day and its peak kept for sizing"
    )
    return Traffic(
        hourly_qps=(mean,) * HOURS,
        peak_qps=max(peak, mean),
        description=description,
        notes=(note,),
    )


def _rate_trace(rows: list[tuple[int, list[str]]], source: _File) -> Traffic:
    stamps, rates = source.columns(rows, ("timestamp", _TIMESTAMP), ("qps", _RATE))
    points = [(line, t, r) for (line, _), t, r in zip(rows, stamps, rates, strict=True)]
    if len(points) < 2:
        raise source.fail("a rate trace needs at least 2 rows (timestamp,qps)")
    _check_order([(line, t) for line, t, _ in points], source, strict=True)
    sums, covered = [0.0] * HOURS, [0.0] * HOURS
    total = 0.0
    for index, (_, t, rate) in enumerate(points):
        end = points[index + 1][1] if index + 1 < len(points) else t + (t - points[index - 1][1])
        _spread(t, end, rate, sums)
        _spread(t, end, 1.0, covered)
        total += rate * (end - t)
    span = points[-1][1] - points[0][1] + (points[-1][1] - points[-2][1])
    peak = max(rate for _, _, rate in points)
    return _from_coverage(
        sums, covered, peak, total, span, f"rate trace {source.name} ({len(points)} samples)"
    )


def _request_trace(rows: list[tuple[int, list[str]]], source: _File) -> Traffic:
    (stamps,) = source.columns(rows, ("timestamp", _TIMESTAMP))
    times = [(line, t) for (line, _), t in zip(rows, stamps, strict=True)]
    _check_order(times, source, strict=False)  # equal stamps: requests in the same instant
    if len(stamps) < 2 or stamps[-1] == stamps[0]:
        raise source.fail("a request trace needs requests spread over time (2+ distinct times)")
    counts, covered = [0.0] * HOURS, [0.0] * HOURS
    for t in stamps:
        counts[_hour_of_day(t)] += 1.0
    _spread(stamps[0], stamps[-1], 1.0, covered)
    window, busiest, start = PEAK_BIN_S, 0, 0
    for end, t in enumerate(stamps):  # busiest sliding 60 s window
        while t - stamps[start] >= window:
            start += 1
        busiest = max(busiest, end - start + 1)
    span = stamps[-1] - stamps[0]
    peak = busiest / min(window, span)
    return _from_coverage(
        counts,
        covered,
        peak,
        float(len(stamps)),
        span,
        f"request trace {source.name} ({len(stamps)} requests)",
    )


def parse_traffic_text(text: str, name: str) -> Traffic:
    """Parse a traffic file's text (``name`` appears in errors)."""
    source = _File(name)
    rows, header = _rows(text, source)
    if len(rows[0][1]) == 1:
        return _request_trace(rows, source)
    first = header[0] if header else ""
    hours_like = all(
        _looks_numeric(c[0]) and float(c[0]).is_integer() and 0 <= float(c[0]) < 24 for _, c in rows
    )
    if first.startswith("hour") or (not first and hours_like and len(rows) == HOURS):
        traffic = _hourly(rows, source)
    else:
        traffic = _rate_trace(rows, source)
    if traffic.peak_qps <= 0:
        raise source.fail("every rate is zero: nothing to serve")
    return traffic


def load_traffic(spec: str) -> Traffic:
    """``--traffic``: ``peak=300qps`` / ``300qps`` (constant) or the path of a CSV file."""
    text = spec.strip()
    if text.lower().startswith(("peak=", "constant=")):
        return constant_traffic(parse_rate_per_s(text.split("=", 1)[1], "traffic rate"))
    path = Path(text)
    if not path.exists():
        if _looks_numeric(text) or text[:1].isdigit():
            return constant_traffic(parse_rate_per_s(text, "traffic rate"))
        raise BadInputError(f"traffic {text!r}: no such file (or give a rate like peak=300qps)")
    if path.is_dir():
        raise BadInputError(f"traffic file {path}: is a directory")
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise BadInputError(f"traffic file {path}: larger than 512 MiB")
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"traffic file {path}: cannot read: {exc}") from None
    return parse_traffic_text(content, str(path))
