"""One clip's way through generate()'s seek loop: where its next window starts, the row that decodes it, and
what each finished window leaves (`whisper.tokens.split_window`: its tokens up to the last timestamp pair,
then a seek to that pair's first timestamp; a window judged no speech keeps nothing). With the temperature
fallback (`whisper.fallback`), a window that fails its thresholds leaves nothing and is decoded again, as
a new row, at the next temperature. `engine.windows` decodes many clips' windows as the rows of one batch.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from transformers import GenerationConfig

from specdec.engine.state import Clock, Row
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult, Encoding, Pass, Step, TokenRecord, Window
from specdec.whisper import word_times
from specdec.whisper.fallback import Fallback, Verdict, previous_text, window_segments
from specdec.whisper.features import PairFeatures
from specdec.whisper.logits import LogitsPipeline, NoSpeechRule
from specdec.whisper.models import ModelPair
from specdec.whisper.tokens import (
    FRAME_SECONDS,
    WINDOW_FRAMES,
    forced_prompt,
    language_code,
    split_window,
    timestamp_begin,
    timestamp_pair_ends,
)

MAX_WINDOWS = 64  # per 30 s of audio: a guard against a seek loop that stops advancing (generate() has none)


@dataclasses.dataclass(eq=False)  # one clip's decoding is itself (compared by identity)
class ClipDecoding:
    """One clip's way through generate()'s window loop: where the next window starts and what was kept."""

    features: PairFeatures  # the clip's features for each model, (1, mel_bins, frames)
    generator: torch.Generator  # the clip's own sampling generator
    options: DecodeOptions
    speculative: bool = True  # the draft proposes for its windows (where it speaks their language)
    seek: int = 0  # first frame of the next window
    window: int = 0  # index of the next window's record (each decoding of a window has one)
    attempt: int = 0  # the next window's temperature, an index into options.temperatures
    language_id: int | None = None
    first_prompt: list[int] | None = None
    fallback: Fallback | None = None  # generate()'s temperature fallback (set with the first row)
    segments: list[list[int]] = dataclasses.field(default_factory=list)  # generate()'s segments so far
    # (prompt_ids' text first), what a conditioned window's prompt holds (`whisper.fallback.previous_text`)
    conditioned: bool | None = None  # whether the next window is conditioned on them (generate()'s
    # do_condition_on_prev_tokens: the option as given for the first window)
    output: list[int] = dataclasses.field(default_factory=list)
    tokens: list[TokenRecord] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)
    passes: list[Pass] = dataclasses.field(default_factory=list)
    encodings: list[Encoding] = dataclasses.field(default_factory=list)
    windows: list[Window] = dataclasses.field(default_factory=list)
    token_spans: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # each output token's
    # (start, end) in seconds of the clip, with word timestamps (`whisper.word_times`)
    # each encoder's states for the window at `seek` (name -> (seek, frames read, states)), until the window
    # is kept: a window the temperature fallback decodes again is not encoded again
    encoded: dict[str, tuple[int, int, torch.Tensor]] = dataclasses.field(default_factory=dict, repr=False)
    alignment_seconds: float = 0.0  # the word timestamps' extra passes and alignment, in all
    end_seconds: float = 0.0  # clock time when its last window was folded in
    start_seconds: float = 0.0  # clock time when it joined (a request joining a running batch, later)
    done: bool = False

    def __post_init__(self) -> None:
        self.done = self.num_frames == 0
        self.conditioned = self.options.condition_on_prev_tokens
        self.segments = [list(self.options.prompt_ids)] if self.options.prompt_ids else []

    @property
    def num_frames(self) -> int:
        return self.features.target.shape[-1]

    @property
    def window_frames(self) -> int:
        return min(self.num_frames - self.seek, WINDOW_FRAMES)

    def kept_states(self, encoder: str, frames: int) -> torch.Tensor | None:
        """The encoder's states for the next window read `frames` frames at a time, if kept from an earlier
        decoding of it; else None."""
        kept = self.encoded.get(encoder)
        return kept[2] if kept is not None and kept[:2] == (self.seek, frames) else None

    def keep_states(self, encoder: str, frames: int, states: torch.Tensor) -> torch.Tensor:
        """Keep the encoder's states for the next window (`kept_states`); returns them."""
        self.encoded[encoder] = (self.seek, frames, states)
        return states

    @property
    def temperature(self) -> float:
        """What the next window is decoded at."""
        return self.options.temperatures[self.attempt]

    def next_row(self, pair: ModelPair, device: torch.device) -> Row:
        """The row for this clip's next window at its temperature: its forced prompt (`_previous_text`),
        logits processing and budget; it drafts if speculative and the draft speaks the window's language."""
        model, options = pair.target.model, self.options
        config = model.generation_config
        self.fallback = self.fallback or Fallback.of(config, options, model.config.vocab_size)
        previous, conditioned = self._previous_text(config, model.config.max_target_positions)
        prompt = forced_prompt(config, self.language_id, options, previous, conditioned)
        self.first_prompt = self.first_prompt or prompt
        limit = model.config.max_target_positions - len(prompt)
        budget = limit if options.max_new_tokens is None else min(limit, options.max_new_tokens)
        temperature = self.temperature
        pipeline = LogitsPipeline(config, len(prompt), options.timestamps, temperature, options.top_p, device)
        language = language_code(config, self.language_id)
        drafts = self.speculative and pair.draft is not None and pair.draft_fits(language, options.task)
        return Row(
            list(prompt), len(prompt), budget, pipeline, self.generator, self.window, len(self.steps),
            options, drafts=drafts, no_speech=NoSpeechRule.of(config, options, prompt, temperature),
        )  # fmt: skip

    def _previous_text(self, config: GenerationConfig, max_target_positions: int) -> tuple[list[int], bool]:
        """(the text before <|startoftranscript|>, whether the window is conditioned on earlier ones), as
        generate()'s `_prepare_decoder_input_ids`: conditioned, the segments so far; else options.prompt_ids,
        before every window (generate()'s prompt_ids without condition_on_prev_tokens)."""
        if self.conditioned and self.segments:
            return previous_text(self.segments, timestamp_begin(config), max_target_positions), True
        return list(self.options.prompt_ids), False

    def judge(self, row: Row) -> Verdict:
        """What generate() decides about a finished window (`Fallback.verdict`), from the target's numbers
        for it; a verdict's fallback is dropped when no temperature is left (the window is then kept)."""
        avg_logprob, no_speech = None, False
        if row.no_speech is not None:
            avg_logprob = row.no_speech.avg_logprob(row.token_logprobs)
            no_speech = row.no_speech.judge(row.no_speech_prob, avg_logprob)
        verdict = self.fallback.verdict(row.generated, avg_logprob, no_speech)
        if verdict.needs_fallback and not self.fallback.has_next(self.attempt):
            verdict = dataclasses.replace(verdict, needs_fallback=False)
        return verdict

    def finish_window(
        self,
        row: Row,
        verdict: Verdict,
        config: GenerationConfig,
        clock: Clock,
        times: list[float] | None = None,
    ) -> None:
        """Fold in a finished window (`judge` gave its verdict): keep its tokens up to generate()'s split and
        seek on, or stop after the last window. A window judged no speech keeps nothing and seeks past
        itself, as generate() skips it; one that falls back keeps nothing and is decoded again at the next
        temperature. times: the window's token times (`word_times.token_times`), with word timestamps."""
        generated = without_end_of_text(row)
        kept, advance = 0, 0
        if not verdict.needs_fallback:
            # generate() splits on timestamp pairs even without return_timestamps (the model may emit them)
            kept, advance = split_window(generated, timestamp_begin(config), self.window_frames)
            if verdict.no_speech:
                kept, advance = 0, self.window_frames
            else:
                self.segments += window_segments(generated, timestamp_begin(config))
            self.conditioned = self.fallback.conditions_next(self.temperature)
        self.output += generated[:kept]
        if times is not None:
            spans = word_times.token_spans(times, row.prompt_length, self.seek * FRAME_SECONDS)
            self.token_spans += spans[:kept]
        self.tokens += [
            record if i < kept else dataclasses.replace(record, kept=False)
            for i, record in enumerate(row.tokens)
        ]
        self.steps += row.steps
        self.passes += row.passes
        self.windows.append(self._window_record(row, verdict))
        self.seek += advance
        self.window += 1
        self.attempt = self.attempt + 1 if verdict.needs_fallback else 0
        if not verdict.needs_fallback:
            self.encoded.clear()  # the next window is another one
        self.done = not verdict.needs_fallback and self._past_last_window(advance)
        self.end_seconds = clock.seconds()

    def _window_record(self, row: Row, verdict: Verdict) -> Window:
        seconds = round(self.window_frames * FRAME_SECONDS, 2)
        start = round(self.seek * FRAME_SECONDS, 2)
        return Window(
            self.window, start, seconds, no_speech_prob=row.no_speech_prob, avg_logprob=verdict.avg_logprob,
            no_speech=verdict.no_speech, temperature=self.temperature,
            compression_ratio=verdict.compression_ratio, fell_back=verdict.needs_fallback,
        )  # fmt: skip

    def _past_last_window(self, advance: int) -> bool:
        """The seek loop is over: the audio's end reached, or a seek that stopped advancing (the guard)."""
        max_windows = MAX_WINDOWS * max(1, math.ceil(self.num_frames / WINDOW_FRAMES))
        seek_windows = sum(not window.fell_back for window in self.windows)
        return advance <= 0 or self.seek >= self.num_frames or seek_windows >= max_windows

    def settled(self, row: Row | None, config: GenerationConfig) -> list[int]:
        """Its output so far that no later pass can change (row: its window decoding now, if any): the kept
        windows', then that window's tokens up to its last timestamp pair (generate()'s split keeps at least
        those; with no pair yet, all of them: a later pair would keep them too), none of that window's while
        a no-speech rule may still empty it or the temperature fallback decode it again."""
        may_drop = (row is not None and row.no_speech is not None and row.no_speech.judges) or (
            self.fallback is not None and self.fallback.has_next(self.attempt)
        )
        if row is None or row.finished or may_drop:
            return list(self.output)
        generated = without_end_of_text(row)
        pair_ends = timestamp_pair_ends(generated, timestamp_begin(config))
        return self.output + generated[: pair_ends[-1] if pair_ends else len(generated)]

    def result(self, config: GenerationConfig) -> DecodeResult:
        """Its decoding, timed from when it joined."""
        passes = self.passes
        if self.start_seconds:
            passes = [
                dataclasses.replace(p, start_seconds=p.start_seconds - self.start_seconds) for p in passes
            ]
        return DecodeResult(
            token_ids=tuple(self.output),
            prompt_ids=tuple(self.first_prompt or ()),
            language=language_code(config, self.language_id),
            tokens=tuple(self.tokens),
            steps=tuple(self.steps),
            passes=tuple(passes),
            encodings=tuple(self.encodings),
            total_seconds=self.end_seconds - self.start_seconds,
            windows=tuple(self.windows),
            token_spans=tuple(self.token_spans) if self.options.word_timestamps else None,
            alignment_seconds=self.alignment_seconds,
            # the target alone is exact whatever its options say: only a speculative decoding relaxes
            acceptance_threshold=self.options.acceptance_threshold if self.speculative else None,
        )


def make_generator(options: DecodeOptions, device: torch.device) -> torch.Generator:
    """A clip's own sampling generator: seeded with options.seed, else from fresh entropy."""
    generator = torch.Generator(device=device)
    if options.seed is None:
        generator.seed()
    else:
        generator.manual_seed(options.seed)
    return generator


def without_end_of_text(row: Row) -> list[int]:
    """A window's generated tokens, its end-of-text left out."""
    eos = row.pipeline.eos_token_id
    return row.generated[:-1] if row.generated[-1:] == [eos] else row.generated
