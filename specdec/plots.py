"""Plotly figures of where the time went: token timelines, per-step drafting, time breakdown."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec.trace import DecodeResult

BASELINE_COLOUR = "#71717a"
SPECULATIVE_COLOUR = "#2563eb"
DRAFTED_COLOUR = "#fdba74"
ACCEPTED_COLOUR = "#22c55e"
BREAKDOWN_COLOURS = {"encoder": "#a78bfa", "draft": "#fdba74", "verify": "#2563eb", "other": "#d4d4d8"}


def step_tokens(result: DecodeResult) -> list[int]:
    """Tokens each step added to the output: its accepted draft tokens plus the target's token."""
    return [step.n_accepted + (step.target_token is not None) for step in result.steps]


def cumulative_tokens(result: DecodeResult) -> tuple[list[float], list[int]]:
    """(seconds since the run began, tokens so far) at the end of every step, from (encoder end, 0)."""
    seconds, counts = [result.steps[0].start_seconds if result.steps else result.encoder_seconds], [0]
    for step, added in zip(result.steps, step_tokens(result), strict=True):
        seconds.append(step.start_seconds + step.draft_seconds + step.verify_seconds)
        counts.append(counts[-1] + added)
    return seconds, counts


def timeline_figure(baseline: DecodeResult, speculative: DecodeResult) -> go.Figure:
    """Cumulative tokens against wall-clock time, target alone and speculative."""
    figure = go.Figure()
    for name, result, colour in (
        ("target alone", baseline, BASELINE_COLOUR),
        ("speculative", speculative, SPECULATIVE_COLOUR),
    ):
        seconds, counts = cumulative_tokens(result)
        figure.add_trace(
            go.Scatter(
                x=seconds,
                y=counts,
                name=name,
                mode="lines+markers",
                line_shape="hv",
                marker={"size": 4, "color": colour},
                line={"color": colour},
            )
        )
    figure.update_layout(
        title="Tokens over time (each marker is one target pass)",
        xaxis_title="seconds since the run began (encoder included)",
        yaxis_title="tokens generated",
        **_layout(),
    )
    return figure


def steps_figure(speculative: DecodeResult) -> go.Figure:
    """Per target pass: tokens drafted and accepted (bars), and the step's draft and verify time (lines)."""
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    indices = [step.index for step in speculative.steps]
    figure.add_trace(
        go.Bar(
            x=indices,
            y=[len(s.drafted) for s in speculative.steps],
            name="drafted",
            marker_color=DRAFTED_COLOUR,
        )
    )
    figure.add_trace(
        go.Bar(
            x=indices,
            y=[s.n_accepted for s in speculative.steps],
            name="accepted",
            marker_color=ACCEPTED_COLOUR,
        )
    )
    for name, values, dash in (
        ("draft ms", [1000 * s.draft_seconds for s in speculative.steps], "dot"),
        ("verify ms", [1000 * s.verify_seconds for s in speculative.steps], "solid"),
    ):
        figure.add_trace(
            go.Scatter(x=indices, y=values, name=name, mode="lines", line={"dash": dash, "width": 1.5}),
            secondary_y=True,
        )
    figure.update_layout(title="Each target pass: drafted vs accepted tokens", barmode="overlay", **_layout())
    figure.update_xaxes(title_text="step (target pass)")
    figure.update_yaxes(title_text="tokens", secondary_y=False)
    figure.update_yaxes(title_text="milliseconds", secondary_y=True, rangemode="tozero")
    return figure


def time_breakdown(result: DecodeResult) -> dict[str, float]:
    """Seconds in the encoder(s), drafting, verifying, and everything else (processing, bookkeeping)."""
    parts = {
        "encoder": result.encoder_seconds,
        "draft": result.draft_seconds,
        "verify": result.verify_seconds,
    }
    parts["other"] = max(result.total_seconds - sum(parts.values()), 0.0)
    return parts


def breakdown_figure(baseline: DecodeResult, speculative: DecodeResult) -> go.Figure:
    """Stacked horizontal bars: where each run's wall-clock time went."""
    figure = go.Figure()
    runs = ("target alone", "speculative")
    breakdowns = (time_breakdown(baseline), time_breakdown(speculative))
    for part, colour in BREAKDOWN_COLOURS.items():
        seconds = [breakdown[part] for breakdown in breakdowns]
        figure.add_trace(
            go.Bar(
                y=runs,
                x=seconds,
                name=part,
                orientation="h",
                marker_color=colour,
                text=[f"{s:.2f}s" for s in seconds],
                textposition="inside",
            )
        )
    figure.update_layout(title="Where the time went", barmode="stack", xaxis_title="seconds", **_layout())
    return figure


def _layout() -> dict:
    return {
        "template": "plotly_white",
        "height": 340,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.25},
    }
