"""Live transcription without a browser: a clip fed in chunks, as the Live view and `stream` feed it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions
from specdec.streaming.session import StreamOptions, StreamSession
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
    """Two clips back to back, with a short trim threshold so that buffers are cut and prompts passed."""
    waveform = np.concatenate(
        [speech("en-weather")[: 5 * SAMPLE_RATE], speech("en-fellow-americans")[: 4 * SAMPLE_RATE]]
    )
    options = StreamOptions(language="en", trim_seconds=2.0, max_buffer_seconds=4.0)
    session = StreamSession(separate_pair, options)
    return waveform, session, run(session, waveform)


def test_every_update_is_the_target_alone_on_its_buffer(separate_pair, trimmed_stream):
    waveform, _, updates = trimmed_stream
    decoded = [update for update in updates if update.decoded]
    assert len(decoded) >= 8 and any(update.prompt_ids for update in decoded)  # trimmed at least once
    for update in decoded:
        start = round(update.buffer_start_seconds * SAMPLE_RATE)
        buffer = waveform[start : round(update.stream_seconds * SAMPLE_RATE)]
        options = DecodeOptions(language=update.language, timestamps=True, prompt_ids=update.prompt_ids)
        alone = separate_pair.transcribe_waveform(buffer, options, speculative=False)
        assert update.hypothesis == alone.token_ids, f"update {update.index}"
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


def test_a_segment_end_past_the_audio_cuts_no_further_than_the_buffer(separate_pair):
    """Whisper may close a segment at a timestamp after the last audio heard (real whisper-base closed one
    at 22.78 s on 22 s of buffer): the trim stops at the buffer's end, so the buffer start stays the
    stream time of buffer[0] and every later update decodes the audio it says it does."""
    session = StreamSession(separate_pair, StreamOptions(language="en", trim_seconds=3.0))
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    session.buffer = np.zeros(4 * SAMPLE_RATE, dtype=np.float32)
    session.stream_seconds = 4.0
    session.committed = [begin, 400, 370, begin + 250]  # <|0.00|> two words <|5.00|>: past the 4 s heard
    session.hypothesis = [*session.committed, begin + 250, 500]  # and the next segment begins
    records = [TokenRecord(token, TARGET, 0, 0, 1.0, None) for token in session.hypothesis]
    session._trim(DecodeResult(tuple(session.hypothesis), (), "en", tuple(records), (), (), (), 0.0))
    assert session.buffer_start_seconds == session.stream_seconds == 4.0 and len(session.buffer) == 0
    assert session.hypothesis == [begin + 50, 500]  # the rest, timestamps moved back by the 4 s cut
