"""Plotly figures of where the time went: token timelines, per-step drafting, time breakdown, a long
file's windows (or chunks) along the file, and a live stream's updates."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec.streaming.session import Update
from specdec.trace import DecodeResult, Step, Window
from specdec.whisper.tokens import TIMESTAMP_SECONDS

BASELINE_COLOUR = "#71717a"
SPECULATIVE_COLOUR = "#2563eb"
DRAFTED_COLOUR = "#fdba74"
ACCEPTED_COLOUR = "#22c55e"
BREAKDOWN_COLOURS = {"encoder": "#a78bfa", "draft": "#fdba74", "verify": "#2563eb", "other": "#d4d4d8"}
WINDOW_COLOURS = ("#2563eb", "#f97316")  # alternating, so that overlapping windows and chunks stay apart
BOUNDARY_COLOUR = "#71717a"
BOUNDARY_NAME = "window boundary"
SPEECH, NOISE, SILENCE = "speech", "noise (ignored)", "silence"  # what a live chunk held
ACTIVITY_COLOURS = {SPEECH: "#86efac", NOISE: "#fca5a5", SILENCE: "#e4e4e7"}


def step_tokens(result: DecodeResult) -> list[int]:
    """Tokens each step added to the output: its accepted draft tokens plus the target's token."""
    return [step.n_accepted + (step.target_token is not None) for step in result.steps]


def cumulative_tokens(result: DecodeResult) -> tuple[list[float], list[int]]:
    """(seconds since the run began, tokens so far) at the end of every step, from (encoder end, 0).

    Steps are taken in the order they ended: chunked long-form decodes chunks as a batch, so the steps of
    chunk 2 (recorded after chunk 1's) ran alongside chunk 1's."""
    passes = [result.pass_of(step) for step in result.steps]
    ends = [p.start_seconds + p.draft_seconds + p.verify_seconds for p in passes]
    seconds = [min((p.start_seconds for p in passes), default=result.encoder_seconds)]
    counts = [0]
    for end, added in sorted(zip(ends, step_tokens(result), strict=True), key=lambda pair: pair[0]):
        seconds.append(end)
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
        ("draft ms", [1000 * speculative.pass_of(s).draft_seconds for s in speculative.steps], "dot"),
        ("verify ms", [1000 * speculative.pass_of(s).verify_seconds for s in speculative.steps], "solid"),
    ):
        figure.add_trace(
            go.Scatter(x=indices, y=values, name=name, mode="lines", line={"dash": dash, "width": 1.5}),
            secondary_y=True,
        )
    boundaries = _boundaries_trace(speculative)
    if boundaries is not None:
        figure.add_trace(boundaries)
    figure.update_layout(title="Each target pass: drafted vs accepted tokens", barmode="overlay", **_layout())
    most_drafted = max((len(step.drafted) for step in speculative.steps), default=0)
    figure.update_xaxes(title_text="step (target pass)", **whole_ticks(max(indices, default=0)))
    figure.update_yaxes(title_text="tokens", secondary_y=False, **whole_ticks(most_drafted))
    figure.update_yaxes(title_text="milliseconds", secondary_y=True, rangemode="tozero")
    return figure


def _boundaries_trace(result: DecodeResult) -> go.Scatter | None:
    """Dotted vertical lines before the first pass of every window but the first, all in one trace (a
    shape per line slows Plotly down with thousands); None for a single window."""
    if len(result.windows) <= 1:
        return None
    first_steps: dict[int, int] = {}
    for step in result.steps:
        first_steps.setdefault(step.window, step.index)
    windows = {window.index: window for window in result.windows}
    top = max((len(step.drafted) for step in result.steps), default=0) + 1
    x, y, hover = [], [], []
    for window_index, step_index in list(first_steps.items())[1:]:
        text = _window_name(windows[window_index]) + f" starts at {windows[window_index].start_seconds:.1f} s"
        x += [step_index - 0.5, step_index - 0.5, None]
        y += [0, top, None]
        hover += [text, text, None]
    return go.Scatter(
        x=x,
        y=y,
        name=BOUNDARY_NAME,
        mode="lines",
        line={"color": BOUNDARY_COLOUR, "dash": "dot", "width": 1},
        hovertext=hover,
        hoverinfo="text",
    )


