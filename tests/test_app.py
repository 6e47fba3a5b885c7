"""The web app's handlers as plain functions, on the demo models: labels, badge, metrics, figures, WER."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec import highlight, plots, web
from specdec.compare import Comparison, verdict
from specdec.trace import CORRECTED
from specdec.wer import alignment_html, word_errors

ASSETS = Path(__file__).parent.parent / "assets"
CLIP = str(ASSETS / "en-fellow-americans.wav")
SHARED = "shared"
SEPARATE = "separate"


@pytest.fixture(scope="module")
def store(demo_models) -> web.ModelStore:
    drafts = {SEPARATE: str(demo_models["draft-separate"]), SHARED: str(demo_models["draft-shared"])}
    return web.ModelStore(str(demo_models["target"]), drafts, device="cpu")


@pytest.fixture(scope="module", params=[False, True], ids=["text", "timestamps"])
def view(store, request) -> web.CompareView:
    reference = (ASSETS / "en-fellow-americans.txt").read_text()
    compare_request = web.CompareRequest(CLIP, SHARED, "en", timestamps=request.param, reference=reference)
    return web.compare_clip(store, compare_request)


def test_outputs_are_identical_and_say_so(view):
    assert view.comparison.identical
    assert view.baseline_text == view.speculative_text
    assert "Identical" in view.verdict_html and "DIFFERENT" not in view.verdict_html


def test_highlight_labels_match_the_trace(view):
    """Every kept token in order with its trace label; each correction preceded by its rejected drafts."""
    result = view.comparison.speculative.result
    kept = [record for record in result.tokens if record.kept]
    shown = [span for span in view.spans if span.label != highlight.REJECTED]
    assert [span.label for span in shown] == [record.label for record in kept]
    assert [span.step for span in shown] == [record.step for record in kept]
    steps = {step.index: step for step in result.steps}
    expected_rejected = sum(
        len(steps[r.step].drafted) - steps[r.step].n_accepted for r in kept if r.label == CORRECTED
    )
    assert sum(span.label == highlight.REJECTED for span in view.spans) == expected_rejected > 0
    labels = {span.label for span in view.spans}
    assert {"accepted", "corrected", "rejected"} <= labels  # the pair both agrees and disagrees here
    for label in labels:
        assert f'class="tok {label}"' in view.tokens_html or f'class="{label}"' in view.tokens_html


def test_highlighted_text_is_the_transcript(view):
    shown = "".join(span.text for span in view.spans if span.label != highlight.REJECTED)
    assert re.sub(r"⟨\d+\.\d\d⟩", "", shown).strip() == view.speculative_text
    assert view.comparison.options.timestamps == ("⟨" in shown)


def test_token_texts_keep_characters_split_over_byte_tokens(store):
    tokenizer = store.whisper(SHARED).pair.target.processor.tokenizer
    text = " Grüße aus 東京, naïve café"
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    texts = highlight._token_texts(token_ids, tokenizer, timestamp_begin=10**9)
    assert len(texts) == len(token_ids) and "".join(texts) == text


def test_metrics_table_reports_the_traces(view):
    rows = {row[0]: row[1:] for row in view.metrics}
    baseline, speculative = view.comparison.baseline.result, view.comparison.speculative.result
    assert rows["target passes"] == [str(baseline.num_target_passes), str(speculative.num_target_passes)]
    assert rows["tokens generated"] == [str(baseline.num_generated)] * 2
    saved = baseline.num_target_passes - speculative.num_target_passes
    assert rows["target passes saved"][1].startswith(f"{saved} (") and saved > 0
    assert rows["acceptance rate"][1].startswith(f"{speculative.acceptance_rate:.0%}")
    for name in ("encode time (s)", "decode time (s)", "total time (s)", "tokens / s (decode)"):
        assert all(float(value) > 0 for value in rows[name])


def test_figures_hold_the_traces(view):
    baseline, speculative = view.comparison.baseline.result, view.comparison.speculative.result
    timeline = {trace.name: trace for trace in view.timeline.data}
    assert timeline["target alone"].y[-1] == baseline.num_generated
    assert timeline["speculative"].y[-1] == speculative.num_generated
    assert len(timeline["speculative"].x) == speculative.num_target_passes + 1
    assert all(np.diff(timeline["speculative"].x) >= 0)
    bars = {trace.name: trace for trace in view.steps.data}
    assert list(bars["drafted"].y) == [len(step.drafted) for step in speculative.steps]
    assert list(bars["accepted"].y) == [step.n_accepted for step in speculative.steps]
    stacked = {trace.name: trace.x for trace in view.breakdown.data}
    for run, result in enumerate((baseline, speculative)):
        assert sum(stacked[part][run] for part in plots.BREAKDOWN_COLOURS) == pytest.approx(
            result.total_seconds, rel=1e-6
        )
    assert stacked["draft"][0] == 0 and stacked["draft"][1] > 0


def test_wer_is_shown_for_both_runs(view):
    assert view.wer_html.count("WER ") == 2
    assert "target alone" in view.wer_html and "speculative" in view.wer_html


def test_runs_alternate_their_order(store):
    orders = [store.next_baseline_first() for _ in range(4)]
    assert orders[0] != orders[1] and orders[:2] == orders[2:]


def test_sampling_verdict_is_not_an_alarm(store):
    request = web.CompareRequest(CLIP, SEPARATE, "en", temperature=1.0, seed=3)
    comparison = web.compare_clip(store, request).comparison
    message, good = verdict(comparison)
    assert good and (comparison.identical or "same distribution" in message)


def test_a_mismatch_is_loud(view):
    comparison = view.comparison
    swapped = Comparison(comparison.baseline, _other_transcription(comparison), comparison.options, True)
    message, good = verdict(swapped)
    assert not good and "DIFFERENT" in message
    assert "🚨" in web.verdict_html(swapped)


def _other_transcription(comparison):
    import dataclasses

    result = dataclasses.replace(comparison.speculative.result, token_ids=(1, 2, 3))
    return dataclasses.replace(comparison.speculative, result=result)


@pytest.mark.parametrize(
    "make_clip, message",
    [
        (lambda path: path.write_bytes(b""), "empty"),
        (lambda path: path.write_text("this is not audio at all"), "not-audio.wav"),
        (lambda path: sf.write(path, np.zeros((16_000 * 31,)), 16_000), "30"),
    ],
    ids=["empty", "not-audio", "too-long"],
)
def test_bad_audio_is_a_clear_error_and_the_next_request_works(store, tmp_path, make_clip, message):
    bad = tmp_path / "not-audio.wav"
    make_clip(bad)
    with pytest.raises(web.UserError, match=message):
        web.compare_clip(store, web.CompareRequest(str(bad), SEPARATE, "en"))
    assert web.compare_clip(store, web.CompareRequest(CLIP, SEPARATE, "en")).comparison.identical


@pytest.mark.parametrize(
    "request_fields, message",
    [
        ({"audio": None}, "Record or upload"),
        ({"draft": "openai/whisper-medium"}, "Unknown draft model"),
        ({"temperature": -1.0}, "temperature"),
    ],
)
def test_bad_requests_are_clear_errors(store, request_fields, message):
    fields = {"audio": CLIP, "draft": SEPARATE, "language": "en", **request_fields}
    with pytest.raises(web.UserError, match=message):
        web.compare_clip(store, web.CompareRequest(**fields))


def test_a_model_that_cannot_load_says_how_to_start_the_demo(tmp_path):
    store = web.ModelStore(str(tmp_path / "no-such-model"), {"draft": str(tmp_path / "nor-this")}, "cpu")
    with pytest.raises(web.UserError, match="--demo-models"):
        store.whisper("draft")


def test_silence_is_decoded_without_error(store, tmp_path):
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(16_000 * 2, dtype=np.float32), 16_000)
    view = web.compare_clip(store, web.CompareRequest(str(path), SHARED, "en"))
    assert view.comparison.identical


def test_transcribe_only_returns_text_tokens_and_stats(store):
    text, tokens_html, stats = web.transcribe_clip(store, web.CompareRequest(CLIP, SHARED, "en"))
    assert text and "specdec-tokens" in tokens_html and stats["speculative"]["num_target_passes"] > 0


def test_wer_known_answer_with_whisper_normaliser():
    errors = word_errors(
        "Mr. Smith paid $20 for the colour TV.", "mister smith paid twenty dollars for the color tv"
    )
    assert errors.wer == 0.0
    errors = word_errors("the cat sat on the mat", "the cat sat on a mat today", "en")
    assert (errors.substitutions, errors.deletions, errors.insertions) == (1, 0, 1)
    assert errors.wer == pytest.approx(2 / 6)
    html = alignment_html(errors)
    assert "<del>the</del>→<b>a</b>" in html and "+today" in html
    assert word_errors("Der Zug fährt ab.", "der zug fährt", "de").deletions == 1


def test_requests_and_views_pickle_for_zero_gpu(view):
    """ZeroGPU pickles a GPU task's arguments and results between processes."""
    import pickle

    request = web.CompareRequest(CLIP, SHARED, "en", reference="text")
    assert pickle.loads(pickle.dumps(request)) == request
    restored = pickle.loads(pickle.dumps(view))
    assert restored.comparison.identical and restored.tokens_html == view.tokens_html
