"""A realtime session's input audio buffer (`app.realtime`): 16-bit PCM at 24 kHz in, turns out.

With server VAD, the buffer is heard 32 ms at a time (one Silero window once resampled to 16 kHz, by a
streaming soxr resampler) by the project's `vad.SpeechDetector`, OpenAI's settings read as: speech from
`threshold` on (and, Silero's hysteresis, it goes on until the probability falls below threshold - 0.15);
`silence_duration_ms` of that ends the turn; the turn starts `prefix_padding_ms` before the first window of
speech (never before the previous turn's end) and ends where the pause did, the pause included, as
OpenAI's `audio_end_ms` does. Between turns only the last `prefix_padding_ms` are kept. A turn is cut
before it would pass the server's longest clip (which /v1's reader refuses), and the next one starts
where it ends.

Without it, the buffer grows until the client commits it (at most the server's longest clip). Turn
boundaries are whole milliseconds of the session's audio when the client sends whole milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr

from specdec.app.openai_schema import ApiError
from specdec.app.realtime_settings import INPUT_RATE, TurnDetection
from specdec.audio import SAMPLE_RATE
from specdec.vad import SpeechDetector

PER_MS = INPUT_RATE // 1000  # samples in a millisecond
PIECE = 32 * PER_MS  # what the VAD hears at a time: one 512-sample Silero window at 16 kHz
MIN_COMMIT_MS = 100  # OpenAI's smallest commit, and Whisper's shortest clip (audio.MIN_SECONDS)
SAMPLE_BYTES = 2


@dataclass(frozen=True)
class Turn:
    """A committed piece of the session's audio."""

    start: int  # its first sample, counted from the session's first (24 kHz)
    pcm: bytes  # 16-bit little-endian mono at 24 kHz

    @property
    def end(self) -> int:
        return self.start + len(self.pcm) // SAMPLE_BYTES

    @property
    def start_ms(self) -> int:
        return self.start // PER_MS

    @property
    def end_ms(self) -> int:
        return self.end // PER_MS


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int  # where the turn will start: the speech, less the prefix padding


@dataclass(frozen=True)
class SpeechStopped:
    turn: Turn  # ends where the pause did (OpenAI's audio_end_ms)


class InputBuffer:
    """The audio a session has sent and not committed, and the VAD that hears it."""

    def __init__(self, turn_detection: TurnDetection | None, max_seconds: float) -> None:
        self.pcm = bytearray()
        self.start = 0  # the session sample of pcm's first
        self.max_samples = int(max_seconds * INPUT_RATE)  # the longest turn
        self.detect(turn_detection)

    @property
    def end(self) -> int:
        return self.start + len(self.pcm) // SAMPLE_BYTES

    @property
    def listening(self) -> bool:
        """Server VAD is on (`append` then runs Silero: on the models' thread)."""
        return self.detector is not None

    def detect(self, turn_detection: TurnDetection | None) -> None:
        """Find turns with these settings (None: no VAD) from the audio not yet heard on, afresh."""
        self.turn_detection = turn_detection
        self.heard = self.end  # the session sample the VAD has heard up to
        self.turn_start: int | None = None  # the open turn's first sample
        self.detector = self.resampler = None
        if turn_detection is not None:
            pause = turn_detection.silence_duration_ms / 1000
            self.detector = SpeechDetector(turn_detection.threshold, pause_seconds=pause)
            self.resampler = soxr.ResampleStream(INPUT_RATE, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def append(self, pcm: bytes) -> list[SpeechStarted | SpeechStopped]:
        """Add 16-bit samples; with server VAD, the turns they start and end."""
        if self.detector is None:
            if self.end - self.start + len(pcm) // SAMPLE_BYTES > self.max_samples:
                seconds = self.max_samples / INPUT_RATE
                message = (
                    f"The input audio buffer holds at most {seconds:g} s (the server's limit): commit it."
                )
                raise ApiError(400, message, "audio", "input_audio_buffer_full")
            self.pcm += pcm
            return []
        self.pcm += pcm
        events: list[SpeechStarted | SpeechStopped] = []
        while self.end - self.heard >= PIECE:
            events += self._hear_piece()
        if self.turn_start is None:  # between turns: only the prefix padding is kept
            padding = self.turn_detection.prefix_padding_ms * PER_MS
            self._drop_until(max(self.start, self.heard - padding))
        return events

    def commit(self) -> Turn:
        """All of the buffer as a turn (at least MIN_COMMIT_MS); the VAD starts afresh after it."""
        milliseconds = (self.end - self.start) / PER_MS
        if milliseconds < MIN_COMMIT_MS:
            message = (
                f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms "
                f"of audio, but buffer only has {milliseconds:.2f}ms of audio."
            )
            raise ApiError(400, message, None, "input_audio_buffer_commit_empty")
        turn = self._take(self.start, self.end)
        self.detect(self.turn_detection)
        return turn

    def clear(self) -> None:
        """Drop the buffer (an open turn with it); the VAD starts afresh."""
        self._drop_until(self.end)
        self.detect(self.turn_detection)

    def _hear_piece(self) -> list[SpeechStarted | SpeechStopped]:
        start, self.heard = self.heard, self.heard + PIECE
        samples = np.frombuffer(self._bytes(start, self.heard), dtype="<i2").astype(np.float32) / 32768
        activity = self.detector.hear(self.resampler.resample_chunk(samples))
        if self.turn_start is None:
            if not activity.speech:
                return []
            padding = self.turn_detection.prefix_padding_ms * PER_MS
            self.turn_start = max(self.start, start - padding)
            return [SpeechStarted(self.turn_start // PER_MS)]
        if activity.ongoing and self.heard + PIECE - self.turn_start <= self.max_samples:
            return []  # (cut before the next piece would take the turn past the longest clip /v1 reads)
        turn = self._take(self.turn_start, self.heard)
        self.turn_start = None
        return [SpeechStopped(turn)]

    def _take(self, start: int, end: int) -> Turn:
        """[start, end) as a turn; the buffer then starts at end."""
        turn = Turn(start, self._bytes(start, end))
        self._drop_until(end)
        return turn

    def _bytes(self, start: int, end: int) -> bytes:
        return bytes(self.pcm[(start - self.start) * SAMPLE_BYTES : (end - self.start) * SAMPLE_BYTES])

    def _drop_until(self, sample: int) -> None:
        del self.pcm[: (sample - self.start) * SAMPLE_BYTES]
        self.start = sample
