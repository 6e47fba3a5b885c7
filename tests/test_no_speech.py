"""generate()'s no-speech rule (no_speech_threshold with logprob_threshold): a window whose target
no-speech probability is above the one threshold and whose tokens' average log-probability is below the
other is left empty, exactly as generate() with the same thresholds leaves it, speculative or not.

On the random-weight demo models the thresholds are planted between two clips' measured numbers, so that
one clip is skipped and the other kept, by either number; the numbers themselves are checked against the
ones generate() computes (spied on). On the real pair (whisper-base, a tiny.en draft): a pure tone and a
recording's noise floor give no text, speech is unchanged, and digital silence keeps Whisper's " you".
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import test_lossless
import torch
from test_lossless import CLIPS, reference_ids
from test_processing import transformers_processors
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
    WhisperNoSpeechDetection,
)
from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.whisper.logits import NoSpeechRule

ASSETS = Path(__file__).parent.parent / "assets"
MAX_NEW_TOKENS = 24  # the demo models' windows, kept short
WHISPER = {"no_speech_threshold": 0.6, "logprob_threshold": -1.0}  # openai/whisper's transcribe() defaults
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."  # noqa: E501


def tone(seconds: float = 5.0, hertz: float = 440.0) -> np.ndarray:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * hertz * t)).astype(np.float32)


def noise_floor(seconds: float = 5.0) -> np.ndarray:
    """A quiet room's recording: white noise 60 dB below full scale."""
    rng = np.random.default_rng(0)
    return (1e-3 * rng.standard_normal(round(seconds * SAMPLE_RATE))).astype(np.float32)


# --- the options and the rule, pure ---


def test_no_speech_threshold_needs_logprob_threshold():
    """generate() fails on no_speech_threshold alone (UnboundLocalError); the options say why at once."""
    with pytest.raises(ValueError, match="needs logprob_threshold"):
        DecodeOptions(no_speech_threshold=0.6)
    with pytest.raises(ValueError, match="finite"):
        DecodeOptions(no_speech_threshold=math.nan, logprob_threshold=-1.0)
    assert DecodeOptions(logprob_threshold=-1.0).no_speech_threshold is None  # alone: measured only
    assert DecodeOptions().no_speech_threshold is None and DecodeOptions().logprob_threshold is None


def test_the_rule_is_both_thresholds_strictly_in_float32():
    rule = NoSpeechRule(50362, 0, no_speech_threshold=0.6, logprob_threshold=-1.0, temperature=0.0)
    assert rule.judge(0.61, -1.01)
    assert not rule.judge(0.59, -5.0) and not rule.judge(0.99, -0.99)  # one number is not enough
    assert not rule.judge(0.6, -2.0) and not rule.judge(0.9, -1.0)  # strictly past the thresholds
    # 0.6 is 0.60000002 in float32, as generate() compares it: a float64 0.6000000001 is not above it
    assert not rule.judge(0.6000000001, -2.0)
    measured_only = dataclasses.replace(rule, no_speech_threshold=None)
    assert not measured_only.judge(0.99, -5.0)
    assert rule.avg_logprob([-0.5, -1.5, -1.0]) == pytest.approx(-1.0)


def test_an_option_left_none_takes_the_generation_configs_value():
    """generate()'s `_set_thresholds_and_condition`: a checkpoint may set the thresholds itself."""
    config = GenerationConfig(decoder_start_token_id=50258, no_timestamps_token_id=50364)
    prompt = [50362, 11, 12, 50258, 50259, 50360, 50364]  # previous text, then <|startoftranscript|>
    measuring = NoSpeechRule.of(config, DecodeOptions(), prompt)  # no thresholds: it measures only
    assert not measuring.judges and measuring.logprob_threshold is None
    config.no_speech_threshold, config.logprob_threshold = 0.5, -0.8
    rule = NoSpeechRule.of(config, DecodeOptions(logprob_threshold=-2.0), prompt)
    assert (rule.no_speech_threshold, rule.logprob_threshold) == (0.5, -2.0)
    assert rule.no_speech_token == 50363 and rule.sot_index == 3
    config.logprob_threshold = None
    with pytest.raises(ValueError, match="needs logprob_threshold"):
        NoSpeechRule.of(config, DecodeOptions(), prompt)


