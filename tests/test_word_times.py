"""Word timestamps (`whisper.word_times`): the target's own alignment over the text tokens it kept.

On the real whisper-base with its self-draft, decoding speculatively: the same words get the same times
with timestamp tokens and without, in English, German and French; the first word takes its time (as
faster-whisper times it); the words join into the text, in order, within the audio; a batch times each
clip as it is timed alone; a long file's words are in the file's seconds. On the demo models: a seeded
sampled decoding times its words too, and chunked long-form refuses them with a message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import srt
import torch
from test_batching import BATCH

from specdec.api import SpeculativeWhisper, Transcription
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, load_audio
from specdec.engine.cache import CachedDecoder
from specdec.options import TranscribeOptions
from specdec.subtitles import NoTimestamps
from specdec.whisper import word_times
from specdec.whisper.features import encode
from specdec.whisper.tokens import timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"
CLIPS = ["en-jfk.flac", "de-bahnhof.wav", "fr-marche.wav"]


@pytest.fixture(scope="module")
def self_pair(real_models) -> SpeculativeWhisper:
    return SpeculativeWhisper(draft_model="self", final_model=str(real_models["base"]), device="cpu")


@pytest.fixture(scope="module")
def alone(self_pair) -> Callable[[str], Transcription]:
    """An asset clip transcribed alone with word timestamps (speculatively, its language detected): decoded
    once for the module's tests."""
    found: dict[str, Transcription] = {}

    def transcription(name: str) -> Transcription:
        if name not in found:
            found[name] = self_pair.transcribe(ASSETS / name, word_timestamps=True, return_stats=True)[0]
        return found[name]

    return transcription


@pytest.fixture(scope="module")
def encoded(self_pair) -> Callable[[str], tuple[torch.Tensor, int]]:
    """(the target's encoder states (1, 1500, d_model), audio frames) of an asset clip under 30 s, as a
    decoding computes them: once per clip for the module's tests."""
    target, found = self_pair.pair.target, {}

    def states(name: str) -> tuple[torch.Tensor, int]:
        if name not in found:
            waveform, extractor = load_audio(ASSETS / name), target.processor.feature_extractor
            features = extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
            found[name] = encode(target.model, features)[0], math.ceil(len(waveform) / extractor.hop_length)
        return found[name]

    return states


@pytest.mark.parametrize("name", CLIPS)
def test_timestamp_tokens_change_no_words_time(self_pair, alone, encoded, name):
    """The same text tokens get the same times with timestamp tokens among them (a window decoded with
    timestamps) or without: generate()'s token times differ, as they align the timestamp tokens too and,
    without them, time the first word 0.00-0.00. A timestamp token takes no time; each text token does."""
    found = alone(name)
    assert found.result.num_drafted > 0  # decoded speculatively
    target = self_pair.pair.target
    config = target.model.generation_config
    states, frames = encoded(name)
    text, plain_prompt = list(found.token_ids), list(found.result.prompt_ids)
    assert config.no_timestamps_token_id == plain_prompt[-1]
    middle, begin = len(text) // 2, timestamp_begin(config)
    timed = [begin, *text[:middle], begin + 150, begin + 150, *text[middle:], begin + 500]
    spans = {}
    for prompt, generated in ((plain_prompt, text), (plain_prompt[:-1], timed)):
        sequence = [*prompt, *generated, config.eos_token_id]
        times = word_times.token_times(target.model, states[0], sequence, len(prompt), frames)
        spans[len(prompt)] = word_times.token_spans(times, len(prompt), 0.0)[: len(generated)]
    plain, with_timestamps = spans[len(plain_prompt)], spans[len(plain_prompt) - 1]
    assert list(found.result.token_spans) == plain
    assert [span for token, span in zip(timed, with_timestamps, strict=True) if token < begin] == plain
    assert all(
        start == end for token, (start, end) in zip(timed, with_timestamps, strict=True) if token >= begin
    )
    assert found.words[0].start == 0.0 < found.words[0].end  # the first word takes its time


def check_words(found, seconds: float) -> None:
    """The words join into the text, in order, within the audio: each starts where the one before ends or
    later (across a long file's windows, where each window is aligned on its own, within 0.1 s)."""
    words = found.words
    assert words and "".join(word.text for word in words).strip() == found.text
    assert all(0 <= word.start <= word.end <= seconds + 0.02 for word in words)
    pairs = list(zip(words, words[1:], strict=False))
    assert all(before.start <= after.start and before.end <= after.start + 0.1 for before, after in pairs)


