"""The web app's handlers on a clip over 30 s (demo models): both long-form modes, the progress they
report, the file timeline, file-relative timestamps and the app's length limit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec.app import compare, highlight, plots, views
from specdec.app import store as stores
from specdec.audio import SAMPLE_RATE
from specdec.trace import DRAFT_MODEL, NO_PROPOSAL, TARGET, DecodeResult, Step, TokenRecord, Window
from specdec.whisper.tokens import timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"
LONG_SECONDS = 45  # two windows in either mode, and quick on the demo models
SHARED = "shared"
GREEDY = {"fallback": False}  # random weights fail Whisper's thresholds everywhere: no fallback sampling


@pytest.fixture(scope="module")
def store(demo_models) -> stores.ModelStore:
    return stores.ModelStore({SHARED: (str(demo_models["target"]), str(demo_models["draft-shared"]))}, "cpu")


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory) -> Path:
    """The example clips, one after another until 45 s."""
    clips = [sf.read(path, dtype="float32")[0] for path in sorted(ASSETS.glob("*.wav"))]
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate(clips * 2)[: LONG_SECONDS * SAMPLE_RATE], SAMPLE_RATE)
    return path


class Progress:
    """Records what a gr.Progress would show; falsy like an idle gr.Progress (it has a __len__)."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return 0

    def __call__(self, fraction: float, desc: str) -> None:
        self.reports.append((fraction, desc))


@pytest.fixture(scope="module", params=["sequential", "chunked"])
def long_run(store, long_clip, request) -> tuple[views.CompareView, list[tuple[float, str]]]:
    """The Compare view of the long clip in one mode, and every progress report on the way."""
    progress = Progress()
    compare_request = compare.CompareRequest(str(long_clip), SHARED, "en", long_form=request.param, **GREEDY)
    return compare.compare_clip(store, compare_request, progress), progress.reports


def test_both_modes_give_the_targets_own_output(long_run):
    view, _ = long_run
    assert view.comparison.identical and view.baseline_text == view.speculative_text
    assert "Identical" in view.verdict_html
    windows = view.comparison.speculative.result.windows
    chunked = view.comparison.speculative.result.windows[-1].chunk is not None
    assert len(windows) >= 2 and windows[-1].start_seconds + windows[-1].seconds == LONG_SECONDS
    assert all((window.chunk is not None) == chunked for window in windows)
    metrics = [row[0] for row in view.metrics]
    passes = "target passes (each chunk's, summed)" if chunked else "target passes"
    assert passes in metrics  # a batch's shared pass counts once per chunk: the label says so


def test_progress_follows_both_runs_window_by_window(long_run):
    view, reports = long_run
    fractions = [fraction for fraction, _ in reports]
    assert fractions == sorted(fractions) and fractions[0] > 0 and fractions[-1] == pytest.approx(0.95)
    chunked = view.comparison.speculative.result.windows[0].chunk is not None
    unit = "chunk 2 of 2" if chunked else "segment 2"
    engine = [desc for _, desc in reports if unit in desc]
    assert [desc.split(":")[0] for desc in engine] == (
        ["target alone", "speculative"] if view.comparison.baseline_first else ["speculative", "target alone"]
    )
    assert any("45 s, long-form" in desc for _, desc in reports)


def test_file_timeline_has_one_bar_per_window(long_run):
    view, _ = long_run
    result = view.comparison.speculative.result
    bars, passes = view.windows.data
    assert len(passes.x) == len(result.steps)  # and in front, each target pass
    assert list(bars.x) == [window.start_seconds for window in result.windows]
    assert list(bars.width) == [window.seconds for window in result.windows]
    passes = [sum(step.window == w.index for step in result.steps) for w in result.windows]
    tokens = [sum(record.window == w.index for record in result.tokens) for w in result.windows]
    assert list(bars.y) == pytest.approx([t / p for t, p in zip(tokens, passes, strict=True)])
    assert len(set(bars.marker.color)) == 2  # neighbours in different colours
    assert all("acceptance" in text for text in bars.hovertext)


def test_tokens_over_time_run_forward_through_a_batch(long_run):
    """Chunk 2's steps are recorded after chunk 1's, but ran alongside them: the line never goes back."""
    view, _ = long_run
    for trace, transcription in zip(
        view.timeline.data, (view.comparison.baseline, view.comparison.speculative), strict=True
    ):
        assert all(np.diff(trace.x) >= 0) and trace.y[-1] == transcription.result.num_generated