# --- the demo models: planted thresholds, both branches ---


def measured(whisper, waveform: np.ndarray, options: DecodeOptions) -> tuple[float, float]:
    """A window's (no-speech probability, average log-probability), nothing skipped (no probability
    exceeds 1)."""
    options = dataclasses.replace(options, no_speech_threshold=1.0, logprob_threshold=0.0)
    (window,) = whisper.transcribe_waveforms([waveform], options)[0].result.windows
    return window.no_speech_prob, window.avg_logprob


@pytest.mark.parametrize("planted", ["no_speech_threshold", "logprob_threshold"])
def test_planted_threshold_skips_one_clip_and_keeps_the_other_as_generate(separate_pair, planted):
    """Between two clips' numbers: the clip past it is skipped, the other kept; speculative (the two clips
    in one batch) == target alone == generate() with the same thresholds."""
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS)
    clips = [CLIPS["chirp-4s"], CLIPS["noise-2s"]]
    numbers = [measured(separate_pair, clip, options) for clip in clips]
    if planted == "no_speech_threshold":  # every average is below 0: the probability decides
        low, high = sorted(probability for probability, _ in numbers)
        assert high > 2 * low  # random weights: about 1e-11, but not the same
        options = dataclasses.replace(
            options, no_speech_threshold=math.sqrt(low * high), logprob_threshold=0.0
        )
        skipped = [probability == high for probability, _ in numbers]
    else:  # every probability is above 0: the average decides
        low, high = sorted(average for _, average in numbers)
        assert high - low > 0.01
        options = dataclasses.replace(options, no_speech_threshold=0.0, logprob_threshold=(low + high) / 2)
        skipped = [average == low for _, average in numbers]
    assert sorted(skipped) == [False, True]

    together = separate_pair.transcribe_waveforms(clips, TranscribeOptions.of(options, batch_size=len(clips)))
    for clip, transcription, skip in zip(clips, together, skipped, strict=True):
        generated = reference_ids(separate_pair, clip, options)
        (alone,) = separate_pair.transcribe_waveforms(
            [clip], TranscribeOptions.of(options, speculative=False)
        )
        assert list(transcription.token_ids) == generated == list(alone.token_ids)
        (window,) = transcription.result.windows
        assert window.no_speech is skip and transcription.result.no_speech is skip
        assert (transcription.text == "") is skip and bool(generated) is not skip
        assert transcription.result.num_generated > 0  # decoded, then dropped: the records say so
        assert all(not token.kept for token in transcription.result.tokens) is skip


def spied_generate(monkeypatch, whisper, waveform: np.ndarray, options: DecodeOptions) -> list[tuple]:
    """generate()'s own (no-speech probability, average log-probability) of every window it decodes."""
    probabilities, averages = [], []
    detect, average = WhisperNoSpeechDetection.__call__, WhisperGenerationMixin._retrieve_avg_logprobs

    def spy_detect(self, input_ids, scores):
        scores = detect(self, input_ids, scores)
        if input_ids.shape[1] == self.begin_index:
            probabilities.append(float(self.no_speech_prob[0]))
        return scores

    def spy_average(scores, tokens, temperature):
        averages.append(float(average(scores, tokens, temperature)))
        return averages[-1]

    monkeypatch.setattr(WhisperNoSpeechDetection, "__call__", spy_detect)
    monkeypatch.setattr(WhisperGenerationMixin, "_retrieve_avg_logprobs", staticmethod(spy_average))
    test_lossless._generate(whisper.pair.target, waveform, options)  # not the memo: under the spies
    return list(zip(probabilities, averages, strict=True))