@dataclass(frozen=True)
class WindowStats:
    """One decoded window: where it lies in the file and what decoding it took."""

    window: Window
    num_tokens: int  # generated in it, end-of-text and tokens later dropped included
    num_passes: int
    num_drafted: int
    num_accepted: int

    @property
    def tokens_per_pass(self) -> float:
        return self.num_tokens / self.num_passes if self.num_passes else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted / self.num_drafted if self.num_drafted else None


def window_stats(result: DecodeResult) -> list[WindowStats]:
    """Each window's tokens, target passes and drafted/accepted tokens, from the recorded trace."""
    tokens = Counter(record.window for record in result.tokens)
    passes, drafted, accepted = Counter(), Counter(), Counter()
    for step in result.steps:
        passes[step.window] += 1
        drafted[step.window] += len(step.drafted)
        accepted[step.window] += step.n_accepted
    return [
        WindowStats(w, tokens[w.index], passes[w.index], drafted[w.index], accepted[w.index])
        for w in result.windows
    ]


def windows_figure(
    result: DecodeResult, audio_seconds: float | None = None, timestamp_begin: int | None = None
) -> go.Figure:
    """The file's timeline (x: seconds of the file): a see-through bar over each decoded window's audio, as
    high as its tokens per target pass, colours alternating from one chunk (or window) to the next; and in
    front, each target pass over the audio of its tokens (`pass_spans`), as high as the tokens it gave.

    audio_seconds, if given, ends the bars there: a short clip's one window counts the padding to 30 s.
    timestamp_begin: the id of <|0.00|>, so that timestamp tokens place the passes (None: not read)."""
    rows = window_stats(result)
    end = math.inf if audio_seconds is None else audio_seconds
    chunked = any(row.window.chunk is not None for row in rows)
    colours = [WINDOW_COLOURS[_group(row.window) % 2] for row in rows]
    starts = [row.window.start_seconds for row in rows]
    widths = [_audio_in(row.window, end) for row in rows]
    figure = go.Figure(
        go.Bar(
            x=starts,
            y=[row.tokens_per_pass for row in rows],
            width=widths,
            offset=0,  # each bar spans [start, start + seconds]
            name="chunks" if chunked else "windows",
            # see-through, each outlined in its own colour: where chunks overlap, both edges show
            marker={"color": colours, "opacity": 0.25, "line": {"color": colours, "width": 2}},
            hovertext=[_window_hover(row, end) for row in rows],
            hoverinfo="text",
        )
    )
    figure.add_trace(_passes_trace(result, end, timestamp_begin))
    figure.add_hline(
        y=1, line={"color": BASELINE_COLOUR, "dash": "dash", "width": 1}, annotation_text="target alone"
    )
    unit = "chunk by chunk (30 s, 5 s overlap)" if chunked else "window by window"
    figure.update_layout(
        title=f"The file {unit}, pass by pass: tokens per target pass (hover a bar)",
        xaxis_title="seconds of the file",
        yaxis_title="tokens per target pass",
        barmode="overlay",
        **_layout(),
    )
    # the file from its start to its end: Plotly's own range pads the bars with negative seconds
    figure.update_xaxes(range=[0, max((a + b for a, b in zip(starts, widths, strict=True)), default=1)])
    return figure


