"""Live transcription: re-decode the growing buffer at each update and commit its words as two hypotheses
agree on them (LocalAgreement over words).

Each update appends a chunk (16 kHz) to the buffer and decodes the whole buffer (with timestamps and word
timestamps, the committed text before the buffer as the prompt); its words are timed by the target's own
alignment (`streaming.words`). The words after those committed that the last two hypotheses spell alike
are committed (a word the target was unsure of once three agree; never the newest hypothesis' last word),
so committed text follows the speaker word by word. Once every word of a segment is committed, the
segment's audio is cut from the buffer at its closing timestamp and its text becomes the prompt, so the
buffer stays short; committed words past the cut stay committed and are found again in the next
hypothesis by spelling and time. Committed text only grows and is never taken back.

Whisper may write a long stretch of speech as one open segment, so a buffer past `trim_seconds` commits its
hypothesis' closed segments, or else is cut at its quietest pause (a gap between words): the audio before
the pause is decoded once more and its words committed, and the window stays under 30 s. The previous
hypothesis drafts for free (`engine.drafters.PreviousHypothesis`); each update's output is the target's own
on that buffer, and a hypothesis that loops (Whisper's compression-ratio check) is decoded again at rising
temperatures, as generate()'s temperature fallback does.

Only chunks with speech are decoded, so no text is invented on silence, noise or music: Silero VAD
(`specdec.vad.SpeechDetector`) follows the speech chunk by chunk, after an RMS energy gate that spares it
the quiet chunks. Where an utterance ends (no speech for `pause_seconds`), its last hypothesis is
committed whole and the buffer cut; nothing is decoded until speech starts again, and the next utterance
is decoded with the audio just before it and the committed text as its prompt.

Decoding keeps to a pace (`max_load`): an update that took L seconds makes the next one wait for L /
`max_load` seconds of audio (whole chunks, never more than `max_wait_seconds`), so a slow machine decodes
fewer, longer updates instead of spending all its time re-encoding the buffer. Speech held back is decoded
at the next pause, where the utterance ends and at `finish()`, so nothing heard is left undecoded.

A `feed` or `finish` whose decoding is cancelled (`engine.cancel`, the Live view's Stop) leaves the session
as it was before the call, so the same audio can be fed again.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE
from specdec.engine.cancel import Cancelled
from specdec.engine.drafters import Drafter, PreviousHypothesis
from specdec.engine.state import Row
from specdec.options import TranscribeOptions, whisper_temperatures
from specdec.streaming.buffer import (
    TARGET_SOURCE,
    last_segment_end,
    proposal_counts,
    quietest_pause,
    shift_timestamps,
    token_sources,
)
from specdec.streaming.words import (
    StreamWord,
    agreed_length,
    committed_copy,
    hypothesis_words,
    retimed,
    sentence_end,
    tail_start,
    words_text,
)
from specdec.trace import DecodeResult
from specdec.vad import Activity, SpeechDetector, rms_dbfs
from specdec.whisper.tokens import TIMESTAMP_SECONDS, timestamp_begin

__all__ = ["TARGET_SOURCE", "StreamOptions", "StreamSession", "Update", "quietest_pause"]

MAX_REDECODES = 10  # where an utterance ends, decodings of speech its last hypothesis skipped (~3 s each)
GAP_SLACK_SECONDS = 0.04  # a cut between words looks this far past the gap the alignment gives
RECENT_HYPOTHESES = 8  # the hypotheses kept for agreement (at 0.2 s chunks, three 1 s apart)
REPETITION_RATIO = 2.4  # Whisper's compression_ratio_threshold: a hypothesis that compresses more loops


@dataclass(frozen=True)
class StreamOptions:
    chunk_seconds: float = 1.0  # audio per update
    trim_seconds: float = 25.0  # past this with nothing agreed, commit closed segments or cut at a pause
    max_buffer_seconds: float = 27.0  # a pause within an utterance this long ends it (window < 30 s)
    settle_seconds: float = 1.0  # the newest audio is never cut: a segment closing there may be cut short
    margin_seconds: float = 0.5  # a word ending this close to the buffer's end waits for the next update
    context_seconds: float = 3.0  # committed audio kept in the buffer before the words not yet committed
    cut_seconds: float = 10.0  # committed audio past which a buffer with no sentence end is cut between words
    stall_seconds: float = 3.0  # a hypothesis whose text ends this long before the buffer skipped speech
    agreement_seconds: float = 1.0  # hypotheses that agree heard at least this much audio apart
    confident: float = 0.3  # a word whose least token probability is under this waits for three
    # hypotheses to agree on it instead of two (Whisper on the first seconds of speech guesses)
    fallback: bool = True  # a hypothesis that loops is decoded again at Whisper's rising temperatures
    seed: int = 0  # the fallback's sampling
    silence_dbfs: float = -60.0  # chunks quieter than this RMS level are not speech (the VAD does not run):
    # far-field speech (a meeting room's microphone) runs at -45 to -50 dBFS
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
    max_prompt_tokens: int = 40  # committed text tokens passed as the prompt of the next window (a longer
    # prompt primes Whisper to write it again: a clip said twice lost its second saying's middle)
    max_load: float | None = 0.5  # decoding aims to take at most this share of real time (None: every chunk)
    max_wait_seconds: float = 3.0  # speech held back for the pace is decoded within this much audio

    def decode_options(self, language: str | None, prompt_ids: tuple[int, ...]) -> TranscribeOptions:
        """How an update decodes its buffer: timestamps and word timestamps on, the committed text before
        the buffer as the prompt, Whisper's temperature fallback on looping text (`fallback`)."""
        fallback = {
            "temperature": whisper_temperatures(),
            "compression_ratio_threshold": REPETITION_RATIO,
            "seed": self.seed,
        }
        return TranscribeOptions(
            language=language,
            timestamps=True,
            word_timestamps=True,
            num_draft_tokens=self.num_draft_tokens,
            adaptive=True,
            prompt_ids=prompt_ids,
            speculative=self.use_draft or self.reuse_hypothesis,
            **(fallback if self.fallback else {}),
        )

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
    buffer_end_seconds: float = 0.0  # and ends (short of stream_seconds where a chunk ended the utterance)
    prompt_ids: tuple[int, ...] = ()  # the previous text the buffer was decoded with
    language: str | None = None
    hypothesis: tuple[int, ...] = ()  # the decoded buffer's tokens (timestamps included)
    committed_tokens: int = 0  # how many of them are committed once this update is done
    committed_words: tuple[StreamWord, ...] = ()  # the words this update committed, in stream time
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

    @property
    def commit_lags(self) -> list[float]:
        """Per word this update committed: seconds from its end in the stream to its text being ready."""
        ready = self.stream_seconds + self.latency_seconds
        return [max(ready - word.end, 0.0) for word in self.committed_words]


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
        self.committed: list[StreamWord] = []  # committed words whose audio is still in the buffer
        # the latest hypotheses' words, each with where its buffer ended (stream seconds), newest last
        self.recent: list[tuple[float, list[StreamWord]]] = []
        self.hypothesis: list[int] = []  # the last hypothesis on the current buffer (its next draft)
        self.language: str | None = self.options.language
        self.detector = SpeechDetector(self.options.vad_threshold, self.options.pause_seconds)
        self.updates: list[Update] = []
        self.held_back_seconds = 0.0  # speech in the buffer that no update has decoded yet
        self.last_update_seconds = 0.0  # what the latest decoded update cost: sets the pace

    def feed(self, chunk: np.ndarray) -> Update:
        """Append 16 kHz mono float32 audio; on speech, decode the buffer (at the pace, see `max_load`) and
        commit the words two hypotheses agree on; where the utterance ends, commit the rest of it and cut
        the buffer."""
        with self._undone_if_cancelled():
            return self._feed(chunk)

    def finish(self) -> Update:
        """Stop: decode what was held back, then commit the last hypothesis as it stands."""
        with self._undone_if_cancelled():
            if self.held_back_seconds:
                return self._decode_update(time.perf_counter(), {}, ends=True)
            words = self._end_utterance()
            return self._record(time.perf_counter(), decoded=False, committed_words=tuple(words))

    @contextmanager
    def _undone_if_cancelled(self) -> Iterator[None]:
        """A call whose decoding is cancelled part way leaves every piece of state as it was before it."""
        before = {
            name: copy.copy(value) for name, value in vars(self).items() if name not in ("whisper", "options")
        }
        try:
            yield
        except Cancelled:
            vars(self).update(before)
            raise

    def _feed(self, chunk: np.ndarray) -> Update:
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
            words = () if ended is not None else self._end_utterance()
            self._rest(chunk)
            return ended or self._record(arrived, decoded=False, committed_words=tuple(words), **heard)
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

    @property
    def committed_text(self) -> str:
        return self.whisper.decode_text(self.archived_ids + words_text(self.committed))

    @property
    def tentative_text(self) -> str:
        """The newest hypothesis' words after the committed ones."""
        newest = self.recent[-1][1] if self.recent else []
        return self.whisper.decode_text(words_text(newest[tail_start(newest, self.committed) :]))

    def _decode_update(self, arrived: float, heard: dict, ends: bool) -> Update:
        """Decode the buffer, then commit the words two hypotheses agree on (or, where the utterance
        `ends`, all of them)."""
        decoded_from = {
            "buffer_start_seconds": self.buffer_start_seconds,
            "buffer_end_seconds": self._buffer_end,
            "prompt_ids": self._prompt_ids(),
            "earlier_text": self.whisper.decode_text(self.archived_ids),
        }
        result, self.held_back_seconds = self._decode(), 0.0
        self.hypothesis = list(result.token_ids)
        words = self._words(result)
        if ends:
            committed, count = self._end_utterance(words), len(result.token_ids)
        else:
            committed, count = self._commit_agreed(result, words)
        return self._record(
            arrived, True, result, committed_tokens=count, committed_words=tuple(committed),
            **decoded_from, **heard,
        )  # fmt: skip

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

    def _decode(self, waveform: np.ndarray | None = None) -> DecodeResult:
        """The buffer (or the start of it) decoded speculatively, its words timed (each step names where
        its proposal came from)."""
        options = self.options.decode_options(self.language, self._prompt_ids())
        make_drafter = self._previous_hypothesis if self.options.reuse_hypothesis else None
        buffer = self.buffer if waveform is None else waveform
        (transcription,) = self.whisper.transcribe_waveforms([buffer], options, make_drafter=make_drafter)
        result = transcription.result
        self.language = self.language or result.language
        return result

    def _words(self, result: DecodeResult) -> list[StreamWord]:
        tokenizer = self.whisper.pair.target.processor.tokenizer
        return hypothesis_words(tokenizer, result, self.buffer_start_seconds)

    def _activity(self, chunk: np.ndarray, level: float) -> Activity:
        """Speech or not: a chunk under the energy gate is not, without running the VAD; the VAD (when
        on) decides the others, else each is speech."""
        if level < self.options.silence_dbfs:
            return self.detector.skip(len(chunk)) if self.options.vad else Activity(False, False)
        return self.detector.hear(chunk) if self.options.vad else Activity(True, True)

    def _commit_agreed(self, result: DecodeResult, words: list[StreamWord]) -> tuple[list[StreamWord], int]:
        """Commit the words the last hypotheses agree on (`streaming.words.agreed_length`) among those
        heard (ending `margin_seconds` before the buffer does; never the newest's last word), then cut the
        buffer where the committed words allow (`_cut_point`). A hypothesis that stops short of the audio
        commits what it holds; a buffer past `trim_seconds` with no cut commits its hypothesis' closed
        segments, or its audio up to the quietest pause. Returns the words committed and how many of the
        hypothesis' tokens are committed."""
        self.recent = [*self.recent[-RECENT_HYPOTHESES + 1 :], (self._buffer_end, words)]
        if self.committed and committed_copy(words, self.committed) is None:
            self._cut_after_committed(words)  # the next update decodes what is not committed on its own
            return [], 0
        start = tail_start(words, self.committed)
        self.committed = retimed(self.committed, words, start)
        older = [hypothesis[tail_start(hypothesis, self.committed) :] for hypothesis in self._partners()]
        tails = [words[start:], *older]
        heard_until = self._buffer_end - self.options.margin_seconds
        limit = next((i for i, word in enumerate(tails[0]) if word.end > heard_until), len(tails[0]))
        committed = tails[0][: agreed_length(tails, self.options.confident, min(limit, len(tails[0]) - 1))]
        self.committed += committed
        done = start + len(committed)  # the hypothesis' words now committed
        count = words[done - 1].position + 1 if done else 0
        cut = self._cut_point(words, done)
        if cut is not None:
            self._cut(*cut)
            return committed, count
        windows = [record.window for record in result.tokens if record.kept]
        settled = len(self.buffer) / SAMPLE_RATE - self.options.settle_seconds  # cut no later than this
        long = len(self.buffer) > self.options.trim_seconds * SAMPLE_RATE
        segment = last_segment_end(self.hypothesis, windows, self._timestamp_begin, settled) if long else None
        segment = segment or self._stops_short(windows)  # what a hypothesis that skipped speech holds
        if segment is None and long:
            return committed + self._commit_until_pause(), count
        if segment is None:
            return committed, count
        end, seconds = segment
        rest = [word for word in words[done:] if word.position < end]  # before the cut, not yet agreed
        self.committed += rest
        self._cut(end, round(seconds * SAMPLE_RATE))
        return committed + rest, max(count, end)

    def _cut_after_committed(self, words: list[StreamWord]) -> None:
        """A hypothesis without the committed words (Whisper, its prompt holding the words the buffer's
        audio says again, may skip them): their audio leaves the buffer, so that the next decodings hear
        only what is not committed."""
        last = self.committed[-1]
        following = [word for word in words if word.middle > last.end]
        samples = self._gap_sample(last.end, following[0].start if following else last.end)
        dropped = [word for word in words if word.middle <= last.end]
        self._cut(dropped[-1].position + 1 if dropped else 0, samples)

    def _partners(self) -> list[list[StreamWord]]:
        """LocalAgreement's partners of the newest hypothesis: the latest one that heard at least
        `agreement_seconds` less audio, then the latest that heard that much less again (consecutive
        updates a fraction of a second apart would agree on the same guess)."""
        chosen, heard = [], self.recent[-1][0]
        for end, words in reversed(self.recent[:-1]):
            if end <= heard - self.options.agreement_seconds + 1e-6 and len(chosen) < 2:
                chosen.append(words)
                heard = end
        return chosen

    def _cut_point(self, words: list[StreamWord], done: int) -> tuple[int, int] | None:
        """(hypothesis tokens, samples) to cut after the first `done` words of the newest hypothesis (all
        committed), keeping `context_seconds` of committed audio before the words not yet committed: at
        the latest sentence or segment end, or, once the committed audio passes `cut_seconds` without one,
        at the widest gap between committed words. None where no boundary qualifies."""
        head_end = words[done].start if done < len(words) else self._buffer_end - self.options.settle_seconds
        latest = head_end - self.options.context_seconds
        boundaries = []  # (word index, gap seconds, natural)
        for i in range(done):
            after = words[i + 1].start if i + 1 < len(words) else words[i].end
            if after > latest:
                break
            closes = words[i].position + 1 < len(self.hypothesis)
            closes = closes and self.hypothesis[words[i].position + 1] >= self._timestamp_begin
            boundaries.append((i, after - words[i].end, closes or sentence_end(words[i])))
        natural = [boundary for boundary in boundaries if boundary[2]]
        if natural:
            chosen = natural[-1][0]
        elif boundaries and latest - self.buffer_start_seconds > self.options.cut_seconds:
            chosen = max(boundaries, key=lambda boundary: boundary[1])[0]
        else:
            return None
        after = words[chosen + 1].start if chosen + 1 < len(words) else words[chosen].end
        return words[chosen].position + 1, self._gap_sample(words[chosen].end, after)

    def _gap_sample(self, end: float, start: float) -> int:
        """The buffer sample to cut at between a word that ends at `end` and the next that starts at
        `start` (stream seconds): the quietest 20 ms around the gap (word times are the alignment's)."""
        slack = round(GAP_SLACK_SECONDS * SAMPLE_RATE)
        first = max(round((end - self.buffer_start_seconds) * SAMPLE_RATE) - slack, 1)
        last = min(round((start - self.buffer_start_seconds) * SAMPLE_RATE) + slack, len(self.buffer) - 1)
        return quietest_pause(self.buffer, first, max(last, first + 1), frame_seconds=0.02)

    @property
    def _buffer_end(self) -> float:
        """Stream seconds where the buffer ends."""
        return self.buffer_start_seconds + len(self.buffer) / SAMPLE_RATE

    def _end_utterance(self, words: list[StreamWord] | None = None) -> list[StreamWord]:
        """The utterance is over, and what was heard of it will not change: commit the newest hypothesis'
        words after the committed ones (`words`, its words; None: the last hypothesis, not decoded anew)
        and cut the whole buffer. A hypothesis that stops short of the speech (see `_stops_short`) is
        followed by a decoding of the audio after its text, as often as it takes. Returns the words
        committed."""
        if words is None:
            words = self.recent[-1][1] if self.recent else []
        newest = words
        committed = newest[tail_start(newest, self.committed) :]
        self.committed += committed
        for _ in range(MAX_REDECODES):
            cut = self._stops_short()
            if cut is None:
                break
            end, seconds = cut
            self._cut(end, round(seconds * SAMPLE_RATE))
            result = self._decode()  # the speech its text skipped
            self.hypothesis = list(result.token_ids)
            rest = self._words(result)
            rest = rest[tail_start(rest, self.committed) :]
            self.committed += rest
            committed += rest
        self._cut(len(self.hypothesis), len(self.buffer))
        self.recent = []
        return committed

    def _stops_short(self, windows: list[int] | None = None) -> tuple[int, float] | None:
        """(index after, seconds) of the hypothesis' last closed segment where more than `stall_seconds`
        of the buffer's speech follow it: Whisper, on a buffer that starts mid-speech, sometimes ends its
        text there and leaves the rest untranscribed, so that no later hypothesis would ever hold it."""
        last = last_segment_end(self.hypothesis, windows or [], self._timestamp_begin)
        stall = len(self.buffer) / SAMPLE_RATE - self.options.stall_seconds
        return last if last is not None and 0 < last[1] < stall else None

    def _commit_until_pause(self) -> list[StreamWord]:
        """Cut the buffer at its quietest pause after the committed words, decode the audio before it and
        commit its words after the committed ones: each word on one side of the cut."""
        stop = len(self.buffer) - round(self.options.settle_seconds * SAMPLE_RATE)
        start = len(self.buffer) // 2
        if self.committed:
            committed_end = round((self.committed[-1].end - self.buffer_start_seconds) * SAMPLE_RATE)
            start = max(start, committed_end) if committed_end < stop else start
        samples = quietest_pause(self.buffer, start, stop)
        result = self._decode(self.buffer[:samples])
        self.hypothesis = list(result.token_ids)
        words = self._words(result)
        committed = words[tail_start(words, self.committed) :]
        self.committed += committed
        self._cut(len(self.hypothesis), samples)
        return committed

    def _prompt_ids(self) -> tuple[int, ...]:
        keep = self.options.max_prompt_tokens
        return tuple(self.archived_ids[len(self.archived_ids) - keep :]) if keep > 0 else ()

    def _previous_hypothesis(self, rows: list[Row], draft_model: Drafter | None) -> Drafter:
        """The last hypothesis (ending with end-of-text) drafts first, the draft model where it cannot."""
        eos = self.whisper.pair.target.model.generation_config.eos_token_id
        vocabulary_size = self.whisper.pair.target.model.config.vocab_size
        fallback = draft_model if self.options.use_draft else None
        hints = [self.hypothesis + [eos]] * len(rows)
        return PreviousHypothesis(hints, fallback, vocabulary_size, self.options.max_reuse_tokens)

    def _cut(self, end: int, samples: int) -> None:
        """Cut `samples` from the buffer, and the hypothesis' first `end` tokens with them: the committed
        words heard before the cut (all of them where the whole buffer is cut) become the prompt's text."""
        cut_at = self.buffer_start_seconds + samples / SAMPLE_RATE
        cut_at = float("inf") if samples >= len(self.buffer) else cut_at
        self.archived_ids += words_text([word for word in self.committed if word.middle < cut_at])
        self.committed = [word for word in self.committed if word.middle >= cut_at]
        self.recent = [(end, [word for word in words if word.middle >= cut_at]) for end, words in self.recent]
        offset = round(samples / SAMPLE_RATE / TIMESTAMP_SECONDS)
        # the rest, in the trimmed buffer's time and opened at <|0.00|> as its decoding is: the next draft
        rest = shift_timestamps(self.hypothesis[end:], -offset, self._timestamp_begin)
        text = next((i for i, token in enumerate(rest) if token < self._timestamp_begin), len(rest))
        self.hypothesis = [self._timestamp_begin, *rest[text:]] if rest[text:] else []
        self.buffer = self.buffer[samples:]
        self.buffer_start_seconds += samples / SAMPLE_RATE

    @property
    def _preroll_samples(self) -> int:
        return round(self.options.preroll_seconds * SAMPLE_RATE)

    @property
    def _timestamp_begin(self) -> int:
        return timestamp_begin(self.whisper.pair.target.model.generation_config)

    def _record(self, arrived: float, decoded: bool, result=None, **decoded_from) -> Update:
        latency = time.perf_counter() - arrived
        if decoded:
            self.last_update_seconds = latency
        update = Update(
            index=len(self.updates),
            stream_seconds=self.stream_seconds,
            decoded=decoded,
            committed_text=self.committed_text,
            tentative_text=self.tentative_text,
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
