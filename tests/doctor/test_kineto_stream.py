"""The streaming trace reader (doctor/trace_stream.py) behind ``load_trace`` (doctor/kineto.py):
the trace it streams is the trace ``parse_trace`` gives from the whole document, on real H200
traces and on events of every odd shape, across any chunk boundary; its memory stays a few
chunks whatever the file's size; and a broken file (truncated gzip mid-stream, a bad token on
line N, a scalar document) is one line, exit 2.

Covers: accelscope.doctor.trace_stream, accelscope.doctor.kineto."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from test_device_timeline import TraceBuilder, launch_bound, steps, sync_bound

from accelscope.doctor.kineto import MAX_TRACE_BYTES, load_trace, parse_trace
from accelscope.doctor.trace_stream import TraceEvent, stream_trace
from accelscope.errors import BadInputError
from accelscope.testing import CliRunner, assert_one_line_error

TRACES = Path(__file__).resolve().parents[1] / "data" / "doctor-h200-traces"
REAL = [
    TRACES / "pageable_batches.trace.json.gz",
    TRACES / "archetypes" / "input_bound.json.gz",
    TRACES / "archetypes" / "memory_bound.json.gz",
    TRACES / "oneoff" / "cuda_graph.json.gz",
    TRACES / "oneoff" / "cudnn_autotune.json.gz",
]


def _document(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


def _fields(event: Any) -> Any:
    if not isinstance(event, dict):
        return event
    ts, dur = event.get("ts"), event.get("dur")
    return (
        event.get("ph", ""),
        event.get("name", ""),
        None if ts is None else float(ts),
        None if dur is None else float(dur),
    )


def _collect(path: Path, **kw: Any) -> tuple[list[Any], bool, dict[str, Any]]:
    """Every element streamed, as (how it came, the fields it holds)."""
    seen: list[Any] = []

    def typed(event: TraceEvent) -> None:
        seen.append(("typed", (event.ph, event.name, event.ts, event.dur)))

    def other(event: Any) -> None:
        seen.append(("other", _fields(event)))

    found, kept = stream_trace(path, typed, other, max_bytes=MAX_TRACE_BYTES, **kw)
    return seen, found, kept


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_streamed_real_trace_is_the_whole_document_trace(path: Path, tmp_path: Path) -> None:
    """Field by field: device intervals, host spans, steps, named events, device name."""
    document = _document(path)
    whole = parse_trace(document, source=str(path))
    streamed = load_trace(path)
    assert streamed == whole
    assert streamed.device_name == "NVIDIA H200"
    assert streamed.timelines() == whole.timelines()
    plain = tmp_path / "plain.json"  # the same trace uncompressed, pretty-printed (Kineto's own
    plain.write_text(json.dumps(document, indent=2))  # layout): the same trace again
    assert load_trace(plain) == parse_trace(document, source=str(plain))


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 1 << 16])
def test_every_element_arrives_once_in_order_across_chunk_boundaries(
    tmp_path: Path, chunk_bytes: int
) -> None:
    document = _document(TRACES / "archetypes" / "input_bound.json.gz")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document, indent=1))
    seen, found, kept = _collect(path, chunk_bytes=chunk_bytes, keep=frozenset({"schemaVersion"}))
    assert found and kept == {"schemaVersion": 1}
    assert [fields for _how, fields in seen] == [_fields(e) for e in document["traceEvents"]]
    typed = sum(how == "typed" for how, _fields in seen)
    if chunk_bytes >= 1000:  # chunks that hold whole events: nearly all come in typed runs
        assert typed >= 0.9 * len(seen), (typed, len(seen))


def _odd_events() -> list[Any]:
    """A real loop's events among events of every shape a writer might produce."""
    b = steps(TraceBuilder(), 4, launch_bound)
    odd: list[Any] = [
        {"ph": "X", "cat": "cpu_op", "name": 'x},{"ph": "X"}, {', "ts": 10, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "nested", "ts": 12, "dur": 1,
         "args": {"list": [{"a": 1}, {"b": 2}], "Input Dims": [[1, 2], []]}},
        {"ph": "X", "cat": "kernel", "name": 7, "ts": 20, "dur": 2, "pid": 0,
         "args": {"stream": "7", "correlation": "9"}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": True, "dur": 2},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 30.5, "dur": 2, "pid": 1.0, "tid": [1],
         "args": [1, 2]},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 40, "dur": 3,
         "pid": {"a": 1}, "args": {"correlation": 123456}},
        {"ph": "X", "cat": "kernel", "name": "big", "ts": 50, "dur": 1e300},
        {"ph": "X", "cat": "kernel", "name": "neg", "ts": 60, "dur": -1},
        {"ph": "X", "cat": "kernel", "name": "late", "ts": 1e400, "dur": 1},
        "not an event",
        17,
        None,
        [],
        {"ph": "i", "name": "instant", "ts": 5, "s": "g"},
    ]  # fmt: skip
    events: list[Any] = []
    for i, event in enumerate(b.document()["traceEvents"]):
        events.append(event)
        if i % 40 == 0:
            events.append(odd[(i // 40) % len(odd)])
    return events + odd


@pytest.mark.parametrize("chunk_bytes", [64, 300, 4096])
def test_events_of_any_shape_give_the_whole_document_trace(
    tmp_path: Path, chunk_bytes: int
) -> None:
    """Typed runs and element-by-element decoding meet in one accumulator: whatever mix of
    shapes, the streamed trace is parse_trace's (json.loads reads ``1e400`` as inf)."""
    events = _odd_events()
    document = {"traceEvents": events, "deviceProperties": [{"name": "NVIDIA H200"}]}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(document).replace("Infinity", "1e400"))
    parsed = json.loads(path.read_text())
    whole = parse_trace(parsed, source=str(path))
    assert whole.negative_durations >= 1 and whole.unrecorded_graph_launches
    seen, _found, _kept = _collect(path, chunk_bytes=chunk_bytes)
    assert any(s[0] == "other" for s in seen)
    if chunk_bytes >= 300:  # chunks that hold whole events: typed runs and single elements
        assert any(s[0] == "typed" for s in seen)
    assert load_trace(path) == whole
    (tmp_path / "list.json").write_text(json.dumps(events).replace("Infinity", "1e400"))
    assert load_trace(tmp_path / "list.json").device == whole.device  # a bare array of events


def test_memory_is_a_few_chunks_whatever_the_file_size(tmp_path: Path) -> None:
    """A 12 MB trace (mostly flow events and metadata nobody reads) streamed in 64 KiB
    chunks: Python's allocations peak at a small fraction of the file, where json.loads of
    the document allocates several times the file."""
    b = steps(TraceBuilder(), 3, sync_bound)
    filler = [
        {"ph": "f", "id": i, "pid": 1, "tid": 2, "ts": float(i), "cat": "ac2g", "name": "ac2g",
         "bp": "e", "args": {"pad": "x" * 200}}
        for i in range(45_000)
    ]  # fmt: skip
    document = b.document()
    document["traceEvents"] = document["traceEvents"] + filler
    path = tmp_path / "big.json"
    path.write_text(json.dumps(document))
    size = path.stat().st_size
    assert size > 10e6
    kept: list[int] = []
    tracemalloc.start()
    try:
        stream_trace(
            path,
            lambda e: kept.append(1),
            lambda e: kept.append(1),
            max_bytes=MAX_TRACE_BYTES,
            chunk_bytes=1 << 16,
        )
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == len(document["traceEvents"])
    assert peak < size / 20, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"


def _truncated_gz(path: Path, fraction: float) -> Path:
    """A big gzip trace cut at ``fraction`` of its compressed bytes (mid-stream: the reader
    has already taken many chunks of events when the stream ends)."""
    document = steps(TraceBuilder(), 400, launch_bound).document()
    blob = gzip.compress(json.dumps(document, indent=2).encode())
    path.write_bytes(blob[: int(len(blob) * fraction)])
    return path


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.999])
def test_truncated_gzip_mid_stream_is_one_line_exit_2(
    tmp_path: Path, cli: CliRunner, fraction: float
) -> None:
    path = _truncated_gz(tmp_path / "cut.pt.trace.json.gz", fraction)
    code, out, err = cli("doctor", "--trace", path)
    assert_one_line_error(code, err, "truncated", str(path))
    assert out == ""
    code, out, err = cli("doctor", "--trace", path, "--json")
    assert_one_line_error(code, err, "truncated")


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ('{"traceEvents": [{"ph": "X"},\n\n  {"ph": "X", "ts": 1 2}]}', "(line 3, column"),
        ('{"traceEvents": [{"ph": "X"}]} trailing', "extra data"),
        ('{"traceEvents": [{"ph": "X"}', "truncated or malformed JSON"),
        ('{"traceEvents": [{"ph": "X"}] "x": 1}', "truncated or malformed JSON"),
        ('"a JSON string"', "no traceEvents"),
        ("42", "no traceEvents"),
        ('{"traceEvents": {"ph": "X"}}', "no traceEvents"),
        ("", "not JSON"),
        ("ProfilerStep#2 took 14 ms", "not JSON (line 1, column 1)"),
    ],
)
def test_bad_documents_are_one_line(tmp_path: Path, text: str, mention: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(BadInputError, match=r"^trace .*bad\.json: ") as raised:
        load_trace(path)
    assert mention in str(raised.value) and "\n" not in str(raised.value)


def _ignore(_event: Any) -> None:
    pass


def test_error_line_is_counted_across_chunks(tmp_path: Path) -> None:
    """The line of a bad token deep in a file, after many refills of the buffer."""
    events = [json.dumps({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": i, "dur": 1})
              for i in range(5_000)]  # fmt: skip
    lines = ['{"traceEvents": [', *[e + "," for e in events], "{oops}", "]}"]
    path = tmp_path / "deep.json"
    path.write_text("\n".join(lines))
    with pytest.raises(BadInputError, match=r"\(line 5002, column 2\)"):
        stream_trace(path, _ignore, _ignore, max_bytes=MAX_TRACE_BYTES, chunk_bytes=4096)


def test_size_cap_counts_decompressed_bytes(tmp_path: Path) -> None:
    document = steps(TraceBuilder(), 3, launch_bound).document()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    with pytest.raises(BadInputError, match="larger than"):
        stream_trace(path, _ignore, _ignore, max_bytes=1000, chunk_bytes=512)


def test_reading_a_trace_imports_neither_torch_nor_the_script_runner() -> None:
    """``doctor --trace`` pays for the JSON it reads, not for importing torch or the doctor's
    script runner (a fresh interpreter: this one has imported everything already)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from accelscope.doctor.trace_diagnosis import diagnose_ranks\n"
        f"diagnose_ranks(Path({str(REAL[1])!r}))\n"
        "heavy = [m for m in ('torch', 'accelscope.doctor.diagnose') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