def test_time_breakdown_counts_a_batched_pass_once(long_run):
    """Chunked mode decodes its chunks as a batch: each row's step carries the whole pass's times."""
    view, _ = long_run
    stacked = {trace.name: trace.x for trace in view.breakdown.data}
    for run, transcription in enumerate((view.comparison.baseline, view.comparison.speculative)):
        parts = [stacked[part][run] for part in plots.BREAKDOWN_COLOURS]
        assert sum(parts) == pytest.approx(transcription.result.total_seconds, rel=1e-6)
        assert stacked["other"][run] > 0


def test_per_pass_plot_marks_window_boundaries(long_run):
    view, _ = long_run
    result = view.comparison.speculative.result
    (boundaries,) = [trace for trace in view.steps.data if trace.name == plots.BOUNDARY_NAME]
    first_steps = [min(s.index for s in result.steps if s.window == w.index) for w in result.windows[1:]]
    assert [x for x in boundaries.x if x is not None] == [x - 0.5 for x in first_steps for _ in "ab"]


def test_timestamps_count_from_the_start_of_the_file(long_run):
    """Sequential mode always has timestamps, a later window's past its start in the file; chunked mode
    merges the chunks' text tokens only."""
    view, _ = long_run
    result = view.comparison.speculative.result
    kept = "".join(span.text for span in view.spans if span.kept and span.label != highlight.REJECTED)
    seconds = [float(mark) for mark in re.findall(r"⟨(\d+\.\d\d)⟩", kept)]
    if result.windows[0].chunk is None:
        assert max(seconds) >= result.windows[1].start_seconds
    else:
        assert seconds == []


def test_transcribe_only_goes_long_form_with_progress(store, long_clip):
    progress = Progress()
    request = compare.CompareRequest(str(long_clip), SHARED, "en", long_form="chunked", **GREEDY)
    text, tokens_html, stats = compare.transcribe_clip(store, request, progress)
    assert "specdec-tokens" in tokens_html and [w["chunk"] for w in stats["windows"]] == [0, 1]
    assert any(desc.startswith("speculative: chunk 2 of 2") for _, desc in progress.reports)
    compared = compare.compare_clip(store, request)
    assert text == compared.speculative_text


def test_planted_timestamps_are_shown_in_file_seconds(store):
    """Two windows, the second from 27.5 s: its ⟨1.00⟩ is shown as ⟨28.50⟩, also for a rejected draft."""
    target = store.whisper(SHARED).pair.target
    begin = timestamp_begin(target.model.generation_config)
    one_second, two_seconds = begin + 50, begin + 100
    steps = (
        Step(0, 0, 0, NO_PROPOSAL, (), 0, begin),
        Step(1, 1, 1, DRAFT_MODEL, (two_seconds,), 0, one_second),
    )
    tokens = (
        TokenRecord(begin, TARGET, 0, 0, 1.0, None),
        TokenRecord(one_second, "corrected", 1, 1, 1.0, 0.5),
    )
    windows = (Window(0, 0.0, 27.5), Window(1, 27.5, 30.0))
    result = DecodeResult((begin, one_second), (), "en", tokens, steps, (), (), 0, windows)
    spans = highlight.token_spans(result, target.processor.tokenizer, begin)
    assert [span.text for span in spans] == ["⟨0.00⟩", "⟨29.50⟩", "⟨28.50⟩"]


def test_a_clip_over_the_limit_is_refused_naming_the_limit(store, long_clip, tmp_path, monkeypatch):
    too_long = tmp_path / "too-long.wav"
    sf.write(too_long, np.zeros(601 * SAMPLE_RATE, dtype=np.int16), SAMPLE_RATE)
    with pytest.raises(stores.UserError, match=r"^too-long.wav is 601.0 s long; the limit is 10 min$"):
        compare.compare_clip(store, compare.CompareRequest(str(too_long), SHARED, "en"))
    monkeypatch.setattr(store, "max_seconds", 40.0)
    with pytest.raises(stores.UserError, match=r"long.wav is 45.0 s long; the limit is 40 s"):
        compare.transcribe_clip(store, compare.CompareRequest(str(long_clip), SHARED, "en"))


def test_an_unknown_long_form_mode_is_a_clear_error(store, long_clip):
    with pytest.raises(stores.UserError, match="long_form must be sequential or chunked, not 'parallel'"):
        compare.compare_clip(
            store, compare.CompareRequest(str(long_clip), SHARED, "en", long_form="parallel")
        )


def test_the_limit_from_a_flag_or_the_environment(monkeypatch):
    import app

    assert app.parse_args([]).max_seconds == stores.MAX_APP_SECONDS == 600
    monkeypatch.setenv("SPECDEC_MAX_SECONDS", "120")
    assert app.parse_args([]).max_seconds == 120
    assert app.parse_args(["--max-seconds", "90"]).max_seconds == 90
    with pytest.raises(SystemExit):
        app.parse_args(["--max-seconds", "0"])
