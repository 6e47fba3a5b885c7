"""A file (or a waveform) played as a live stream into a `StreamSession`, and the figures of a stream.

`stream_audio` cuts the audio into `chunk_seconds` chunks and feeds them one by one, as fast as possible
or in real time (chunk i is fed no earlier than its end time in the stream), then stops the session.
`summarise` turns the updates into the live figures: target passes per decoded update, median and 95th
percentile update latency, how far committed words trail the speaker, real-time factor and acceptance by
proposal source.

    from specdec.streaming.playback import stream_audio, summarise
    from specdec.streaming.session import StreamOptions

    updates = list(stream_audio(whisper, "talk.wav", StreamOptions(chunk_seconds=1.0)))
    print(updates[-1].committed_text, summarise(updates).median_latency_seconds)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, AudioSource, load_audio
from specdec.streaming.session import StreamOptions, StreamSession, Update


def stream_audio(
    whisper: SpeculativeWhisper,
    audio: AudioSource,
    options: StreamOptions | None = None,
    realtime: bool = False,
    sample_rate: int | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Update]:
    """Feed `audio` chunk by chunk into a new session; yield each update, the last from `finish()`.

    `audio`: a path (any length, any rate), a numpy array (16 kHz unless `sample_rate` says otherwise)
    or a Gradio (rate, array) tuple. In real time, a chunk that is due while the previous one is still
    decoding is fed as soon as that one is done (never dropped); its latency counts from then, so a
    stream that falls behind shows as a real-time factor near or above 1. `clock`/`sleep`: for tests.
    """
    options = options or StreamOptions()
    if options.chunk_seconds <= 0:
        raise ValueError(f"chunk length must be positive, not {options.chunk_seconds:g} s")
    if isinstance(audio, np.ndarray) and sample_rate is None:
        sample_rate = SAMPLE_RATE
    waveform = load_audio(audio, sample_rate=sample_rate, max_seconds=None)
    size = max(1, round(options.chunk_seconds * SAMPLE_RATE))
    session = StreamSession(whisper, options)
    started = clock()
    for start in range(0, len(waveform), size):
        chunk = waveform[start : start + size]
        if realtime:  # the chunk exists only once the stream has reached its end
            wait = started + (start + len(chunk)) / SAMPLE_RATE - clock()
            if wait > 0:
                sleep(wait)
        yield session.feed(chunk)
    yield session.finish()


@dataclass(frozen=True)
class StreamSummary:
    """The figures of one stream (or of several, pooled)."""

    updates: int  # updates recorded, skipped (silent) chunks and the final stop included
    decoded_updates: int  # updates that decoded the buffer
    held_back_updates: int  # chunks of speech left for a later update, to keep to the pace
    audio_seconds: float  # audio streamed
    processing_seconds: float  # sum of all update latencies
    passes_per_update: float  # target passes per decoded update
    median_latency_seconds: float  # over decoded updates (skipped chunks cost ~0 and would flatter it)
    p95_latency_seconds: float
    proposals: dict[str, dict[str, int]]  # source -> steps (target passes it drafted for), drafted, accepted
    tokens_by_source: dict[str, int]  # hypothesis tokens over all decoded updates: reused, draft, target
    committed_words: int = 0  # words committed over the stream
    median_commit_lag_seconds: float = 0.0  # from a word's end in the audio to its text being committed
    p95_commit_lag_seconds: float = 0.0

    @property
    def real_time_factor(self) -> float:
        """Processing seconds per second of audio (< 1: keeps up with a live stream)."""
        return self.processing_seconds / self.audio_seconds if self.audio_seconds > 0 else 0.0

    @property
    def acceptance(self) -> dict[str, float]:
        """Per proposal source: accepted / drafted tokens."""
        return {
            source: counts["accepted"] / counts["drafted"]
            for source, counts in self.proposals.items()
            if counts["drafted"]
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "real_time_factor": self.real_time_factor, "acceptance": self.acceptance}


def summarise(updates: Sequence[Update], audio_seconds: float | None = None) -> StreamSummary:
    """The figures of a stream's updates; `audio_seconds` defaults to the audio the last update had seen
    (pass it when the updates pool several streams)."""
    decoded = [update for update in updates if update.decoded]
    latencies = [update.latency_seconds for update in decoded]
    proposals: dict[str, dict[str, int]] = {}
    tokens_by_source: dict[str, int] = {}
    for update in decoded:
        for source, counts in update.proposals.items():
            total = proposals.setdefault(source, {"steps": 0, "drafted": 0, "accepted": 0})
            for key in total:
                total[key] += counts.get(key, 0)
        for source in update.token_sources:
            tokens_by_source[source] = tokens_by_source.get(source, 0) + 1
    if audio_seconds is None:
        audio_seconds = max((update.stream_seconds for update in updates), default=0.0)
    lags = [lag for update in updates for lag in update.commit_lags]
    return StreamSummary(
        updates=len(updates),
        decoded_updates=len(decoded),
        held_back_updates=sum(update.held_back for update in updates),
        audio_seconds=audio_seconds,
        processing_seconds=sum(update.latency_seconds for update in updates),
        passes_per_update=float(np.mean([u.target_passes for u in decoded])) if decoded else 0.0,
        median_latency_seconds=float(np.median(latencies)) if latencies else 0.0,
        p95_latency_seconds=float(np.percentile(latencies, 95)) if latencies else 0.0,
        proposals=proposals,
        tokens_by_source=tokens_by_source,
        committed_words=len(lags),
        median_commit_lag_seconds=float(np.median(lags)) if lags else 0.0,
        p95_commit_lag_seconds=float(np.percentile(lags, 95)) if lags else 0.0,
    )
