"""What every offline HTML report shares: plotly.js inlined, escaped plotly labels, one chart
layout, and the jinja environment (autoescaping, strict) its template is rendered with."""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import jinja2
from plotly.io.json import to_json_plotly
from plotly.offline import get_plotlyjs

__all__ = [
    "FONT",
    "chart_layout",
    "plot_label",
    "plotly_js",
    "script_safe_json",
    "template",
    "vertical_line",
]

FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'


def plot_label(text: str, limit: int = 0) -> str:
    """``text`` cut to ``limit`` characters (0: no limit) and escaped for a plotly label
    (plotly renders a subset of HTML; it decodes &lt; &gt; &amp; but not &quot;)."""
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)


def chart_layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    """A plotly layout; the titles are plain text and escaped here; ``extra`` overrides."""
    return {
        "title": {"text": f"<b>{plot_label(title, 90)}</b>", "x": 0.01, "font": {"size": 16}},
        "template": "plotly_white",
        "font": {"family": FONT, "size": 12},
        "height": 420,
        "margin": {"l": 70, "r": 24, "t": 56, "b": 60},
        "hoverlabel": {"align": "left"},
        "legend": {"orientation": "h", "y": -0.2, "x": 0},
        "xaxis": {"title": {"text": plot_label(x_title)}},
        "yaxis": {"title": {"text": plot_label(y_title)}},
        **extra,
    }


def vertical_line(x: float, color: str) -> dict[str, Any]:
    """A dotted vertical line across a chart at ``x`` (an SLA, a capacity, 1x)."""
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": color, "width": 2, "dash": "dot"},
    }


@functools.cache
def plotly_js() -> str:
    """plotly's bundled plotly.min.js with any ``</script`` defused (it has none today)."""
    return re.sub(r"</(script)", r"<\\/\1", get_plotlyjs(), flags=re.IGNORECASE)


def template(package: str, name: str, filters: dict[str, Callable[..., str]]) -> jinja2.Template:
    """The template ``name`` packaged beside its renderer in ``package`` (a command's package), in
    an autoescaping, strict environment."""
    source = resources.files(package).joinpath(name)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters.update(filters)
    return env.from_string(source.read_text(encoding="utf-8"))


_SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def script_safe_json(obj: Any) -> str:
    """JSON (plotly's encoder) that is safe inside a ``<script>`` element.

    ``<``, ``>``, ``&`` (and U+2028/9) only occur inside JSON strings, where the ``\\u003c``
    escapes mean the same characters, so neither ``</script>`` nor ``<!--`` can appear.
    """
    return str(to_json_plotly(obj)).translate(_SCRIPT_ESCAPES)