@pytest.mark.parametrize("asked", [True, False], ids=["rule-asked", "measured-only"])
@pytest.mark.parametrize("case", ["timestamps-seek", "previous-text"])
def test_the_numbers_are_the_targets_as_generate_computes_them(separate_pair, monkeypatch, case, asked):
    """Window by window (the seek loop decodes a clip's rest again with timestamps), and with a previous
    text before <|startoftranscript|>: the probability and the average generate() judges by, measured
    whether or not the rule was asked for (without it, for the record: OpenAI's verbose_json reports
    both)."""
    tokenizer = separate_pair.pair.target.processor.tokenizer
    previous = tuple(tokenizer.encode(" Weather and travel.", add_special_tokens=False))
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS, **WHISPER)
    if case == "timestamps-seek":
        options = dataclasses.replace(options, timestamps=True, max_new_tokens=None)
    else:
        options = dataclasses.replace(options, prompt_ids=previous)
    waveform = CLIPS["noise-2s"]
    ours_options = (
        options if asked else dataclasses.replace(options, no_speech_threshold=None, logprob_threshold=None)
    )
    result = separate_pair.transcribe_waveforms([waveform], ours_options)[0].result
    ours = [(window.no_speech_prob, window.avg_logprob) for window in result.windows]
    theirs = spied_generate(monkeypatch, separate_pair, waveform, options)
    assert len(ours) == len(theirs) >= (2 if case == "timestamps-seek" else 1)
    for (probability, average), (generate_probability, generate_average) in zip(ours, theirs, strict=True):
        assert probability == pytest.approx(generate_probability, rel=1e-4)  # the target's, not the draft's
        assert average == pytest.approx(generate_average, rel=1e-5)


def test_sampled_average_is_generates_formula(separate_pair):
    """Sampling: each token's log-probability is the log-softmax of the warped scores generate() returns
    times the temperature (`_retrieve_avg_logprobs`), recomputed here with transformers' own processors
    on one full target pass over the sampled window."""
    options = DecodeOptions(
        language="en", temperature=0.7, top_p=0.9, seed=3, max_new_tokens=MAX_NEW_TOKENS, **WHISPER
    )
    result = separate_pair.transcribe_waveforms([CLIPS["chirp-4s"]], options)[0].result
    (window,) = result.windows
    prompt, generated = list(result.prompt_ids), [token.token_id for token in result.tokens]
    target = separate_pair.pair.target
    features = target.processor.feature_extractor(
        CLIPS["chirp-4s"], sampling_rate=16_000, return_tensors="pt"
    )
    with torch.inference_mode():
        logits = target.model(
            input_features=features.input_features, decoder_input_ids=torch.tensor([prompt + generated])
        ).logits[0, len(prompt) - 1 : -1]  # (generated, vocab)
    config = target.model.generation_config
    processors = LogitsProcessorList(
        [
            *transformers_processors(config, len(prompt), False),
            TemperatureLogitsWarper(0.7),
            TopPLogitsWarper(0.9),
        ]
    )
    sequence = prompt + generated
    scores = [
        processors(torch.tensor([sequence[: len(prompt) + i]]), logits[i : i + 1].float())[0]
        for i in range(len(generated))
    ]
    expected = WhisperGenerationMixin._retrieve_avg_logprobs(scores, torch.tensor(generated), 0.7)
    assert window.avg_logprob == pytest.approx(float(expected), rel=1e-4)


# --- the real pair: silence, a tone, speech ---


