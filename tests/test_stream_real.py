"""A live stream's final text is what the stream heard, on real speech and real weights (whisper-base with a
whisper-tiny.en draft): the committed text at the end equals `transcribe` on the same audio within a few
percent WER, on short clips and on 42 s of dense speech (past a 30 s window). The live policy cuts windows
elsewhere than `transcribe` does (so words at the cuts may differ), but it never drops speech."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.streaming.playback import stream_audio
from specdec.streaming.session import StreamOptions
from specdec.wer import normalize, word_errors

ASSETS = Path(__file__).parent.parent / "assets"
MAX_SHORT_WER = 0.05  # measured 0 % on en-weather (it ended "but when a" before)
MAX_LONG_WER = 0.10  # measured 6.9 % (7.5 % on all 66 s of it)
# en-six-parts up to the pause after its fourth part: past a 30 s window, so the stream commits and cuts
# its buffer mid-speech (at 2 s, and at 23 s when the buffer passes trim_seconds) and carries its text on
# in the prompt, as on the whole minute (which cuts once more, at 42 s, the same way)
LONG_SECONDS = 42.2
PARTS = ("one", "two", "three", "four")


def streamed_and_whole(real_pair, audio: Path | np.ndarray) -> tuple[str, str]:
    rate = SAMPLE_RATE if isinstance(audio, np.ndarray) else None
    updates = list(stream_audio(real_pair, audio, StreamOptions(language="en"), sample_rate=rate))
    return updates[-1].committed_text, real_pair.transcribe(audio, language="en", sample_rate=rate)[0]


@pytest.mark.slow  # real models: each clip streamed in 1 s updates, then transcribed
@pytest.mark.parametrize("name", ["en-weather.wav", "en-fellow-americans.wav"])
def test_a_short_stream_ends_with_all_it_heard(real_pair, name):
    streamed, whole = streamed_and_whole(real_pair, ASSETS / name)
    print(f"stream: {streamed!r}\ntranscribe: {whole!r}")
    assert word_errors(whole, streamed).wer <= MAX_SHORT_WER


@pytest.mark.slow  # 42 s of speech streamed: ~42 updates
def test_a_long_stream_of_speech_ends_whole(real_pair):
    waveform = load_audio(ASSETS / "long" / "en-six-parts.flac", max_seconds=None)
    streamed, whole = streamed_and_whole(real_pair, waveform[: round(LONG_SECONDS * SAMPLE_RATE)])
    print(f"stream: {streamed!r}\ntranscribe: {whole!r}")
    errors = word_errors(whole, streamed)
    assert errors.num_reference_words > 120 and errors.wer <= MAX_LONG_WER
    said = normalize(streamed, "en")
    for digit, word in enumerate(PARTS, start=1):
        assert f"part {digit} " in said or f"part {word} " in said, f"part {word} is missing"


@pytest.mark.slow  # 22 s of speech streamed in 1 s updates
def test_a_clip_said_twice_with_a_short_pause_keeps_every_word_of_both(real_pair):
    """JFK, 0.3 s of silence (too short to end the utterance), JFK again: every word `transcribe` hears
    in the clip is in the stream's text twice, in order, and nothing is said three times (the committed
    text once lost and garbled words at a commit here: "my fellow America  and not what your country")."""
    jfk = load_audio(ASSETS / "en-jfk.flac")
    twice = np.concatenate([jfk, np.zeros(round(0.3 * SAMPLE_RATE), np.float32), jfk])
    streamed, _ = streamed_and_whole(real_pair, twice)
    once = normalize(real_pair.transcribe(jfk, language="en", sample_rate=SAMPLE_RATE)[0], "en").split()
    said = normalize(streamed, "en").split()
    print(f"stream: {streamed!r}")
    found = iter(said)
    assert all(word in found for word in once + once), "a word of the clip is missing"  # a subsequence
    assert len(said) <= 2 * len(once) + 2
