"""The digest of ``doctor --trace`` (``--format markdown``): per rank, in 40 lines or fewer, the
verdict and its evidence, the ranked causes, the longest kernels with their precision, the
quality gate's flags and the advice, as markdown an LLM agent, a pull-request comment or a chat
can take in whole. The same text goes into the HTML report.

Every string that comes from the trace (file names, kernel and event names, the messages that
quote them) is escaped: it cannot end a table cell (``|``), open a code span, a link or an HTML
tag, or start a new line. Returns text; never prints."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from accelscope.doctor.causes import CAUSES, describe
from accelscope.report.format import format_seconds

if TYPE_CHECKING:
    from accelscope.doctor.trace_diagnosis import RankDiagnosis, TraceDiagnosis

__all__ = ["MAX_LINES_PER_RANK", "markdown_digest", "md_escape", "rank_digest", "short_kernel_name"]

MAX_LINES_PER_RANK = 40
"""The most lines one rank's digest takes."""
_MAX_CAUSES = 6
_MAX_FLAGS = 6
_MAX_NOTES = 2
_MAX_NAME = 72
"""Kernel names longer than this (after shortening) are cut, with an ellipsis."""

_BACKSLASHED = re.compile(r"[\\`*\[\]|~]")
_WHITESPACE = re.compile(r"\s+")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_GENERIC_FUNCTORS = {
    "BinaryFunctor",
    "AUnaryFunctor",
    "BUnaryFunctor",
    "UnaryFunctor",
    "func_wrapper_t",
}
_HINT = re.compile(r"[A-Za-z_]\w*(?:Functor\w*|functor\w*|_kernel_cuda|_kernel_impl)\b")
_GENERIC_KERNEL = re.compile(r"^(?:[Kk]ernel\d*|device_kernel|kernel_entry)$")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def md_escape(text: str) -> str:
    """``text`` as inert markdown inline content: one line (newlines and tabs become spaces),
    ``&``, ``<``, ``>`` as HTML entities (no tag, no comment can open), and the characters that
    start markdown syntax (``|`` table cells, backticks, emphasis, links, images, headings)
    backslash-escaped. ``_`` is escaped only where it could open emphasis (not inside a word).
    """
    flat = _WHITESPACE.sub(" ", text).strip()
    out = []
    for i, ch in enumerate(flat):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch == "_":
            out.append("_" if _inside_word(flat, i) else "\\_")
        elif _BACKSLASHED.fullmatch(ch):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _inside_word(text: str, i: int) -> bool:
    """An ``_`` with a word character on both sides (runs of ``_`` included): it cannot open
    or close emphasis."""
    a = i - 1
    while a >= 0 and text[a] == "_":
        a -= 1
    b = i + 1
    while b < len(text) and text[b] == "_":
        b += 1
    return a >= 0 and b < len(text) and text[a].isalnum() and text[b].isalnum()


def _split_top(text: str, open_: str, close: str) -> tuple[str, list[str]]:
    """``text`` without its ``open_ … close`` groups at depth 0, and those groups' contents."""
    outside: list[str] = []
    groups: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == open_:
            if depth > 0:
                current.append(ch)
            depth += 1
        elif ch == close and depth > 0:
            depth -= 1
            if depth == 0:
                groups.append("".join(current))
                current = []
            else:
                current.append(ch)
        elif depth > 0:
            current.append(ch)
        else:
            outside.append(ch)
    return "".join(outside), groups


def short_kernel_name(name: str) -> str:
    """A C++ kernel name as a reader wants it: no ``void``, no namespaces, template arguments
    or parameter list, with the functor or kernel the template names where it says what the
    kernel does (``vectorized_elementwise_kernel (CUDAFunctor_add)``); names that are not C++
    (``nvjet_…``, ``triton_…``, ``sm80_xmma_…``) unchanged. Long names are cut."""
    text = _WHITESPACE.sub(" ", name).strip()
    text = text.removeprefix("void ").replace("(anonymous namespace)::", "")
    base, templates = _split_top(text, "<", ">")
    base, _ = _split_top(base, "(", ")")
    base = base.replace(" const", "").strip()
    base = base.rsplit("::", 1)[-1].strip() or text
    short = base
    if templates and _GENERIC_KERNEL.match(base):  # cutlass::Kernel2<cutlass_80_simt_sgemm_…>
        first, _ = _split_top(templates[0].split(",", 1)[0], "<", ">")
        words = _IDENTIFIER.findall(first.rsplit("::", 1)[-1])
        short = words[0] if words else base
    elif templates:
        found = [m for m in _HINT.findall(templates[0]) if m not in _GENERIC_FUNCTORS]
        short = f"{base} ({found[0]})" if found else base
    if len(short) > _MAX_NAME:
        short = short[: _MAX_NAME - 1] + "…"
    return short


def _prose(text: str) -> str:
    """A sentence of the diagnosis (which may quote the trace's event names), escaped, with
    its ASCII arrows (``host->device``) written as arrows rather than as ``-&gt;``."""
    return md_escape(text.replace("->", "\u2192"))


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _measured(value: float | None, flag: str) -> str:
    return f"{value:.0%}" if value is not None else f"not measured (give {flag})"