def test_words_are_in_order_within_the_audio_and_make_the_text(self_pair, alone):
    found = alone("en-jfk.flac")
    check_words(found, 11.0)
    country = [(word.start, word.end) for word in found.words if word.text.startswith(" country")]
    assert country == [(5.76, 6.24), (9.94, 10.8)]  # faster-whisper's first "country": 5.76-6.24 s too
    assert (found.words[0].start, found.words[0].end) == (0.0, 0.52)  # faster-whisper's " And" too
    assert found.result.alignment_seconds > 0
    cues = list(srt.parse(found.to_srt(by_word=True)))  # word-level subtitles: a cue per word
    assert [(cue.start.total_seconds(), cue.end.total_seconds(), cue.content) for cue in cues] == [
        (word.start, word.end, word.text.strip()) for word in found.words
    ]
    assert found.to_vtt(by_word=True).count(" --> ") == len(found.words)
    plain = self_pair.transcribe(ASSETS / "en-jfk.flac", return_stats=True, max_new_tokens=4)[0]
    with pytest.raises(NoTimestamps, match="word_timestamps=True"):
        plain.to_srt(by_word=True)


def test_a_batch_times_each_clip_as_alone(self_pair, alone):
    """Three languages in one batch; each clip's words are those it gets decoded alone."""
    together = self_pair.transcribe(
        [ASSETS / name for name in CLIPS], word_timestamps=True, batch_size=3, return_stats=True
    )
    assert [t.words for t in together] == [alone(name).words for name in CLIPS]
    assert max(t.result.mean_batch_rows for t in together) > 1  # they shared passes


def test_a_long_file_is_timed_in_its_own_seconds(self_pair):
    waveform = load_audio(ASSETS / "long" / "en-six-parts.flac", max_seconds=MAX_LONG_SECONDS)
    (found,) = self_pair.transcribe_waveforms([waveform], TranscribeOptions(word_timestamps=True))
    seconds = len(waveform) / SAMPLE_RATE
    check_words(found, seconds)
    assert len(found.result.windows) > 2 and found.words[-1].start > 45  # the last windows' words, late


def test_sampled_decoding_times_words_and_chunked_refuses_them(shared_pair):
    options = TranscribeOptions(word_timestamps=True, temperature=0.8, seed=3, max_new_tokens=24)
    (found,) = shared_pair.transcribe_waveforms([BATCH["en-weather"]], options)
    assert found.result.token_spans is not None and len(found.result.token_spans) == len(found.token_ids)
    long = np.tile(BATCH["en-weather"], 6)
    with pytest.raises(ValueError, match="word timestamps work on sequential long-form"):
        shared_pair.transcribe_waveforms([long], TranscribeOptions.of(options, long_form="chunked"))


def test_the_alignment_pass_may_read_the_decodings_keys_and_values(self_pair, alone, encoded):
    """The keys and values a window's decoding computed, handed to the pass that times its words, give the
    times that projecting the encoder states again gives (the engine hands them over; they cost ~3x less)."""
    target = self_pair.pair.target
    found = alone("en-jfk.flac")
    states, frames = encoded("en-jfk.flac")
    decoder = CachedDecoder(target.model, states)
    prompt = list(found.result.prompt_ids)
    decoder.feed([prompt])
    cross = decoder.cross_keys_values_of(0)
    sequence = [*prompt, *found.token_ids, target.model.generation_config.eos_token_id]
    reused = word_times.token_times(target.model, states[0], sequence, len(prompt), frames, cross)
    assert reused == word_times.token_times(target.model, states[0], sequence, len(prompt), frames)
    assert [end for _, end in found.result.token_spans] == [round(t, 2) for t in reused[len(prompt) : -1]]


@pytest.mark.parametrize("name", ["en-jfk.flac", "de-bahnhof.wav"])
def test_the_alignment_is_transformers_own_on_real_attention(self_pair, alone, encoded, name):
    """`whisper.alignment` (the warping one anti-diagonal at a time) gives the starts transformers'
    `_extract_token_timestamps` gives, bit for bit, on the real model's attention over a clip's tokens; and
    its warping takes transformers' path on planted matrices with ties (all equal, repeated columns)."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping

    from specdec.whisper import alignment

    target = self_pair.pair.target.model
    found = alone(name)
    states, frames = encoded(name)
    prompt = list(found.result.prompt_ids)
    aligned, first = word_times.alignment_sequence(
        target.generation_config, [*prompt, *found.token_ids], len(prompt)
    )
    heads = target.generation_config.alignment_heads
    with torch.inference_mode():
        input_ids = torch.tensor([aligned[:-1]])
        attentions = word_times.cross_attentions(target, states, input_ids, {layer for layer, _ in heads})
        outputs = GenerateEncoderDecoderOutput(
            sequences=torch.tensor([aligned]), cross_attentions=(attentions,)
        )
        theirs = target._extract_token_timestamps(outputs, heads, num_frames=frames, num_input_ids=first)[0]
        ours = alignment.token_starts(attentions, heads, frames, first, target.config.median_filter_width)
    assert len(aligned) > 20 and torch.equal(ours, theirs)
    rng = np.random.default_rng(0)
    for matrix in (
        np.zeros((5, 9)),
        np.repeat(rng.standard_normal((6, 4)), 3, axis=1),
        rng.standard_normal((1, 7)),
    ):
        for ours_path, theirs_path in zip(
            alignment.dynamic_time_warping(matrix), _dynamic_time_warping(matrix), strict=True
        ):
            assert np.array_equal(ours_path, theirs_path)
