"""The benchmarks' Plotly figures, one row of panels each, as one HTML page beside the JSON record
(plotly.js from its CDN) and a PNG per figure when `kaleido` is installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def bar(x: list, y: list, name: str, **fields: object) -> go.Bar:
    """A bar trace for `figure` (fields: plotly's, e.g. orientation="h")."""
    return go.Bar(x=x, y=y, name=name, **fields)


def scatter(x: list, y: list, name: str, **fields: object) -> go.Scatter:
    """A scatter trace for `figure` (fields: plotly's, e.g. mode="markers")."""
    return go.Scatter(x=x, y=y, name=name, **fields)


def figure(title: str, panels: dict[str, list[go.Bar | go.Scatter]], axes: Sequence[dict] = (),
           one_line: Sequence[int] = (), widths: Sequence[float] | None = None,
           **layout: object) -> go.Figure:  # fmt: skip
    """Panels side by side (subplot title -> traces); axes[i]: panel i's {"x": xaxis fields, "y": yaxis
    fields}; a grey line at y = 1 in the panels `one_line` names (from 1)."""
    found = make_subplots(rows=1, cols=len(panels), subplot_titles=list(panels), column_widths=widths)
    for col, traces in enumerate(panels.values(), start=1):
        found.add_traces(traces, rows=1, cols=col)
        if col in one_line:
            found.add_hline(y=1.0, line={"color": "grey", "width": 1, "dash": "dash"}, row=1, col=col)
    for col, axis in enumerate(axes, start=1):
        found.update_xaxes(row=1, col=col, **axis.get("x", {}))
        found.update_yaxes(row=1, col=col, **axis.get("y", {}))
    found.update_layout({"title": title, "height": 480, "width": 1100, "template": "plotly_white"}, **layout)
    return found


def write_html(figures: Sequence[go.Figure], path: Path, title: str) -> Path:
    """The figures in one page at `path`; PNGs beside it (path-1.png, ...) when kaleido is importable."""
    parts = "".join(
        f.to_html(full_html=False, include_plotlyjs=i == 0 and "cdn") for i, f in enumerate(figures)
    )
    path.write_text(
        f"<html><head><meta charset='utf-8'><title>{title}</title></head><body>{parts}</body></html>"
    )
    for i, found in enumerate(figures if importlib.util.find_spec("kaleido") else (), start=1):
        found.write_image(path.with_name(f"{path.stem}-{i}.png"), scale=1.5)
    return path