def pass_spans(
    result: DecodeResult, audio_seconds: float | None = None, timestamp_begin: int | None = None
) -> list[tuple[Step, float, float]]:
    """Where each target pass's tokens lie in the file: (step, start, end) in seconds, in step order. Times
    the trace measured anchor them (with word timestamps each kept token's span; the timestamp tokens' own
    times; the window's edges); between anchors tokens share the audio evenly."""
    end = math.inf if audio_seconds is None else audio_seconds
    spans = iter(result.token_spans or ())
    edges: dict[int, tuple[float, float]] = {}  # step index -> (start, end)
    for window in result.windows:
        records = [record for record in result.tokens if record.window == window.index]
        times = _token_edges(records, window, _audio_in(window, end), spans, timestamp_begin)
        for k, record in enumerate(records):
            start, stop = edges.get(record.step, (times[k], times[k + 1]))
            edges[record.step] = (min(start, times[k]), max(stop, times[k + 1]))
    return [(step, *edges[step.index]) for step in result.steps if step.index in edges]


def _token_edges(records, window: Window, seconds: float, spans, timestamp_begin: int | None) -> list[float]:
    """The len(records) + 1 edges of a window's tokens in seconds of the file (`pass_spans`); spans: an
    iterator over the result's token spans, advanced past this window's kept tokens."""
    start = window.start_seconds
    anchors = {0: start, len(records): start + seconds}
    for k, record in enumerate(records):
        span = next(spans, None) if record.kept else None
        if span is not None:
            anchors[k], anchors[k + 1] = span
        elif timestamp_begin is not None and record.token_id >= timestamp_begin:
            anchors[k] = anchors[k + 1] = start + (record.token_id - timestamp_begin) * TIMESTAMP_SECONDS
    known = sorted(anchors)
    edges = np.interp(range(len(records) + 1), known, [anchors[k] for k in known])
    return np.clip(np.maximum.accumulate(edges), start, start + seconds).tolist()


def _passes_trace(result: DecodeResult, end: float, timestamp_begin: int | None) -> go.Bar:
    found = pass_spans(result, None if math.isinf(end) else end, timestamp_begin)
    tokens = Counter(record.step for record in result.tokens)
    placed = "its tokens' word times" if result.token_spans else "the timestamps and its tokens' count"
    return go.Bar(
        x=[start for _, start, _ in found],
        y=[tokens[step.index] for step, _, _ in found],
        width=[stop - start for _, start, stop in found],
        offset=0,
        name="target passes",
        marker={"color": ACCEPTED_COLOUR, "opacity": 0.85, "line": {"color": "white", "width": 0.5}},
        hovertext=[
            f"target pass {step.index + 1}: {tokens[step.index]} tokens ({step.n_accepted} of "
            f"{len(step.drafted)} drafted accepted)<br>{start:.2f}–{stop:.2f} s of the file, "
            f"placed by {placed}"
            for step, start, stop in found
        ],
        hoverinfo="text",
    )


def _audio_in(window: Window, end: float) -> float:
    return round(max(0.0, min(window.seconds, end - window.start_seconds)), 2)


def _group(window: Window) -> int:
    return window.index if window.chunk is None else window.chunk


def _window_name(window: Window) -> str:
    """1-based, as people count: "window 3" or "window 3 (chunk 2)", and the temperature fallback's part in
    it: "window 4 at temperature 0.2" (the same audio decoded again), "..., failed: decoded again"."""
    chunk = "" if window.chunk is None else f" (chunk {window.chunk + 1})"
    fallback = "" if window.temperature == 0 else f" at temperature {window.temperature:g}"
    fallback += ", failed: decoded again" if window.fell_back else ""
    return f"window {window.index + 1}{chunk}{fallback}"


def _window_hover(row: WindowStats, end: float) -> str:
    window, rate = row.window, row.acceptance_rate
    acceptance = "nothing drafted" if rate is None else f"{rate:.0%} ({row.num_accepted}/{row.num_drafted})"
    stop = window.start_seconds + _audio_in(window, end)
    return (
        f"{_window_name(window)}<br>{window.start_seconds:.1f}–{stop:.1f} s of the file"
        f"<br>{row.num_tokens} tokens in {row.num_passes} target passes ({row.tokens_per_pass:.2f} per pass)"
        f"<br>acceptance {acceptance}"
    )


