"""Live transcription without a browser: a clip fed in chunks, as the Live view and `stream` feed it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.streaming.session import StreamOptions, StreamSession, quietest_pause
from specdec.trace import TARGET, DecodeResult, TokenRecord
from specdec.whisper.tokens import timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"
CHUNK = SAMPLE_RATE  # 1 s


def chunks(waveform: np.ndarray, size: int = CHUNK) -> list[np.ndarray]:
    return [waveform[start : start + size] for start in range(0, len(waveform), size)]


def speech(name: str = "en-weather") -> np.ndarray:
    return load_audio(ASSETS / f"{name}.wav")


def run(session: StreamSession, waveform: np.ndarray) -> list:
    return [session.feed(chunk) for chunk in chunks(waveform)]


@pytest.fixture(scope="module")
def trimmed_stream(separate_pair):
    """Two clips back to back, with a short buffer limit so that buffers are cut and prompts passed."""
    waveform = np.concatenate(
        [speech("en-weather")[: 5 * SAMPLE_RATE], speech("en-fellow-americans")[: 4 * SAMPLE_RATE]]
    )
    options = StreamOptions(language="en", trim_seconds=3.0, max_load=None)  # every chunk decoded
    session = StreamSession(separate_pair, options)
    return waveform, session, run(session, waveform)


def assert_each_is_the_target_alone(whisper, waveform: np.ndarray, decoded: list) -> None:
    """Each decoded update's hypothesis is the target alone on that update's buffer, with its prompt."""
    for update in decoded:
        start = round(update.buffer_start_seconds * SAMPLE_RATE)
        buffer = waveform[start : round(update.stream_seconds * SAMPLE_RATE)]
        options = DecodeOptions(language=update.language, timestamps=True, prompt_ids=update.prompt_ids)
        alone = whisper.transcribe_waveforms([buffer], TranscribeOptions.of(options, speculative=False))[0]
        assert update.hypothesis == alone.token_ids, f"update {update.index}"


def test_every_update_is_the_target_alone_on_its_buffer(separate_pair, trimmed_stream):
    waveform, _, updates = trimmed_stream
    decoded = [update for update in updates if update.decoded]
    assert len(decoded) >= 8 and any(update.prompt_ids for update in decoded)  # trimmed at least once
    assert_each_is_the_target_alone(separate_pair, waveform, decoded)
    accepted = sum(stats["accepted"] for update in decoded for stats in update.proposals.values())
    drafted = sum(stats["drafted"] for update in decoded for stats in update.proposals.values())
    assert 0 < accepted < drafted


def test_committed_text_only_grows(trimmed_stream):
    _, session, updates = trimmed_stream
    texts = [update.committed_text for update in updates] + [session.finish().committed_text]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    assert texts[-1] and len(texts[-1]) > len(texts[len(texts) // 2])


def test_clear_and_finish_reset_and_commit(separate_pair):
    session = StreamSession(separate_pair, StreamOptions(language="en"))
    run(session, speech()[: 3 * SAMPLE_RATE])
    stopped = session.finish()
    assert stopped.committed_text and not stopped.tentative_text
    session.clear()
    assert session.committed_text == "" and session.updates == [] and len(session.buffer) == 0
    assert session.feed(np.zeros(CHUNK, dtype=np.float32)).decoded is False


def test_a_slow_stream_decodes_fewer_longer_updates_and_every_one_is_the_target_alone(separate_pair):
    """At a pace no update can keep (max_load tiny), speech is held back up to max_wait_seconds: an update
    every 2 s of audio instead of every chunk, each the target's own on its buffer, and the held-back end
    decoded where the speech ends (the clip's silent last chunk), its hypothesis committed whole."""
    waveform = speech()  # 6.4 s
    options = StreamOptions(language="en", vad=False, max_load=1e-9, max_wait_seconds=2.0)
    session = StreamSession(separate_pair, options)
    updates = [*run(session, waveform), session.finish()]
    decoded = [update for update in updates if update.decoded]
    assert [update.held_back for update in updates[:6]] == [False, True, False, True, False, True]
    assert len(decoded) == 4 and not updates[-2].speech and updates[-2].decoded
    assert updates[-2].committed_tokens == len(updates[-2].hypothesis) and len(session.buffer) == 0
    assert_each_is_the_target_alone(separate_pair, waveform, decoded)
    assert session.committed_text == updates[-2].committed_text != ""


def test_speech_held_back_is_decoded_where_the_utterance_ends(separate_pair):
    """An utterance held back for the pace and then ended by silence: the silent chunk decodes it and
    commits it whole, so nothing said waits for the next utterance."""
    words = load_audio(ASSETS / "en-jfk.flac")[round(3.2 * SAMPLE_RATE) : round(4.2 * SAMPLE_RATE)]
    stream = np.concatenate([words, np.zeros(2 * SAMPLE_RATE, np.float32)])
    options = StreamOptions(language="en", max_load=1e-9)
    session = StreamSession(separate_pair, options)
    session.last_update_seconds = 1.0  # as if an earlier update had been slow
    held, ended, rested = run(session, stream)
    assert held.speech and held.held_back and not held.decoded
    assert not ended.speech and ended.decoded and ended.committed_tokens == len(ended.hypothesis) > 0
    assert ended.committed_text == separate_pair.decode_text(list(ended.hypothesis))
    assert not rested.decoded and session.committed_text == ended.committed_text


def test_silence_is_not_decoded_and_invents_no_text(separate_pair):
    session = StreamSession(separate_pair, StreamOptions(language="en"))
    quiet = 1e-4 * np.random.default_rng(0).standard_normal(CHUNK).astype(np.float32)
    updates = [session.feed(chunk) for chunk in (np.zeros(CHUNK, np.float32), quiet, quiet)]
    assert not any(update.decoded for update in updates)
    assert session.finish().committed_text == "" and len(session.buffer) == 0


def test_hypothesis_reuse_needs_fewer_target_passes(shared_pair):
    """Same stream with and without reuse. On random weights a hypothesis repeats only where new audio
    changes nothing, so the stream ends with a pause that is fed through (energy gate and VAD off)."""
    waveform = np.concatenate([speech()[: 3 * SAMPLE_RATE], np.zeros(3 * SAMPLE_RATE, np.float32)])
    passes = {}
    for reuse in (True, False):
        options = StreamOptions(language="en", reuse_hypothesis=reuse, silence_dbfs=float("-inf"), vad=False)
        updates = run(StreamSession(shared_pair, options), waveform)
        passes[reuse] = np.mean([update.target_passes for update in updates if update.decoded])
    print(f"target passes per update: reuse {passes[True]:.1f}, draft model alone {passes[False]:.1f}")
    assert passes[True] < passes[False]


def test_a_segment_closed_in_the_newest_audio_is_not_committed(separate_pair):
    """Whisper closes a segment where the audio it was given ends, mid-sentence or past the audio heard (real
    whisper-base closed one at 22.78 s on 22 s of buffer): two hypotheses that agree on such an end commit
    nothing, the buffer is not cut, and the next hypothesis may carry the sentence on."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    session = StreamSession(separate_pair, StreamOptions(language="en"))
    session.buffer = np.zeros(4 * SAMPLE_RATE, dtype=np.float32)
    session.stream_seconds = 4.0
    for end in (begin + 200, begin + 175):  # <|0.00|> two words <|4.00|>, then <|3.50|>: in the last second
        session.hypothesis = [begin, 400, 370, end]
        assert session._commit_agreed(list(session.hypothesis), scripted_result(session.hypothesis)) == 0
        assert session.buffer_start_seconds == 0.0 and len(session.buffer) == 4 * SAMPLE_RATE


def scripted_result(token_ids: list[int]) -> DecodeResult:
    records = [TokenRecord(token, TARGET, 0, 0, 1.0, None) for token in token_ids]
    return DecodeResult(tuple(token_ids), (), "en", tuple(records), (), (), (), 0.0)


class ScriptedDecoder:
    """A test double for the decoding: the hypotheses a session gets, one per decoded update, as whisper-base
    gave them on the first seconds of en-weather.wav (each is the target's own on a longer buffer, so an
    early agreement can be contradicted later)."""

    def __init__(self, session: StreamSession, hypotheses: list[list[int]]) -> None:
        self.hypotheses = iter(hypotheses)
        session._decode = self.decode

    def decode(self, waveform: np.ndarray | None = None) -> DecodeResult:
        return scripted_result(next(self.hypotheses))


def test_an_agreement_a_later_hypothesis_contradicts_loses_no_speech(separate_pair):
    """Two hypotheses agree on words the third replaces ('but when a' -> 'The weather today is'): the final
    text is the last hypothesis whole, never the early agreement followed by nothing."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    but_when_a, the_weather = [10, 11, 12], [20, 21, 22, 23, 24]
    hypotheses = [
        [begin, *but_when_a, 13, begin + 50],
        [begin, *but_when_a, 14, begin + 100],
        [begin, *but_when_a, 15, 16, begin + 150],
        [begin, *the_weather, begin + 200],
        [begin, *the_weather, 25, 26, begin + 250],
    ]
    session = StreamSession(separate_pair, StreamOptions(language="en", vad=False, max_load=None))
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.ones(CHUNK, dtype=np.float32)
    updates = [session.feed(loud) for _ in hypotheses]
    assert all(update.decoded for update in updates)
    final = session.finish()
    assert final.committed_text == separate_pair.decode_text([*the_weather, 25, 26])


def test_agreed_segments_are_committed_and_their_audio_cut(separate_pair):
    """Two hypotheses that agree on a whole segment commit it and cut its audio; the rest stays tentative
    and is the next agreement's partner, in the cut buffer's time."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    hypotheses = [
        [begin, 10, 11, begin + 50, begin + 50, 12],
        [begin, 10, 11, begin + 50, begin + 50, 12, 13, begin + 100],
    ]
    session = StreamSession(separate_pair, StreamOptions(language="en", vad=False))
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.ones(CHUNK, dtype=np.float32)
    first, second = (session.feed(loud) for _ in hypotheses)
    assert first.committed_tokens == 0 and first.committed_text == ""
    assert second.committed_tokens == 4 and second.committed_text == separate_pair.decode_text([10, 11])
    assert session.buffer_start_seconds == 1.0 and len(session.buffer) == CHUNK  # 2 s heard, 1 s cut
    assert session.hypothesis == [begin, 12, 13, begin + 50]
    assert second.tentative_text == separate_pair.decode_text([12, 13])


def test_a_hypothesis_that_skips_speech_is_committed_and_the_rest_decoded_anew(separate_pair):
    """Whisper sometimes ends its text seconds before the buffer ends (it skipped speech) and a later
    hypothesis disagrees before the end of it, so no agreement is ever reached: once the text ends
    `stall_seconds` before the buffer, its segments are committed and the buffer cut where they end."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    hypotheses = [[begin, 10 + index, begin + 50] for index in range(5)]  # each ends at 1.0 s, each differs
    session = StreamSession(separate_pair, StreamOptions(language="en", vad=False, max_load=None))
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.ones(CHUNK, dtype=np.float32)
    updates = [session.feed(loud) for _ in hypotheses]
    assert [update.committed_tokens for update in updates] == [0, 0, 0, 0, 3]  # 1.0 s < 5 s - 3 s
    assert session.committed_text == separate_pair.decode_text([14]) and session.buffer_start_seconds == 1.0


def test_speech_the_last_hypothesis_skipped_is_decoded_where_the_utterance_ends(separate_pair):
    """Speech held back to the end, whose hypothesis stops at 1.0 s of a 5 s buffer: finish() commits it,
    decodes the 4 s after it on their own and commits that too."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    hypotheses = [[begin, 10, begin + 25], [begin, 11, begin + 50], [begin, 12, begin + 150]]
    options = StreamOptions(language="en", vad=False, max_load=1e-9, max_wait_seconds=10.0)
    session = StreamSession(separate_pair, options)
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.ones(CHUNK, dtype=np.float32)
    updates = [session.feed(loud) for _ in range(5)]
    assert [update.decoded for update in updates] == [True, False, False, False, False]
    final = session.finish()
    assert final.decoded and final.committed_text == separate_pair.decode_text([11, 12])
    assert len(session.buffer) == 0 and session.hypothesis == []


def test_the_quietest_pause_is_the_longest_gap_between_words():
    """Planted: speech-like noise with a 50 ms gap at 3 s and a 300 ms one at 5 s; the cut lands in the long
    one, inside the range asked for."""
    waveform = 0.1 * np.random.default_rng(0).standard_normal(8 * SAMPLE_RATE).astype(np.float32)
    waveform[3 * SAMPLE_RATE : round(3.05 * SAMPLE_RATE)] = 0
    waveform[5 * SAMPLE_RATE : round(5.3 * SAMPLE_RATE)] = 0
    assert 5 * SAMPLE_RATE <= quietest_pause(waveform, SAMPLE_RATE, 7 * SAMPLE_RATE) <= 5.3 * SAMPLE_RATE
    assert 3 * SAMPLE_RATE <= quietest_pause(waveform, SAMPLE_RATE, 4 * SAMPLE_RATE) <= 3.1 * SAMPLE_RATE


def test_a_long_open_segment_is_cut_at_a_pause_and_nothing_is_lost(separate_pair):
    """Hypotheses that never close a segment: past trim_seconds the audio up to the quietest pause is decoded
    again and committed whole, the rest stays in the buffer; the final text is both decodings' text."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    hypotheses = [[begin, 10], [begin, 11], [begin, 12], [begin, 13, 14], [begin, 15], [begin, 16]]
    options = StreamOptions(language="en", vad=False, trim_seconds=2.5, max_load=None)
    session = StreamSession(separate_pair, options)
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.random.default_rng(1).standard_normal(3 * CHUNK).astype(np.float32)
    loud[round(1.6 * CHUNK) : round(1.9 * CHUNK)] = 0  # the pause
    updates = [session.feed(chunk) for chunk in chunks(loud)]
    assert session.committed_text == separate_pair.decode_text([13, 14])  # decoded up to the pause
    assert 1.6 <= session.buffer_start_seconds <= 1.9 and updates[-1].tentative_text == ""
    session.feed(loud[:CHUNK])
    assert session.finish().committed_text == separate_pair.decode_text([13, 14, 15])
