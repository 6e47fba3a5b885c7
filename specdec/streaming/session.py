"""Live transcription: re-decode the growing buffer at each update and commit with LocalAgreement-2.

Each update appends a chunk (16 kHz) to the buffer and decodes the whole buffer (with timestamps, the
committed text before the buffer as the prompt). Where the last two hypotheses agree on whole segments
(their longest common prefix holds a segment's closing timestamp), those segments are committed and
their audio is cut from the buffer at once, so the buffer only ever holds audio whose text is not yet
committed: a later hypothesis never has to agree with committed words to be kept, and nothing heard is
dropped. Committed text only grows. Whisper may write a long stretch of speech as one open segment, so
a buffer past `trim_seconds` without an agreement commits its hypothesis' closed segments, or else is
cut at its quietest pause (a gap between words): the audio before the pause is decoded once more and
committed whole, and the window stays under 30 s. The previous hypothesis drafts for free
(`engine.drafters.PreviousHypothesis`); each update's output is still the target's own on that buffer.

Only chunks with speech are decoded, so no text is invented on silence, noise or music: Silero VAD
(`specdec.vad.SpeechDetector`) follows the speech chunk by chunk, after an RMS energy gate that spares it
the quiet chunks. Where an utterance ends (no speech for `pause_seconds`), its last hypothesis is
committed and the buffer cut; nothing is decoded until speech starts again, and the next utterance is
decoded with the audio just before it and the committed text as its prompt.

Decoding keeps to a pace (`max_load`): an update that took L seconds makes the next one wait for L /
`max_load` seconds of audio (whole chunks, never more than `max_wait_seconds`), so a slow machine decodes
fewer, longer updates instead of spending all its time re-encoding the buffer. Speech held back is decoded
at the next pause, where the utterance ends and at `finish()`, so nothing heard is left undecoded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE
from specdec.engine.drafters import Drafter, PreviousHypothesis, common_length
from specdec.engine.state import Row
from specdec.options import TranscribeOptions
from specdec.trace import KEPT_DRAFT, DecodeResult
from specdec.vad import Activity, SpeechDetector, rms_dbfs
from specdec.whisper.tokens import TIMESTAMP_SECONDS, timestamp_begin

TARGET_SOURCE = "target"  # a token's source: the target's own (correction, bonus, or no proposal)
MAX_REDECODES = 10  # where an utterance ends, decodings of speech its last hypothesis skipped (~3 s each)


@dataclass(frozen=True)
class StreamOptions:
    chunk_seconds: float = 1.0  # audio per update
    trim_seconds: float = 25.0  # past this with nothing agreed, commit closed segments or cut at a pause
    max_buffer_seconds: float = 27.0  # a pause within an utterance this long ends it (window < 30 s)
    settle_seconds: float = 1.0  # the newest audio is never cut: a segment closing there may be cut short
    stall_seconds: float = 3.0  # a hypothesis whose text ends this long before the buffer skipped speech
    silence_dbfs: float = -45.0  # chunks quieter than this RMS level are not speech (the VAD does not run)
    vad: bool = True  # Silero VAD decides what is speech (off: every chunk above silence_dbfs is speech)
    vad_threshold: float = 0.5  # a 32 ms window is speech from this probability on
    pause_seconds: float = 0.5  # no speech for this long ends an utterance: committed, the buffer cut
    preroll_seconds: float = 0.5  # audio before the speech kept in front of the next utterance
    reuse_hypothesis: bool = True  # the previous hypothesis drafts first
    use_draft: bool = True  # the draft model drafts where the hypothesis cannot
    language: str | None = None  # None: detected by the target on the first decoded buffer
    num_draft_tokens: int = 6  # the draft model's k at the start of each buffer (adaptive): a live buffer,
    # mostly text the previous hypothesis already proposed, starts a little higher than a file does
    max_reuse_tokens: int = 32  # longest proposal from the previous hypothesis (free: no model runs)
    max_prompt_tokens: int = 120  # committed text tokens passed as the prompt of the next window
    max_load: float | None = 0.5  # decoding aims to take at most this share of real time (None: every chunk)
    max_wait_seconds: float = 3.0  # speech held back for the pace is decoded within this much audio

    @property
    def pace(self) -> str:
        """`max_load` in words, as the CLI and the Live view report it."""
        if self.max_load is None:
            return "every chunk decoded"
        return f"decoding at most {self.max_load:.0%} of real time"


@dataclass(frozen=True)
class Update:
    """What one chunk changed: the text, how it was decoded and how long it took."""

    index: int
    stream_seconds: float  # audio received so far
    decoded: bool  # False for a chunk without speech: nothing new to decode
    committed_text: str
    tentative_text: str
    latency_seconds: float  # from the chunk's arrival to the text being ready
    buffer_start_seconds: float = 0.0  # stream time where the decoded buffer starts
    prompt_ids: tuple[int, ...] = ()  # the previous text the buffer was decoded with
    language: str | None = None
    hypothesis: tuple[int, ...] = ()  # the decoded buffer's tokens (timestamps included)
    committed_tokens: int = 0  # how many of them were committed by this update
    earlier_text: str = ""  # committed text of audio cut from the buffer before this update
    token_sources: tuple[str, ...] = ()  # per hypothesis token: reused, draft or target
    proposals: dict = field(default_factory=dict)  # source -> {"drafted": n, "accepted": n}
    result: DecodeResult | None = None
    chunk_seconds: float = 0.0  # audio this update heard (0: the final stop)
    speech: bool = False  # some of it was speech (the VAD's verdict; the energy gate's with it off)
    held_back: bool = False  # speech not decoded yet, to keep to the pace (decoded with a later chunk)
    level_dbfs: float = float("-inf")  # its RMS level

    @property
    def target_passes(self) -> int:
        return self.result.num_target_passes if self.result else 0


class StreamSession:
    """One listener's live transcription state (one per browser session)."""

    def __init__(self, whisper: SpeculativeWhisper, options: StreamOptions | None = None) -> None:
        self.whisper = whisper
        self.options = options or StreamOptions()
        self.clear()

    def clear(self) -> None:
        """Forget all audio and text."""
        self.buffer = np.zeros(0, dtype=np.float32)  # the current utterance's audio (empty between them)
        self.preroll = np.zeros(0, dtype=np.float32)  # the latest audio without speech
        self.stream_seconds = 0.0
        self.buffer_start_seconds = 0.0  # stream time of buffer[0]
        self.archived_ids: list[int] = []  # committed text tokens (their audio is cut from the buffer)
        self.hypothesis: list[int] = []  # the last hypothesis on the current buffer: none of it committed
        self.language: str | None = self.options.language
        self.detector = SpeechDetector(self.options.vad_threshold, self.options.pause_seconds)
        self.updates: list[Update] = []
        self.held_back_seconds = 0.0  # speech in the buffer that no update has decoded yet
        self.last_update_seconds = 0.0  # what the latest decoded update cost: sets the pace

    def feed(self, chunk: np.ndarray) -> Update:
        """Append 16 kHz mono float32 audio; on speech, decode the buffer (at the pace, see `max_load`) and
        commit what two hypotheses agree on; where the utterance ends, commit the rest of it and cut the
        buffer."""
        arrived = time.perf_counter()
        chunk_start = self.stream_seconds
        self.stream_seconds += len(chunk) / SAMPLE_RATE
        level = rms_dbfs(chunk)
        activity = self._activity(chunk, level)
        heard = {"chunk_seconds": len(chunk) / SAMPLE_RATE, "speech": activity.speech, "level_dbfs": level}
        if (len(self.buffer) or self.hypothesis) and not activity.speech:  # an utterance is pending
            full = len(self.buffer) + len(chunk) > self.options.max_buffer_seconds * SAMPLE_RATE
            if activity.ongoing and not full:  # a pause within the utterance, too short to end it
                self.buffer = np.concatenate([self.buffer, chunk])
                if self.held_back_seconds:  # the speech before the pause, decoded now that it paused
                    return self._decode_update(arrived, heard, ends=False)
                return self._record(arrived, decoded=False, **heard)
            # its speech ended in the last chunk: commit it all (decoding what was held back first)
            ended = self._decode_update(arrived, heard, ends=True) if self.held_back_seconds else None
            if ended is None:
                self._end_utterance()
            self._rest(chunk)
            return ended or self._record(arrived, decoded=False, **heard)
        if not activity.speech:  # no speech, none pending: rest, keeping the latest audio for what comes
            self._rest(chunk)
            return self._record(arrived, decoded=False, **heard)
        if not len(self.buffer):  # an utterance begins, with the audio just before it
            self.buffer, self.preroll = self.preroll, np.zeros(0, dtype=np.float32)
            self.buffer_start_seconds = chunk_start - len(self.buffer) / SAMPLE_RATE
        self.buffer = np.concatenate([self.buffer, chunk])
        self.held_back_seconds += len(chunk) / SAMPLE_RATE
        if activity.ongoing and self._holds_back():
            return self._record(arrived, decoded=False, held_back=True, **heard)
        return self._decode_update(arrived, heard, ends=not activity.ongoing)

    def finish(self) -> Update:
        """Stop: decode what was held back, then commit the last hypothesis as it stands."""
        if self.held_back_seconds:
            return self._decode_update(time.perf_counter(), {}, ends=True)
        self._end_utterance()
        return self._record(time.perf_counter(), decoded=False)

    def _decode_update(self, arrived: float, heard: dict, ends: bool) -> Update:
        """Decode the buffer, then commit what two hypotheses agree on (or, where the utterance `ends`,
        all of it)."""
        decoded_from = {
            "buffer_start_seconds": self.buffer_start_seconds,
            "prompt_ids": self._prompt_ids(),
            "earlier_text": self._text(self.archived_ids),
        }
        result, self.held_back_seconds = self._decode(), 0.0
        previous, self.hypothesis = self.hypothesis, list(result.token_ids)
        committed_tokens = self._end_utterance() if ends else self._commit_agreed(previous, result)
        return self._record(arrived, True, result, committed_tokens=committed_tokens, **decoded_from, **heard)

    def _holds_back(self) -> bool:
        """Whether the speech heard since the last update waits for more: until it lasts the latest
        update's cost at `max_load` (at most `max_wait_seconds`), and never past `trim_seconds` of buffer
        (so that the window stays under 30 s)."""
        if self.options.max_load is None or len(self.buffer) > self.options.trim_seconds * SAMPLE_RATE:
            return False
        wait = min(self.last_update_seconds / self.options.max_load, self.options.max_wait_seconds)
        return self.held_back_seconds < wait

    def _rest(self, chunk: np.ndarray) -> None:
        """A chunk without speech, none pending: keep the latest audio for the utterance that comes."""
        heard_before = np.concatenate([self.preroll, chunk])
        self.preroll = heard_before[max(len(heard_before) - self._preroll_samples, 0) :]
        self.buffer_start_seconds = self.stream_seconds

    @property
    def committed_text(self) -> str:
        return self._text(self.archived_ids)

    def _decode(self, waveform: np.ndarray | None = None) -> DecodeResult:
        """The buffer (or the start of it) decoded speculatively (each step names where its proposal came
        from)."""
        options = TranscribeOptions(  # the prompt: the latest committed text before the buffer
            language=self.language,
            timestamps=True,
            num_draft_tokens=self.options.num_draft_tokens,
            adaptive=True,
            prompt_ids=self._prompt_ids(),
            speculative=self.options.use_draft or self.options.reuse_hypothesis,
        )
        make_drafter = self._previous_hypothesis if self.options.reuse_hypothesis else None
        buffer = self.buffer if waveform is None else waveform
        (transcription,) = self.whisper.transcribe_waveforms([buffer], options, make_drafter=make_drafter)
        result = transcription.result
        self.language = self.language or result.language
        return result

    def _activity(self, chunk: np.ndarray, level: float) -> Activity:
        """Speech or not: a chunk under the energy gate is not, without running the VAD; the VAD (when
        on) decides the others, else each is speech."""
        if level < self.options.silence_dbfs:
            return self.detector.skip(len(chunk)) if self.options.vad else Activity(False, False)
        return self.detector.hear(chunk) if self.options.vad else Activity(True, True)

    def _end_utterance(self) -> int:
        """The utterance is over, and what was heard of it will not change: commit its last hypothesis and
        cut the whole buffer. A hypothesis that stops short of the speech (see `_stops_short`) is committed
        up to where its text ends, and the audio after that decoded on its own, as often as it takes.
        Returns how many of the (first) hypothesis' tokens are committed."""
        committed_tokens = len(self.hypothesis)
        for _ in range(MAX_REDECODES):
            cut = self._stops_short()
            if cut is None:
                break
            end, seconds = cut
            self._cut(end, round(seconds * SAMPLE_RATE))
            self.hypothesis = list(self._decode().token_ids)  # the speech its text skipped
        self._cut(len(self.hypothesis), len(self.buffer))
        return committed_tokens

    def _stops_short(self, windows: list[int] | None = None) -> tuple[int, float] | None:
        """(index after, seconds) of the hypothesis' last closed segment where more than `stall_seconds`
        of the buffer's speech follow it: Whisper, on a buffer that starts mid-speech, sometimes ends its
        text there and leaves the rest untranscribed, so that no later hypothesis would ever hold it."""
        last = last_segment_end(self.hypothesis, windows or [], self._timestamp_begin)
        stall = len(self.buffer) / SAMPLE_RATE - self.options.stall_seconds
        return last if last is not None and 0 < last[1] < stall else None

    def _commit_agreed(self, previous: list[int], result: DecodeResult) -> int:
        """Commit the whole segments the last two hypotheses agree on (LocalAgreement-2) and cut their
        audio; a buffer past `trim_seconds` commits its hypothesis' closed segments, or its audio up to
        the quietest pause. Returns how many of the hypothesis' tokens are committed."""
        windows = [record.window for record in result.tokens if record.kept]
        settled = len(self.buffer) / SAMPLE_RATE - self.options.settle_seconds  # cut no later than this
        agreed = common_prefix(previous, self.hypothesis)
        cut = last_segment_end(agreed, windows, self._timestamp_begin, settled)
        long = len(self.buffer) > self.options.trim_seconds * SAMPLE_RATE
        if cut is None and long:
            cut = last_segment_end(self.hypothesis, windows, self._timestamp_begin, settled)
        if cut is None:  # a hypothesis that skipped speech: what it holds is all it will say of it
            cut = self._stops_short(windows)
        if cut is None and long:
            self._commit_until_pause()
        if cut is None:
            return 0
        end, seconds = cut
        self._cut(end, round(seconds * SAMPLE_RATE))
        return end

    def _commit_until_pause(self) -> None:
        """Cut the buffer at its quietest pause, decode the audio before it and commit that whole: the
        target's own text on it, each word on one side of the cut."""
        keep = round(self.options.settle_seconds * SAMPLE_RATE)
        samples = quietest_pause(self.buffer, len(self.buffer) // 2, len(self.buffer) - keep)
        self.hypothesis = list(self._decode(self.buffer[:samples]).token_ids)
        self._cut(len(self.hypothesis), samples)

    def _prompt_ids(self) -> tuple[int, ...]:
        return tuple(self._text_ids(self.archived_ids)[-self.options.max_prompt_tokens :])

    def _previous_hypothesis(self, rows: list[Row], draft_model: Drafter | None) -> Drafter:
        """The last hypothesis (ending with end-of-text) drafts first, the draft model where it cannot."""
        eos = self.whisper.pair.target.model.generation_config.eos_token_id
        vocabulary_size = self.whisper.pair.target.model.config.vocab_size
        fallback = draft_model if self.options.use_draft else None
        hints = [self.hypothesis + [eos]] * len(rows)
        return PreviousHypothesis(hints, fallback, vocabulary_size, self.options.max_reuse_tokens)

    def _cut(self, end: int, samples: int) -> None:
        """Commit the hypothesis' first `end` tokens and cut their `samples` from the buffer."""
        self.archived_ids += self._text_ids(self.hypothesis[:end])
        offset = round(samples / SAMPLE_RATE / TIMESTAMP_SECONDS)
        # the uncommitted rest, in the trimmed buffer's time: the next agreement's partner and draft
        self.hypothesis = shift_timestamps(self.hypothesis[end:], -offset, self._timestamp_begin)
        self.buffer = self.buffer[samples:]
        self.buffer_start_seconds += samples / SAMPLE_RATE

    @property
    def _preroll_samples(self) -> int:
        return round(self.options.preroll_seconds * SAMPLE_RATE)

    @property
    def _timestamp_begin(self) -> int:
        return timestamp_begin(self.whisper.pair.target.model.generation_config)

    def _text_ids(self, token_ids: list[int]) -> list[int]:
        """The text tokens of an output, the previous text of later windows: no timestamp, nor a control
        token the model emitted (in the prompt it would steer every window after it)."""
        eos = self.whisper.pair.target.model.generation_config.eos_token_id
        first_special = min(eos) if isinstance(eos, list) else eos  # Whisper's specials follow its text ids
        return [token for token in token_ids if token < first_special]

    def _text(self, token_ids: list[int]) -> str:
        return self.whisper.decode_text(self._text_ids(token_ids))

    def _record(self, arrived: float, decoded: bool, result=None, **decoded_from) -> Update:
        latency = time.perf_counter() - arrived
        if decoded:
            self.last_update_seconds = latency
        update = Update(
            index=len(self.updates),
            stream_seconds=self.stream_seconds,
            decoded=decoded,
            committed_text=self.committed_text,
            tentative_text=self._text(self.hypothesis),
            latency_seconds=latency,
            hypothesis=tuple(result.token_ids) if result else (),
            token_sources=token_sources(result) if result else (),
            proposals=proposal_counts(result) if result else {},
            result=result,
            language=self.language,
            **decoded_from,
        )
        self.updates.append(update)
        return update


def common_prefix(first: list[int], second: list[int]) -> list[int]:
    """LocalAgreement-2: the longest common prefix of two hypotheses."""
    return list(first[: common_length(first, second)])


def last_segment_end(
    tokens: list[int], windows: list[int], timestamp_begin: int, latest: float = float("inf")
) -> tuple[int, float] | None:
    """(index after, seconds) of the last segment-closing timestamp of the first window in `tokens` at or
    before `latest` seconds, if any: the tokens up to it are whole segments."""
    for index in range(len(tokens) - 1, 0, -1):
        closes = tokens[index] >= timestamp_begin and tokens[index - 1] < timestamp_begin
        in_first_window = index >= len(windows) or windows[index] == 0
        seconds = (tokens[index] - timestamp_begin) * TIMESTAMP_SECONDS
        if closes and in_first_window and seconds <= latest:
            return index + 1, seconds
    return None


def quietest_pause(waveform: np.ndarray, start: int, stop: int, frame_seconds: float = 0.2) -> int:
    """A sample in [start, stop) in the quietest `frame_seconds` (RMS), at the quietest 20 ms within it: a
    gap between words, the longest pause where several are silent."""
    frame = round(frame_seconds * SAMPLE_RATE)
    if stop - start <= frame:
        return max(stop, 1)
    quietest = start + quietest_window(waveform[start:stop], frame)
    fine = round(0.02 * SAMPLE_RATE)
    return quietest + quietest_window(waveform[quietest : quietest + frame], fine) + fine // 2


def quietest_window(waveform: np.ndarray, size: int) -> int:
    """Start of the `size` samples of least energy."""
    return int(np.argmin(np.convolve(np.square(waveform, dtype=np.float64), np.ones(size), mode="valid")))


def shift_timestamps(token_ids: list[int], offset: int, timestamp_begin: int) -> list[int]:
    """Timestamp tokens moved by `offset` steps (dropping any that would go negative)."""
    shifted = []
    for token in token_ids:
        if token >= timestamp_begin:
            token += offset
            if token < timestamp_begin:
                continue
        shifted.append(token)
    return shifted


def token_sources(result: DecodeResult) -> tuple[str, ...]:
    """Per kept token: `reused` or `draft` for an accepted proposal, `target` for the target's own."""
    sources = {step.index: step.source for step in result.steps}
    return tuple(
        sources[record.step] if record.label in KEPT_DRAFT else TARGET_SOURCE
        for record in result.tokens
        if record.kept
    )


def proposal_counts(result: DecodeResult) -> dict[str, dict[str, int]]:
    """Per proposal source: target passes it drafted for, tokens drafted, tokens accepted."""
    counts: dict[str, dict[str, int]] = {}
    for step in result.steps:
        if not step.drafted:
            continue
        entry = counts.setdefault(step.source, {"steps": 0, "drafted": 0, "accepted": 0})
        entry["steps"] += 1
        entry["drafted"] += len(step.drafted)
        entry["accepted"] += step.n_accepted
    return counts