@pytest.mark.parametrize(
    ("name", "waveform", "timestamps"),
    [("tone", tone(), True), ("noise-floor", noise_floor(), False)],
    ids=["tone-440hz-timestamps", "noise-floor"],
)
def test_real_no_speech_gives_no_text_as_generate(real_pair, name, waveform, timestamps):
    options = DecodeOptions(language="en", timestamps=timestamps, **WHISPER)
    speculative = real_pair.transcribe_waveforms([waveform], options)[0]
    alone = real_pair.transcribe_waveforms([waveform], TranscribeOptions.of(options, speculative=False))[0]
    assert list(speculative.token_ids) == reference_ids(real_pair, waveform, options) == list(alone.token_ids)
    assert speculative.token_ids == () and speculative.text == "" and speculative.result.no_speech, name
    (window,) = speculative.result.windows
    assert window.no_speech_prob > 0.6 and window.avg_logprob < -1.0
    off = dataclasses.replace(options, no_speech_threshold=None, logprob_threshold=None)
    assert real_pair.transcribe_waveforms([waveform], off)[0].text  # without the rule: words out of nothing


def test_real_digital_silence_keeps_whispers_you(real_pair):
    """All-zero audio: base is sure of " you" (average log-probability about -0.45, above -1.0), so
    Whisper's rule keeps it, in generate() as here."""
    waveform = np.zeros(5 * SAMPLE_RATE, dtype=np.float32)
    options = DecodeOptions(language="en", **WHISPER)
    speculative = real_pair.transcribe_waveforms([waveform], options)[0]
    assert list(speculative.token_ids) == reference_ids(real_pair, waveform, options)
    (window,) = speculative.result.windows
    assert speculative.text == "you" and window.no_speech_prob > 0.9 and window.avg_logprob > -1.0


def test_real_speech_is_unchanged(real_pair):
    waveform = load_audio(ASSETS / "en-jfk.flac")
    options = DecodeOptions(language="en", **WHISPER)
    speculative = real_pair.transcribe_waveforms([waveform], options)[0]
    assert list(speculative.token_ids) == reference_ids(real_pair, waveform, options)
    assert speculative.text == JFK and not speculative.result.no_speech
    (window,) = speculative.result.windows
    assert window.no_speech_prob < 0.1 and not window.no_speech


def test_the_app_shows_no_speech_detected_under_its_verdict(real_pair):
    """The Compare view with the app's default (Whisper's 0.6 / -1.0): both runs empty, said plainly."""
    from specdec.app import compare, views

    options = compare.CompareRequest(audio="tone.wav", pair="base", language="en").options()
    assert (options.no_speech_threshold, options.logprob_threshold) == (0.6, -1.0)
    off = compare.CompareRequest(audio="tone.wav", pair="base", detect_no_speech=False).options()
    assert off.no_speech_threshold is None  # (logprob_threshold stays -1.0: the fallback's, on by default)
    both_off = compare.CompareRequest(audio="tone.wav", pair="base", detect_no_speech=False, fallback=False)
    assert both_off.options().no_speech_threshold is None and both_off.options().logprob_threshold is None
    comparison = compare.compare(real_pair, tone(), options)
    view = views.build_view(real_pair, comparison, reference="")
    assert view.baseline_text == view.speculative_text == views.NO_SPEECH == "No speech detected"
    assert "no speech detected in either run" in view.verdict_html and comparison.identical
    assert views.details(view)["no_speech"] and views.details(view)["windows"][0]["no_speech"]


def test_the_app_says_a_digitally_silent_clip_holds_no_speech(demo_models, tmp_path):
    """Whisper's rule keeps " you" on digital silence (above); the page, with the rule on, says there is no
    speech before decoding, and decodes it as generate() would with the rule off."""
    import soundfile as sf

    from specdec.app import compare
    from specdec.app import store as stores
    from specdec.app.store import UserError

    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu")
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(2 * 16_000, np.float32), 16_000)
    request = compare.CompareRequest(audio=str(silent), pair=store.default_pair, language="en")
    with pytest.raises(UserError, match="No speech detected: the recording is silent"):
        compare.prepare(store, request)
    off = compare.CompareRequest(audio=str(silent), pair=store.default_pair, detect_no_speech=False)
    assert len(compare.prepare(store, off)[2]) == 2 * 16_000
