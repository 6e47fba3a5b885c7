"""The web app's handlers on a clip over 30 s (demo models): both long-form modes, the progress they
report, the file timeline, file-relative timestamps and the app's length limit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec import highlight, plots, web
from specdec.audio import SAMPLE_RATE
from specdec.decoding import timestamp_begin
from specdec.trace import TARGET, DecodeResult, Step, TokenRecord, Window

ASSETS = Path(__file__).parent.parent / "assets"
LONG_SECONDS = 45  # two windows in either mode, and quick on the demo models
SHARED = "shared"


@pytest.fixture(scope="module")
def store(demo_models) -> web.ModelStore:
    drafts = {SHARED: str(demo_models["draft-shared"])}
    return web.ModelStore(str(demo_models["target"]), drafts, device="cpu")


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory) -> Path:
    """The example clips, one after another until 45 s."""
    clips = [sf.read(path, dtype="float32")[0] for path in sorted(ASSETS.glob("*.wav"))]
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate(clips * 2)[: LONG_SECONDS * SAMPLE_RATE], SAMPLE_RATE)
    return path


@pytest.fixture(scope="module", params=["sequential", "chunked"])
def long_run(store, long_clip, request) -> tuple[web.CompareView, list[tuple[float, str]]]:
    """The Compare view of the long clip in one mode, and every progress report on the way."""
    reports = []
    compare_request = web.CompareRequest(str(long_clip), SHARED, "en", long_form=request.param)
    view = web.compare_clip(store, compare_request, lambda fraction, desc: reports.append((fraction, desc)))
    return view, reports


def test_both_modes_give_the_targets_own_output(long_run):
    view, _ = long_run
    assert view.comparison.identical and view.baseline_text == view.speculative_text
    assert "Identical" in view.verdict_html
    windows = view.comparison.speculative.result.windows
    chunked = view.comparison.speculative.result.windows[-1].chunk is not None
    assert len(windows) >= 2 and windows[-1].start_seconds + windows[-1].seconds == LONG_SECONDS
    assert all((window.chunk is not None) == chunked for window in windows)


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
    (bars,) = view.windows.data
    assert list(bars.x) == [window.start_seconds for window in result.windows]
    assert list(bars.width) == [window.seconds for window in result.windows]
    passes = [sum(step.window == w.index for step in result.steps) for w in result.windows]
    tokens = [sum(record.window == w.index for record in result.tokens) for w in result.windows]
    assert list(bars.y) == pytest.approx([t / p for t, p in zip(tokens, passes, strict=True)])
    assert len(set(bars.marker.color)) == 2  # neighbours in different colours
    assert all("acceptance" in text for text in bars.hovertext)


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
    reports = []
    request = web.CompareRequest(str(long_clip), SHARED, "en", long_form="chunked")
    text, tokens_html, stats = web.transcribe_clip(store, request, lambda f, desc: reports.append(desc))
    assert "specdec-tokens" in tokens_html and [w["chunk"] for w in stats["windows"]] == [0, 1]
    assert any(desc.startswith("speculative: chunk 2 of 2") for desc in reports)
    compared = web.compare_clip(store, request)
    assert text == compared.speculative_text


def test_planted_timestamps_are_shown_in_file_seconds(store):
    """Two windows, the second from 27.5 s: its ⟨1.00⟩ is shown as ⟨28.50⟩, also for a rejected draft."""
    target = store.whisper(SHARED).pair.target
    begin = timestamp_begin(target.model.generation_config)
    one_second, two_seconds = begin + 50, begin + 100
    steps = (Step(0, 0, (), 0, begin, 0, 0, 0), Step(1, 1, (two_seconds,), 0, one_second, 0, 0, 0))
    tokens = (
        TokenRecord(begin, TARGET, 0, 0, 1.0, None),
        TokenRecord(one_second, "corrected", 1, 1, 1.0, 0.5),
    )
    windows = (Window(0, 0.0, 27.5), Window(1, 27.5, 30.0))
    result = DecodeResult((begin, one_second), (), "en", tokens, steps, 0, 0, windows)
    spans = highlight.token_spans(result, target.processor.tokenizer, begin)
    assert [span.text for span in spans] == ["⟨0.00⟩", "⟨29.50⟩", "⟨28.50⟩"]


def test_a_clip_over_the_limit_is_refused_naming_the_limit(store, long_clip, tmp_path, monkeypatch):
    too_long = tmp_path / "too-long.wav"
    sf.write(too_long, np.zeros(601 * SAMPLE_RATE, dtype=np.int16), SAMPLE_RATE)
    with pytest.raises(web.UserError, match=r"^too-long.wav is 601.0 s long; the limit is 10 min$"):
        web.compare_clip(store, web.CompareRequest(str(too_long), SHARED, "en"))
    monkeypatch.setattr(store, "max_seconds", 40.0)
    with pytest.raises(web.UserError, match=r"long.wav is 45.0 s long; the limit is 40 s"):
        web.transcribe_clip(store, web.CompareRequest(str(long_clip), SHARED, "en"))


def test_an_unknown_long_form_mode_is_a_clear_error(store, long_clip):
    with pytest.raises(web.UserError, match="Unknown long-audio mode 'parallel'; choose sequential or"):
        web.compare_clip(store, web.CompareRequest(str(long_clip), SHARED, "en", long_form="parallel"))


def test_the_limit_from_a_flag_or_the_environment(monkeypatch):
    import app

    assert app.parse_args([]).max_seconds == web.MAX_APP_SECONDS == 600
    monkeypatch.setenv("SPECDEC_MAX_SECONDS", "120")
    assert app.parse_args([]).max_seconds == 120
    assert app.parse_args(["--max-seconds", "90"]).max_seconds == 90
    with pytest.raises(SystemExit):
        app.parse_args(["--max-seconds", "0"])
