"""The web app's handlers as plain functions, on the demo models: labels, badge, metrics, figures, WER."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec.api import Transcription
from specdec.app import compare, highlight, plots, views
from specdec.app import store as stores
from specdec.app.views import Comparison, verdict
from specdec.engine.fast_draft import CPU_DRAFT, default_settings
from specdec.options import DecodeOptions
from specdec.trace import (
    ACCEPTED,
    CORRECTED,
    DRAFT_ENCODER,
    DRAFT_MODEL,
    TARGET_ENCODER,
    DecodeResult,
    Encoding,
    Pass,
    Step,
    TokenRecord,
    speedup_bound,
)
from specdec.wer import alignment_html, word_errors

ASSETS = Path(__file__).parent.parent / "assets"
CLIP = str(ASSETS / "en-fellow-americans.wav")
SHARED = "shared"
SEPARATE = "separate"
# Random weights are unsure of every window (average log-probability about -1.2, under Whisper's -1.0): the
# page's temperature fallback would sample each one again; the tests that compare the runs decode greedily.
GREEDY = {"fallback": False}


@pytest.fixture(scope="module")
def store(demo_models) -> stores.ModelStore:
    target = str(demo_models["target"])
    pairs = {
        SEPARATE: (target, str(demo_models["draft-separate"])),
        SHARED: (target, str(demo_models["draft-shared"])),
    }
    return stores.ModelStore(pairs, device="cpu")


@pytest.fixture(scope="module", params=[False, True], ids=["text", "timestamps"])
def view(store, request) -> views.CompareView:
    reference = (ASSETS / "en-fellow-americans.txt").read_text()
    compare_request = compare.CompareRequest(
        CLIP, SHARED, "en", timestamps=request.param, reference=reference, **GREEDY
    )
    return compare.compare_clip(store, compare_request)


def test_outputs_are_identical_and_say_so(view):
    assert view.comparison.identical
    assert view.baseline_text == view.speculative_text
    assert "Identical" in view.verdict_html and "DIFFERENT" not in view.verdict_html


def test_highlight_labels_match_the_trace(view):
    """Every kept token in order with its trace label; each correction preceded by its rejected drafts."""
    result = view.comparison.speculative.result
    kept = [record for record in result.tokens if record.kept]
    shown = [span for span in view.spans if span.label != highlight.REJECTED and span.kept]
    assert [span.label for span in shown] == [record.label for record in kept]
    assert [span.step for span in shown] == [record.step for record in kept]
    steps = {step.index: step for step in result.steps}
    eos = view.comparison.speculative.result.tokens[-1].token_id  # every window ends with end-of-text here
    corrections = [r for r in result.tokens if r.label == CORRECTED and (r.kept or r.token_id == eos)]
    expected_rejected = sum(len(steps[r.step].drafted) - steps[r.step].n_accepted for r in corrections)
    assert sum(span.label == highlight.REJECTED for span in view.spans) == expected_rejected > 0
    labels = {span.label for span in view.spans}
    assert {"accepted", "corrected", "rejected"} <= labels  # the pair both agrees and disagrees here
    for label in labels:
        assert f'class="tok {label}"' in view.tokens_html or f'class="{label}"' in view.tokens_html


def test_highlighted_text_is_the_transcript(view):
    shown = "".join(span.text for span in view.spans if span.label != highlight.REJECTED and span.kept)
    assert re.sub(r"⟨\d+\.\d\d⟩", "", shown).strip() == view.speculative_text
    assert view.comparison.options.timestamps == ("⟨" in shown)


def test_token_texts_keep_characters_split_over_byte_tokens(store):
    tokenizer = store.whisper(SHARED).pair.target.processor.tokenizer
    text = " Grüße aus 東京, naïve café"
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    texts = highlight.token_texts(token_ids, tokenizer, timestamp_begin=10**9)
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


@pytest.mark.parametrize("label", [SEPARATE, SHARED])
def test_the_page_runs_the_draft_as_the_package_does(store, label):
    """The page's timings are the package's: its pairs' drafts run with SpeculativeWhisper's default
    settings (on a CPU the int8, restricted-vocabulary, lean draft), not the plain loaded draft."""
    whisper = store.whisper(label)
    settings = whisper.pair.draft_settings
    assert default_settings(whisper.pair.target.model) == CPU_DRAFT  # float32 on the CPU
    assert (settings.int8, settings.vocabulary, settings.lean_step) == (True, CPU_DRAFT.vocabulary, True)
    assert whisper.pair.draft is not whisper.pair.plain_draft


def test_sampling_verdict_is_not_an_alarm(store):
    request = compare.CompareRequest(CLIP, SEPARATE, "en", temperature=1.0, seed=3)
    comparison = compare.compare_clip(store, request).comparison
    message, good = verdict(comparison)
    assert good and (comparison.identical or "same distribution" in message)


def test_a_mismatch_is_loud(view):
    comparison = view.comparison
    swapped = Comparison(comparison.baseline, _other_transcription(comparison), comparison.options, True)
    message, good = verdict(swapped)
    assert not good and "DIFFERENT" in message
    assert "🚨" in views.verdict_html(swapped)


def _other_transcription(comparison):
    import dataclasses

    result = dataclasses.replace(comparison.speculative.result, token_ids=(1, 2, 3))
    return dataclasses.replace(comparison.speculative, result=result)


@pytest.mark.parametrize(
    "make_clip, message",
    [
        (lambda path: path.write_bytes(b""), "empty"),
        (lambda path: path.write_text("this is not audio at all"), "not-audio.wav"),
        (lambda path: sf.write(path, np.zeros(16_000 * 601, np.int16), 16_000), "the limit is 10 min"),
    ],
    ids=["empty", "not-audio", "too-long"],
)
def test_bad_audio_is_a_clear_error_and_the_next_request_works(store, tmp_path, make_clip, message):
    bad = tmp_path / "not-audio.wav"
    make_clip(bad)
    with pytest.raises(stores.UserError, match=message):
        compare.compare_clip(store, compare.CompareRequest(str(bad), SEPARATE, "en"))
    assert compare.compare_clip(
        store, compare.CompareRequest(CLIP, SEPARATE, "en", **GREEDY)
    ).comparison.identical


@pytest.mark.parametrize(
    "request_fields, message",
    [
        ({"audio": None}, "Record or upload"),
        ({"pair": "openai/whisper-medium"}, "Unknown model pair"),
        ({"temperature": -1.0}, "temperature"),
    ],
)
def test_bad_requests_are_clear_errors(store, request_fields, message):
    fields = {"audio": CLIP, "pair": SEPARATE, "language": "en", **request_fields}
    with pytest.raises(stores.UserError, match=message):
        compare.compare_clip(store, compare.CompareRequest(**fields))


def test_a_model_that_cannot_load_says_which_pair_runs_offline(tmp_path):
    store = stores.ModelStore({"pair": (str(tmp_path / "no-such-model"), str(tmp_path / "nor-this"))}, "cpu")
    with pytest.raises(stores.UserError, match="bundled pair"):
        store.whisper("pair")


def test_silence_is_decoded_without_error(store, tmp_path):
    """With the no-speech rule off, silence decodes as generate() would (on, the page says it is silent:
    tests/test_no_speech.py)."""
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(16_000 * 2, dtype=np.float32), 16_000)
    request = compare.CompareRequest(str(path), SHARED, "en", detect_no_speech=False, **GREEDY)
    view = compare.compare_clip(store, request)
    assert view.comparison.identical


def test_transcribe_only_returns_text_tokens_and_stats(store):
    text, tokens_html, stats = compare.transcribe_clip(
        store, compare.CompareRequest(CLIP, SHARED, "en", **GREEDY)
    )
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

    request = compare.CompareRequest(CLIP, SHARED, "en", reference="text")
    assert pickle.loads(pickle.dumps(request)) == request
    restored = pickle.loads(pickle.dumps(view))
    assert restored.comparison.identical and restored.tokens_html == view.tokens_html


def test_zero_gpu_time_limit_grows_with_the_clip(tmp_path):
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    sf.write(short, np.zeros(16_000 * 5, dtype=np.float32), 16_000)
    sf.write(long, np.zeros(16_000 * 600, dtype=np.float32), 8_000)  # 20 minutes by its header
    assert compare.gpu_seconds(compare.CompareRequest(str(short), "draft")) == 61
    assert compare.gpu_seconds(compare.CompareRequest(str(long), "draft")) == 300  # the cap
    assert compare.gpu_seconds(compare.CompareRequest(None, "draft")) == 70  # no audio: the task says so


def test_planted_steps_give_the_exact_spans(store):
    """Step 0 drafts a b c, keeps a, corrects to x; step 1 drafts y z, keeps y, corrects to end-of-text."""
    tokenizer = store.whisper(SHARED).pair.target.processor.tokenizer
    words = ["one", "two", "three", "four", "five", "six"]
    a, b, c, x, y, z = (tokenizer.encode(f" {word}", add_special_tokens=False)[0] for word in words)
    eos = tokenizer.eos_token_id
    steps = (
        Step(0, 0, 0, DRAFT_MODEL, (a, b, c), 1, x),
        Step(1, 0, 1, DRAFT_MODEL, (y, z), 1, eos),
    )
    tokens = (
        TokenRecord(a, ACCEPTED, 0, 0, 0.9, 0.8),
        TokenRecord(x, CORRECTED, 0, 0, 0.7, 0.1),
        TokenRecord(y, ACCEPTED, 1, 0, 0.9, 0.8),
        TokenRecord(eos, CORRECTED, 1, 0, 0.6, 0.2, kept=False),
    )
    passes = (Pass(0, 1, 0.1, 0.01, 0.02), Pass(1, 1, 0.2, 0.01, 0.02))
    result = DecodeResult((a, x, y), (), "en", tokens, steps, passes, (Encoding(0, "target", 1, 0.1),), 0.3)
    spans = highlight.token_spans(result, tokenizer, timestamp_begin=10**9)
    assert [(span.text, span.label) for span in spans] == [
        (" one", ACCEPTED), (" two", highlight.REJECTED), (" three", highlight.REJECTED),
        (" four", CORRECTED), (" five", ACCEPTED), (" six", highlight.REJECTED),
        (highlight.END_OF_TEXT, CORRECTED),
    ]  # fmt: skip
    assert [span.kept for span in spans][-1] is False
    seconds, counts = plots.cumulative_tokens(result)
    assert counts == [0, 2, 4] and seconds == pytest.approx([0.1, 0.13, 0.23])


def test_unknown_language_is_a_clear_error(store):
    with pytest.raises(stores.UserError, match="unsupported language 'klingon'"):
        compare.compare_clip(store, compare.CompareRequest(CLIP, SHARED, "klingon"))


def test_comparisons_alternate_which_run_goes_first(store):
    firsts = [
        compare.compare_clip(
            store, compare.CompareRequest(CLIP, SHARED, "en", **GREEDY)
        ).comparison.baseline_first
        for _ in "ab"
    ]
    assert firsts[0] != firsts[1]


def test_translation_is_scored_with_the_english_normaliser(view):
    import dataclasses

    comparison = view.comparison
    baseline = dataclasses.replace(comparison.baseline, text="the color")
    speculative = dataclasses.replace(comparison.speculative, text="the color")
    speculative = dataclasses.replace(
        speculative, result=dataclasses.replace(speculative.result, language="de")
    )
    for task, expected in (("translate", "WER 0.0%"), ("transcribe", "WER 50.0%")):
        options = DecodeOptions(language="de", task=task)
        scored = dataclasses.replace(comparison, baseline=baseline, speculative=speculative, options=options)
        assert views.wer_html("The colour.", scored).count(expected) == 2


def test_the_badge_says_how_far_end_to_end_could_go(view):
    """On a real comparison: the bound shown, never below what the run measured (its decode took time)."""
    comparison = view.comparison
    bound = comparison.total_speedup_bound
    assert bound > comparison.total_speedup
    shown = html.unescape(view.verdict_html)
    assert f"at most {bound:.2f}x" in shown and "speculative run's encoder took" in shown
    row = next(row for row in view.metrics if "no time" in row[0])
    assert row[1:] == ["–", f"{bound:.2f}x"]


def _planted(total: float, encodings: tuple[Encoding, ...], alignment: float = 0.0) -> DecodeResult:
    return DecodeResult((), (), "en", (), (), (), encodings, total, alignment_seconds=alignment)


def _compared(baseline: DecodeResult, speculative: DecodeResult) -> Comparison:
    return Comparison(
        Transcription("a", "", baseline), Transcription("a", "", speculative), DecodeOptions(), True
    )


TARGET_ENCODING, DRAFT_ENCODING = Encoding(0, TARGET_ENCODER, 1, 0.4), Encoding(1, DRAFT_ENCODER, 1, 0.1)


def test_the_bound_counts_what_the_speculative_run_spent_outside_its_decoding():
    """The target alone's 0.6 s over the speculative run's encoders (a draft's own included) and word
    alignment; no bound without an encoder call."""
    baseline = _planted(0.6, (TARGET_ENCODING,))
    assert speedup_bound(baseline, _planted(0.45, (TARGET_ENCODING,))) == pytest.approx(1.5)
    assert speedup_bound(baseline, _planted(0.5, (TARGET_ENCODING, DRAFT_ENCODING))) == pytest.approx(1.2)
    assert speedup_bound(baseline, _planted(0.5, (TARGET_ENCODING,), alignment=0.1)) == pytest.approx(1.2)
    assert speedup_bound(baseline, _planted(0.0, ())) is None


def test_the_bound_line_names_what_it_counts():
    baseline = _planted(0.6, (TARGET_ENCODING,))
    line = views.bound_line(_compared(baseline, _planted(0.45, (TARGET_ENCODING,))))
    assert line == (
        "End to end at most 1.50x, even with a decode taking no time: the speculative run's encoder took "
        "0.40 s; the target alone took 0.60 s in all."
    )
    both = views.bound_line(_compared(baseline, _planted(0.5, (TARGET_ENCODING, DRAFT_ENCODING), 0.1)))
    assert "at most 1.00x" in both and "target's and draft's encoders and word alignment took 0.60 s" in both
    nothing = _compared(baseline, _planted(0.0, ()))
    assert views.bound_line(nothing) == "" and "at most" not in views.verdict_html(nothing)
