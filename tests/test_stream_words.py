"""The word rule of a live stream (`streaming.words`), on planted words: which words two or three
hypotheses agree on, where the newest hypothesis' words after the committed ones begin, and the words of a
real decoding, timed by the target's own alignment."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.audio import load_audio
from specdec.options import TranscribeOptions
from specdec.streaming.words import (
    StreamWord,
    agreed_length,
    hypothesis_words,
    retimed,
    sentence_end,
    tail_start,
    words_text,
)

ASSETS = Path(__file__).parent.parent / "assets"


def said(text: str, start: float = 0.0, step: float = 0.3, probability: float = 1.0) -> list[StreamWord]:
    """Words spelled as in `text`, one every `step` seconds from `start`."""
    return [
        StreamWord(f" {word}", (i,), start + i * step, start + (i + 1) * step - 0.05, probability, i)
        for i, word in enumerate(text.split())
    ]


def test_two_hypotheses_agree_on_their_common_start_spelled_alike():
    newest = said("And so my fellow Americans, ask not")
    previous = said("and so my fellow Americans. ask")
    assert agreed_length([newest, previous], 0.3, len(newest)) == 6  # case and punctuation aside
    assert agreed_length([newest, said("And so my fellow American ask")], 0.3, len(newest)) == 4
    assert agreed_length([newest, previous], 0.3, 3) == 3  # the limit: words not heard yet
    assert agreed_length([newest], 0.3, len(newest)) == 0  # one hypothesis agrees with nothing


def test_a_word_the_target_was_unsure_of_waits_for_three():
    """Whisper on the first seconds of en-weather wrote "but when a" twice (0.16-0.30 on "but"), then "The
    weather today": two unsure agreements commit nothing; three commit the unsure word."""
    unsure = [StreamWord(" but", (1,), 0.0, 0.2, 0.16, 0), *said("when a", 0.3)[0:2]]
    assert agreed_length([unsure, unsure], 0.3, 3) == 0
    assert agreed_length([unsure, unsure, said("The weather today")], 0.3, 3) == 0
    assert agreed_length([unsure, unsure, unsure], 0.3, 3) == 3


def test_the_tail_begins_after_the_newest_copy_of_the_committed_words():
    newest = said("And so my fellow Americans, ask not what your country")
    assert tail_start(newest, []) == 0
    assert tail_start(newest, newest[:4]) == 4
    moved = said("so my fellow", 0.3 + 2.0)  # a run of three, timed 2 s later by an earlier hypothesis
    assert tail_start(newest, moved) == 4
    # one word only counts near where it was: a later "can do for" repeats nothing committed
    repeated = said("what your country can do for you, ask what you can do for", 0.0)
    assert tail_start(repeated, repeated[:6]) == 6
    # spelled otherwise: the first word that starts after the last committed one ends
    assert tail_start(newest, said("And so my", 0.0, 0.31)[:3] + said("felo", 0.95)) == 4


def test_retiming_keeps_the_committed_text_and_takes_the_newest_times():
    committed = said("And so my fellow Americans.")
    newest = said("And so my fellow Americans, ask", 0.1)
    found = retimed(committed, newest, 5)
    assert [word.text for word in found] == [word.text for word in committed]
    assert [word.start for word in found] == [word.start for word in newest[:5]]
    assert sentence_end(found[-1]) and not sentence_end(newest[4])
    assert words_text(found) == [0, 1, 2, 3, 4]


@pytest.mark.slow  # the real whisper-base decodes JFK once
def test_the_words_of_a_decoding_are_its_text_timed_within_the_audio(real_pair):
    waveform = load_audio(ASSETS / "en-jfk.flac")
    options = TranscribeOptions(language="en", timestamps=True, word_timestamps=True)
    (found,) = real_pair.transcribe_waveforms([waveform], options)
    tokenizer = real_pair.pair.target.processor.tokenizer
    words = hypothesis_words(tokenizer, found.result, 100.0)
    assert real_pair.decode_text(words_text(words)) == found.text
    assert [word.text.strip() for word in words][:4] == ["And", "so", "my", "fellow"]
    assert all(100.0 <= word.start <= word.end <= 111.1 for word in words)
    assert [word.start for word in words] == sorted(word.start for word in words)
    assert all(0 < word.probability <= 1 for word in words)
    assert all(found.token_ids[word.position] == word.token_ids[-1] for word in words)
