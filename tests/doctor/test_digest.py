"""The digest of ``doctor --trace`` (``--format markdown``): on the real H200 traces it holds the
verdict, the top kernels with their precision and the quality flags in 40 lines or fewer per
rank; hostile kernel and file names cannot break its tables or inject HTML; the command line end
to end; and the ``--json`` document against its published schema
(docs/schema/doctor-trace.schema.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_device_timeline import TraceBuilder, device_bound, steps, sync_bound

from accelscope.commands.doctor.digest import (
    MAX_LINES_PER_RANK,
    markdown_digest,
    md_escape,
    rank_digest,
    short_kernel_name,
)
from accelscope.commands.doctor.trace_mode import TraceRequest, diagnose_trace, trace_title
from accelscope.testing import CliRunner, assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "data" / "doctor-h200-traces"
SCHEMA = REPO / "docs" / "schema" / "doctor-trace.schema.json"
HOSTILE_KERNEL = "void evil<int>(a|b) | <script>alert(1)</script> `rm -rf` [x](javascript:y) *em*"


def _digest(path: Path, **kw: Any) -> str:
    return markdown_digest(diagnose_trace(TraceRequest(path=path, **kw)), title=trace_title(path))


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _tables_hold(text: str) -> None:
    """Every table row has as many cell separators as its header."""
    columns = 0
    for line in text.splitlines():
        if not line.startswith("|"):
            columns = 0
            continue
        if columns == 0:
            columns = _unescaped_pipes(line)
        assert _unescaped_pipes(line) == columns, line


def _write(path: Path, body: Any, n: int = 3) -> Path:
    path.write_text(json.dumps(steps(TraceBuilder(), n, body).document()), encoding="utf-8")
    return path


# -- the real traces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trace",
    [
        "archetypes/tensor_core_bf16.json.gz",
        "archetypes/fp32_matmul.json.gz",
        "archetypes/memory_bound.json.gz",
        "archetypes/sync_bound.json.gz",
        "oneoff/compile_in_window.json.gz",
        "oneoff/cold_context.json.gz",
        "oneoff/one_step.json.gz",
        "oneoff/cuda_graph.json.gz",
    ],
)
def test_digest_of_a_real_trace_is_short_and_whole(trace: str) -> None:
    diagnosis = diagnose_trace(TraceRequest(path=H200 / trace, sm_active=0.55))
    (rank,) = diagnosis.ranks
    lines = rank_digest(rank)
    assert len(lines) <= MAX_LINES_PER_RANK
    text = markdown_digest(diagnosis, title=trace_title(H200 / trace))
    assert len(text.splitlines()) <= MAX_LINES_PER_RANK + 4  # title, blank, note
    assert f"bottleneck {rank.verdict.bottleneck}" in text
    assert "**Verdict**: " in text and "**Advice**: " in text
    assert "mean step" in text and "GPU busy" in text and "GPM SM active 55%" in text
    assert "| cause | share of step | per step |" in text
    if rank.kernels:
        assert "| top kernel | share of step | per step | class | precision |" in text
        assert len(rank.kernels) <= 5
    for flag in rank.quality.flags[:6]:
        assert md_escape(flag.message.replace("->", "\u2192")) in text
    _tables_hold(text)


def test_bf16_digest_shows_nvjet_kernels_in_reduced_precision() -> None:
    text = _digest(H200 / "archetypes" / "tensor_core_bf16.json.gz")
    rows = [line for line in text.splitlines() if line.startswith("| nvjet_")]
    assert len(rows) >= 2
    assert all(row.endswith("| matrix | reduced |") for row in rows)
    shares = [float(row.split("|")[2].strip().rstrip("%")) for row in rows]
    assert shares == sorted(shares, reverse=True) and shares[0] > 20


def test_fp32_digest_shows_fp32_matrix_kernels_with_short_names() -> None:
    text = _digest(H200 / "archetypes" / "fp32_matmul.json.gz")
    assert "| cutlass_80_simt_sgemm_256x128_8x4_nt_align1 |" in text
    assert "| matrix | fp32 |" in text
    assert "void " not in text and "Params" not in text


def test_compile_in_window_digest_holds_the_flags_and_the_steady_advice() -> None:
    diagnosis = diagnose_trace(TraceRequest(path=H200 / "oneoff" / "compile_in_window.json.gz"))
    (rank,) = diagnosis.ranks
    text = markdown_digest(diagnosis, title="t")
    assert {f.kind for f in rank.quality.flags} >= {"outlier_step", "one_off", "few_steps"}
    assert "**Window quality**" in text and "torch.compile / Inductor / Triton compilation" in text
    assert "2 steady of 3 steps" in text
    assert "**Then**: profile steady steps" in text
    # the kernels are those of the steady steps: the compile step's fill kernel is left out
    assert all(0 in rank.quality.excluded and k.share < 0.2 for k in rank.kernels)


def test_a_directory_of_ranks_has_a_rank_table_and_each_rank_within_bounds() -> None:
    diagnosis = diagnose_trace(TraceRequest(path=H200))
    text = markdown_digest(diagnosis, title=trace_title(H200))
    assert len(diagnosis.ranks) == 2
    assert "| rank | mean step | bottleneck | GPU busy |" in text and "(slowest)" in text
    for r in diagnosis.ranks:
        assert len(rank_digest(r)) <= MAX_LINES_PER_RANK
    assert text.count("\n## ") == 2
    assert "host\u2192device copies from pageable memory" in text  # arrows, not "-&gt;"
    _tables_hold(text)


# -- names and escaping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul>)",
            "vectorized_elementwise_kernel (CUDAFunctor_add)",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
            "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
            "MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> > const&)::"
            "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast)",
            "elementwise_kernel (MulFunctor)",
        ),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, "
            "float, 32u, 32u, 256u, false, true, false>(long, long, float const*, float*)",
            "GammaBetaBackwardCUDAKernelTemplate",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>("
            "cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)",
            "cutlass_80_simt_sgemm_256x128_8x4_nt_align1",
        ),
        (
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
        ),
        ("triton_poi_fused_gelu_0", "triton_poi_fused_gelu_0"),
        ("", ""),
    ],
)
def test_short_kernel_names(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def test_long_names_are_cut() -> None:
    name = "sm80_xmma_gemm_" + "f32" * 40
    short = short_kernel_name(name)
    assert len(short) <= 72 and short.endswith("\u2026") and short.startswith("sm80_xmma_gemm_")


def test_md_escape_makes_user_strings_inert() -> None:
    out = md_escape("a|b <img src=x onerror=alert(1)> `c` [l](javascript:x) *e* _u_ snake_case\nx")
    assert "<" not in out and ">" not in out and "\n" not in out
    assert _unescaped_pipes(out) == 0
    assert re.search(r"(?<!\\)`", out) is None
    assert "\\[l\\](javascript:x)" in out and "\\*e\\*" in out
    assert "\\_u\\_" in out and "snake_case" in out
    assert "&lt;img" in out


def test_a_hostile_kernel_and_file_name_cannot_break_the_tables(tmp_path: Path) -> None:
    def body(b: TraceBuilder, t0: float) -> None:
        b.kernel(t0 + 100, 4_700, name=HOSTILE_KERNEL)
        b.kernel(t0 + 4_850, 4_800, name="ampere_sgemm_128x64_nn | <b>x</b>")

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    _write(ranks / "rank|0 <script>`x`.json", body)
    _write(ranks / "rank1.json", device_bound)
    text = _digest(ranks)
    assert "<script" not in text and "<b>" not in text and "<img" not in text
    assert re.search(r"(?<!\\)`", text) is None
    assert "rank\\|0 &lt;script&gt;\\`x\\`" in text
    _tables_hold(text)
    kernel_rows = [line for line in text.splitlines() if "evil" in line or "ampere" in line]
    assert len(kernel_rows) == 2
    for row in kernel_rows:
        assert _unescaped_pipes(row) == 6, row  # 5 cells


# -- the command line --------------------------------------------------------------------------


def test_cli_prints_the_digest(tmp_path: Path, cli: CliRunner) -> None:
    trace = H200 / "oneoff" / "compile_in_window.json.gz"
    report = tmp_path / "r.html"
    code, out, err = cli("doctor", "--trace", trace, "--format", "markdown", "--report", report)
    assert code == 0, err
    assert out == _digest(trace)  # stdout is the digest alone
    assert out.startswith("# accelscope doctor --trace: compile_in_window.json.gz\n")
    assert f"report: {report}" in err
    html = report.read_text(encoding="utf-8")
    assert 'id="digest"' in html and "**Verdict**: " in html and "| top kernel |" in html


def test_cli_digest_in_the_html_report_is_escaped(tmp_path: Path, cli: CliRunner) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    _write(ranks / "rank0 <img src=x onerror=alert(1)>.json", sync_bound)
    report = tmp_path / "r.html"
    code, _, err = cli("doctor", "--trace", ranks, "--report", report)
    assert code == 0, err
    html = report.read_text(encoding="utf-8")
    digest = html.split('id="digest"', 1)[1]
    assert "<img" not in html and "&amp;lt;img src=x" in digest


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (["doctor", "train.py", "--format", "markdown"], "--format markdown is for --trace"),
        (["doctor", "--trace", "T", "--format", "markdown", "--json"], "not both"),
        (["doctor", "--trace", "T", "--format", "html"], "choose text or markdown"),
    ],
)
def test_cli_format_misuse_is_one_line_exit_2(
    tmp_path: Path, cli: CliRunner, args: list[str], mention: str
) -> None:
    trace = _write(tmp_path / "t.json", device_bound)
    code, out, err = cli(*[str(trace) if a == "T" else a for a in args])
    assert_one_line_error(code, err, mention)
    assert out == ""


def test_cli_text_format_is_the_terminal_view(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "t.json", device_bound)
    code, out, err = cli("doctor", "--trace", trace, "--format", "text")
    assert code == 0, err
    assert "bottleneck: compute" in out and "**Verdict**" not in out
    assert "top kernels (the steps judged)" in out and "gemm" in out


# -- the JSON schema ---------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


def _described(node: Any, where: str) -> list[str]:
    """The places in a schema where a property (or an item, or a map's value) has no
    description."""
    missing = []
    if isinstance(node, dict):
        if "type" in node and "description" not in node:
            missing.append(where)
        for name, sub in node.get("properties", {}).items():
            missing += _described(sub, f"{where}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                missing += _described(node[key], f"{where}.{key}")
        for i, sub in enumerate(node.get("prefixItems", [])):
            missing += _described(sub, f"{where}[{i}]")
    return missing


def _keys_in_schema(document: Any, schema: dict[str, Any], where: str) -> list[str]:
    """Keys of ``document`` the schema does not name (maps with ``additionalProperties``
    schemas excepted)."""
    missing: list[str] = []
    if isinstance(document, dict):
        properties = schema.get("properties")
        for key, value in document.items():
            if properties is not None and key in properties:
                missing += _keys_in_schema(value, properties[key], f"{where}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                missing += _keys_in_schema(value, schema["additionalProperties"], where)
            else:
                missing.append(f"{where}.{key}")
    elif isinstance(document, list) and isinstance(schema.get("items"), dict):
        for value in document:
            missing += _keys_in_schema(value, schema["items"], f"{where}[]")
    return missing


def test_the_schema_is_draft_2020_12_and_every_field_is_described() -> None:
    schema = _schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert _described(schema, "$") == []


@pytest.mark.parametrize(
    ("trace", "extra"),
    [
        ("oneoff/compile_in_window.json.gz", []),
        ("oneoff/one_step.json.gz", []),
        ("archetypes/tensor_core_bf16.json.gz", ["--sm-active", "0.55", "--gpu-util", "0.9"]),
        ("archetypes/underfilled_batch1.json.gz", ["--sm-active", "0.05"]),
        (".", []),
    ],
)
def test_real_json_documents_validate_against_the_schema(
    tmp_path: Path, cli: CliRunner, trace: str, extra: list[str]
) -> None:
    report = tmp_path / "r.html"
    code, out, err = cli("doctor", "--trace", H200 / trace, "--json", "--report", report, *extra)
    assert code == 0, err
    document = json.loads(out)
    schema = _schema()
    jsonschema.Draft202012Validator(schema).validate(document)
    assert _keys_in_schema(document, schema, "$") == []
    assert all(len(r["top_kernels"]) <= 5 for r in document["ranks"])


def test_a_document_with_a_key_the_schema_lacks_is_refused(tmp_path: Path, cli: CliRunner) -> None:
    trace = _write(tmp_path / "t.json", device_bound)
    code, out, err = cli("doctor", "--trace", trace, "--json")
    assert code == 0, err
    document = json.loads(out)
    document["ranks"][0]["verdict"]["undocumented"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_schema()).validate(document)


def test_the_docs_show_a_digest_and_the_command_that_made_it() -> None:
    doc = (REPO / "docs" / "doctor.md").read_text(encoding="utf-8")
    section = doc.split("## A digest an agent can read", 1)[1]
    command = "accelscope doctor --trace tests/data/doctor-h200-traces/oneoff/compile_in_window"
    assert command in section and "--format markdown" in section
    block = section.split("```markdown\n", 1)[1].split("\n```", 1)[0]
    assert block.startswith("# accelscope doctor --trace: compile")
    assert "**Verdict**" in block and "| top kernel |" in block and "**Window quality**" in block
    assert len(block.splitlines()) <= MAX_LINES_PER_RANK + 4
    assert "doctor-trace.schema.json" in doc