def _reported(cause: str, reported: dict[str, float]) -> str:
    """``yes (>= 15 %)`` for a cause at or above its threshold (as a live run reports it)."""
    if cause not in reported:
        return ""
    known = CAUSES.get(cause)
    if known is None or known.threshold is None or cause in ("compute", "memory"):
        return "yes"
    return f"yes (>= {known.threshold:.0%})"


def rank_digest(rank: RankDiagnosis, *, slowest: bool = False) -> list[str]:
    """One rank's digest, at most :data:`MAX_LINES_PER_RANK` lines."""
    v = rank.verdict
    t = rank.timeline
    q = rank.quality
    mark = " (slowest rank)" if slowest else ""
    lines = [
        f"## {md_escape(t.rank)}{mark}: bottleneck {md_escape(v.bottleneck)}",
        "",
        f"**Verdict**: {_prose(v.headline)}",
        "",
        f"**Evidence** ({len(q.steady)} steady of {len(t.steps)} steps"
        + ("" if q.steady else ": the shares are the whole window's, for the record")
        + ", from "
        f"{md_escape(t.trace.step_source)}; {md_escape(t.trace.device_name or 'GPU')}; "
        "the GPU's own timestamps): "
        f"mean step {format_seconds(v.step_s)}; GPU busy {v.busy_share:.0%} (kernels "
        f"{v.compute_share:.0%}, copies {v.copy_share:.0%}), idle {v.idle_share:.0%}; "
        f"matrix precision {v.matrix_precision or 'no matrix kernels'}; GPM SM active "
        f"{_measured(v.sm_active, '--sm-active')}; NVML utilisation "
        f"{_measured(v.nvml_utilisation, '--gpu-util')}",
        "",
    ]
    causes = [(c, s) for c, s in v.ranked if s > 0]
    reported = dict(v.reported)
    lines += ["| cause | share of step | per step | reported |", "|---|---:|---:|---|"]
    for cause, share in causes[:_MAX_CAUSES]:
        lines.append(
            f"| {_prose(describe(cause))} | {_pct(share)} | "
            f"{format_seconds(share * v.step_s)} | {_reported(cause, reported)} |"
        )
    if len(causes) > _MAX_CAUSES:
        rest = sum(s for _, s in causes[_MAX_CAUSES:])
        lines.append(
            f"| {len(causes) - _MAX_CAUSES} more causes | {_pct(rest)} | "
            f"{format_seconds(rest * v.step_s)} | |"
        )
    lines.append("")
    if rank.kernels:
        lines += [
            "| top kernel | share of step | per step | class | precision |",
            "|---|---:|---:|---|---|",
        ]
        for k in rank.kernels:
            lines.append(
                f"| {md_escape(short_kernel_name(k.name))} | {_pct(k.share)} | "
                f"{format_seconds(k.per_step_s)} | {k.kernel_class} | {k.precision or 'n/a'} |"
            )
    else:
        lines.append("No kernel ran in these steps.")
    lines.append("")
    if q.flags:
        lines.append("**Window quality** (the verdict is of the steady steps only):")
        lines += [f"- {_prose(f.message)}" for f in q.flags[:_MAX_FLAGS]]
        if len(q.flags) > _MAX_FLAGS:
            lines.append(f"- … and {len(q.flags) - _MAX_FLAGS} more flags (see --json)")
    else:
        lines.append("**Window quality**: no flag; every step is steady.")
    flagged = {f.message for f in q.flags}
    notes = [n for n in (*v.notes, *t.trace.notes) if n not in flagged]
    lines += [f"- note: {_prose(n)}" for n in notes[:_MAX_NOTES]]
    lines += ["", f"**Advice**: {_prose(v.advice)}"]
    if q.advice and q.advice != v.advice:
        lines += ["", f"**Then**: {_prose(q.advice)}"]
    if len(lines) > MAX_LINES_PER_RANK:
        raise ValueError(f"a rank's digest took {len(lines)} lines (> {MAX_LINES_PER_RANK})")
    return lines


def markdown_digest(diagnosis: TraceDiagnosis, *, title: str) -> str:
    """The digest of every rank under one ``# title``; with several ranks, a table of ranks
    first (one row each) naming the slowest. Ends with the what-ifs note."""
    many = len(diagnosis.ranks) > 1
    lines = [f"# {md_escape(title)}", ""]
    if many:
        lines += ["| rank | mean step | bottleneck | GPU busy |", "|---|---:|---|---:|"]
        for r in diagnosis.ranks:
            mark = " (slowest)" if r.timeline.rank == diagnosis.slowest else ""
            lines.append(
                f"| {md_escape(r.timeline.rank)}{mark} | {format_seconds(r.timeline.mean_step_s)}"
                f" | {md_escape(r.verdict.bottleneck)} | {r.verdict.busy_share:.0%} |"
            )
        lines.append("")
    for r in diagnosis.ranks:
        lines += rank_digest(r, slowest=many and r.timeline.rank == diagnosis.slowest)
        lines.append("")
    lines.append(f"_{_prose(diagnosis.note)}_")
    return "\n".join(lines) + "\n"
