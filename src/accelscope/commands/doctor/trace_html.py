"""Self-contained offline HTML report of ``doctor --trace``: per rank the verdict with its
advice, the causes table and one stacked bar per step; then the markdown digest
(:mod:`.digest`) as text, to copy into an agent's prompt or a pull-request comment. No script
at all (CSP forbids it); every user string escaped by jinja's autoescape."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jinja2

from accelscope.commands.doctor.digest import markdown_digest
from accelscope.doctor.causes import CAUSES
from accelscope.report.format import format_seconds
from accelscope.report.page import template

if TYPE_CHECKING:
    from accelscope.doctor.trace_diagnosis import TraceDiagnosis

__all__ = ["CAUSE_COLORS", "render_trace_report"]

CAUSE_COLORS = {
    "compute": "#2563eb",
    "memory": "#0ea5e9",
    "communication": "#0891b2",
    "h2d_pageable": "#c026d3",
    "h2d_pinned": "#a855f7",
    "sync": "#d97706",
    "dataloader": "#dc2626",
    "launch": "#16a34a",
    "allocator": "#78716c",
    "host_compute": "#ea580c",
    "other": "#9ca3af",
    "unexplained": "#4b5563",
}
_MAX_STEPS = 200


@functools.cache
def _template() -> jinja2.Template:
    filters = {"seconds": format_seconds, "pct": "{:.1%}".format}
    return template("accelscope.commands.doctor", "trace.html.j2", filters)


def render_trace_report(diagnosis: TraceDiagnosis, *, title: str) -> str:
    """One self-contained HTML document for a trace diagnosis."""
    sources = ", ".join(r.timeline.trace.source.rsplit("/", 1)[-1] for r in diagnosis.ranks)
    return _template().render(
        title=title,
        diagnosis=diagnosis,
        causes={key: cause.description for key, cause in CAUSES.items()},
        colors=CAUSE_COLORS,
        max_steps=_MAX_STEPS,
        sources=sources,
        digest=markdown_digest(diagnosis, title=title),
    )