def time_breakdown(result: DecodeResult) -> dict[str, float]:
    """Seconds in the encoder(s), drafting, verifying, and everything else (processing, bookkeeping); a
    batched pass or encoder call (chunked long-form) counts once, not once per row."""
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


def whole_ticks(largest: float) -> dict:
    """Plotly axis settings for a count (steps, tokens, passes): ticks on whole numbers, 1, 2 or 5 times a
    power of ten apart, about ten at most (Plotly's own put ticks at 0.5 on a short axis)."""
    steps = (multiple * 10**power for power in range(12) for multiple in (1, 2, 5))
    return {"tick0": 0, "dtick": next(step for step in steps if largest <= 10 * step)}


def _layout() -> dict:
    return {
        "template": "plotly_white",
        "height": 340,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.25},
    }


def activity(update: Update, silence_dbfs: float) -> str:
    """What a live chunk held: speech, noise (no speech above the energy gate) or silence."""
    return SPEECH if update.speech else NOISE if update.level_dbfs >= silence_dbfs else SILENCE


def live_figure(
    updates: Sequence[Update], lag_seconds: dict[int, float], chunk_seconds: float | None, silence_dbfs: float
) -> go.Figure:
    """A live stream: each decoded update's latency, delay and target passes, against the chunk length
    (text must keep up with audio), over bands of what the chunks held (speech, noise, silence)."""
    figure = go.Figure()
    decoded = [update for update in updates if update.index in lag_seconds]  # the decoded ones, timed
    seconds = [update.stream_seconds for update in decoded]
    latencies = [1000 * update.latency_seconds for update in decoded]
    figure.add_scatter(x=seconds, y=latencies, mode="lines+markers", name="decode (ms)")
    lags = [1000 * lag_seconds[update.index] for update in decoded]
    figure.add_scatter(x=seconds, y=lags, mode="lines+markers", name="behind live (ms)", line_dash="dot")
    passes = [update.target_passes for update in decoded]
    figure.add_bar(
        x=seconds, y=passes, name="target passes", yaxis="y2", opacity=0.25, marker_color="#6b7280"
    )
    named: set[str] = set()
    for kind, start, end in _activity_runs(updates, silence_dbfs):  # a shape per run, not per chunk
        figure.add_vrect(
            x0=start, x1=end, fillcolor=ACTIVITY_COLOURS[kind], opacity=0.35, layer="below", line_width=0,
            name=kind, legendgroup=kind, showlegend=kind not in named,
        )  # fmt: skip
        named.add(kind)
    if chunk_seconds is not None:
        figure.add_hline(
            y=1000 * chunk_seconds,
            line_dash="dash",
            annotation_text="chunk length",
            annotation_position="top left",  # at the start, clear of the latest updates
        )
    figure.update_layout(
        height=260,
        margin=dict(l=40, r=40, t=50, b=40),
        xaxis_title="audio received (s)",
        yaxis=dict(title="latency (ms)", rangemode="tozero"),
        yaxis2=dict(
            title="target passes",
            overlaying="y",
            side="right",
            rangemode="tozero",
            showgrid=False,
            **whole_ticks(max(passes, default=0)),
        ),  # fmt: skip
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return figure


def _activity_runs(updates: Sequence[Update], silence_dbfs: float) -> list[tuple[str, float, float]]:
    """(what, start, end) in stream seconds: consecutive chunks that held the same, joined."""
    runs: list[tuple[str, float, float]] = []
    for update in updates:
        if not update.chunk_seconds:
            continue
        kind, start = activity(update, silence_dbfs), update.stream_seconds - update.chunk_seconds
        if runs and runs[-1][0] == kind:
            start = runs.pop()[1]
        runs.append((kind, start, update.stream_seconds))
    return runs
