"""generate()'s window loop over N clips at once: the rows of each batch are the next windows of the clips
that still have one.

A clip goes through Whisper's seek loop (`whisper.tokens.split_window`): each 30 s window from `seek` is
decoded, its tokens kept up to the last timestamp pair, and decoding seeks on (one window for most clips
under 30 s). Round r decodes, as one batch, the r-th window of every clip that still has one: one encoder
call per model, one `loop.decode_rows` over the rows. A clip's result is the same as decoding it alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from transformers import GenerationConfig, WhisperForConditionalGeneration

from specdec.engine import cancel
from specdec.engine.cache import CachedDecoder
from specdec.engine.drafters import Drafter, DraftModel
from specdec.engine.fast_draft import draft_frames
from specdec.engine.lean_decoder import LeanDecoder
from specdec.engine.loop import decode_rows
from specdec.engine.state import Clock, Row
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult, Encoding, Pass, Step, TokenRecord, Window
from specdec.whisper.features import PairFeatures, encode, window_features
from specdec.whisper.logits import LogitsPipeline, NoSpeechRule
from specdec.whisper.models import DraftKind, DraftSettings, ModelPair
from specdec.whisper.tokens import (
    FRAME_SECONDS,
    WINDOW_FRAMES,
    forced_prompt,
    language_code,
    language_ids,
    split_window,
    timestamp_begin,
)

MAX_WINDOWS = 64  # per 30 s of audio: a guard against a seek loop that stops advancing (generate() has none)

# How a model turns windows of features (batch, mel_bins, 3000) into encoder states (batch, 1500, d_model),
# and the seconds it took. Default `whisper.features.encode`; a caller decoding the same audio many times
# (a benchmark) may pass a memo.
Encoder = Callable[[WhisperForConditionalGeneration, torch.Tensor], tuple[torch.Tensor, float]]
# Given a round's rows and the draft model's drafter for them (None without a draft), the drafter to use:
# e.g. the previous hypothesis of a live stream in front of it, or a benchmark's controlled drafter.
MakeDrafter = Callable[[list[Row], Drafter | None], Drafter | None]


@dataclasses.dataclass
class ClipDecoding:
    """One clip's way through generate()'s window loop: where the next window starts and what was kept."""

    features: PairFeatures  # the clip's features for each model, (1, mel_bins, frames)
    generator: torch.Generator  # the clip's own sampling generator
    seek: int = 0  # first frame of the next window
    window: int = 0  # index of the next window
    language_id: int | None = None
    first_prompt: list[int] | None = None
    output: list[int] = dataclasses.field(default_factory=list)
    tokens: list[TokenRecord] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)
    passes: list[Pass] = dataclasses.field(default_factory=list)
    encodings: list[Encoding] = dataclasses.field(default_factory=list)
    windows: list[Window] = dataclasses.field(default_factory=list)
    end_seconds: float = 0.0  # clock time when its last window was folded in
    done: bool = False

    def __post_init__(self) -> None:
        self.done = self.num_frames == 0

    @property
    def num_frames(self) -> int:
        return self.features.target.shape[-1]

    @property
    def window_frames(self) -> int:
        return min(self.num_frames - self.seek, WINDOW_FRAMES)

    def next_row(self, pair: ModelPair, options: DecodeOptions, device: torch.device) -> Row:
        """The row for this clip's next window: its forced prompt (the previous text, options.prompt_ids,
        conditions every window, as generate()'s prompt_ids do without condition_on_prev_tokens), logits
        processing and budget."""
        model = pair.target.model
        config = model.generation_config
        prompt = forced_prompt(config, self.language_id, options, options.prompt_ids)
        self.first_prompt = self.first_prompt or prompt
        limit = model.config.max_target_positions - len(prompt)
        budget = limit if options.max_new_tokens is None else min(limit, options.max_new_tokens)
        pipeline = LogitsPipeline(
            config, len(prompt), options.timestamps, options.temperature, options.top_p, device
        )
        return Row(
            list(prompt), len(prompt), budget, pipeline, self.generator, self.window, len(self.steps),
            no_speech=NoSpeechRule.of(config, options, prompt),
        )  # fmt: skip

    def finish_window(self, row: Row, config: GenerationConfig, clock: Clock) -> None:
        """Keep the window's tokens up to generate()'s split and seek on, or stop after the last window.
        A window judged no speech keeps nothing and seeks past itself, as generate() skips it."""
        eos = row.pipeline.eos_token_id
        generated = row.generated[:-1] if row.generated[-1:] == [eos] else row.generated
        avg_logprob, no_speech = None, False
        if row.no_speech is not None:
            avg_logprob = row.no_speech.avg_logprob(row.token_logprobs)
            no_speech = row.no_speech.judge(row.no_speech_prob, avg_logprob)
        if no_speech:
            kept, advance = 0, self.window_frames
        else:  # generate() splits on timestamp pairs even without return_timestamps (the model may emit them)
            kept, advance = split_window(generated, timestamp_begin(config), self.window_frames)
        self.output += generated[:kept]
        self.tokens += [
            record if i < kept else dataclasses.replace(record, kept=False)
            for i, record in enumerate(row.tokens)
        ]
        self.steps += row.steps
        self.passes += row.passes
        seconds = round(self.window_frames * FRAME_SECONDS, 2)
        start = round(self.seek * FRAME_SECONDS, 2)
        measured = {"no_speech_prob": row.no_speech_prob, "avg_logprob": avg_logprob, "no_speech": no_speech}
        self.windows.append(Window(self.window, start, seconds, **measured))
        self.seek += advance
        self.window += 1
        max_windows = MAX_WINDOWS * max(1, math.ceil(self.num_frames / WINDOW_FRAMES))
        self.done = advance <= 0 or self.seek >= self.num_frames or self.window >= max_windows
        self.end_seconds = clock.seconds()

    def result(self, config: GenerationConfig) -> DecodeResult:
        return DecodeResult(
            token_ids=tuple(self.output),
            prompt_ids=tuple(self.first_prompt or ()),
            language=language_code(config, self.language_id),
            tokens=tuple(self.tokens),
            steps=tuple(self.steps),
            passes=tuple(self.passes),
            encodings=tuple(self.encodings),
            total_seconds=self.end_seconds,
            windows=tuple(self.windows),
        )


def decode_clips(
    pair: ModelPair,
    clips: Sequence[PairFeatures],
    options: DecodeOptions,
    speculative: bool = True,
    make_drafter: MakeDrafter | None = None,
    on_window: Callable[[ClipDecoding], None] | None = None,
    encoder: Encoder = encode,
    clock: Clock | None = None,
) -> list[DecodeResult]:
    """Decode clips together, each with the result it gets alone; speculative when a draft exists.

    clips[i]: clip i's features for each model (`whisper.features.pair_features`). make_drafter replaces
    each round's drafter (see MakeDrafter); on_window(clip) follows every window folded in (progress of
    a long file); clock: the decoding's clock, when several calls make one decoding (chunks of a file).
    """
    clock = clock or Clock()
    target = pair.target.model
    config = target.generation_config
    device = target.device
    decodings = [ClipDecoding(features, make_generator(options, device)) for features in clips]
    while pending := [clip for clip in decodings if not clip.done]:
        cancel.check()  # and before each round of windows (encoders included)
        hidden = _encode(encoder, target, [c.features.target for c in pending], pending, "target", clock)
        for clip, language_id in zip(pending, language_ids(pair, options, hidden), strict=True):
            if clip.first_prompt is None:
                clip.language_id = language_id
        rows = [clip.next_row(pair, options, device) for clip in pending]
        drafting = speculative and _draft_speaks(pair, pending, options)
        drafter = _draft_model(pair, hidden, pending, rows, encoder, clock) if drafting else None
        if make_drafter is not None:
            drafter = make_drafter(rows, drafter)
        decode_rows(CachedDecoder(target, hidden), drafter, rows, options, clock)
        for clip, row in zip(pending, rows, strict=True):
            clip.finish_window(row, config, clock)
            if on_window is not None:
                on_window(clip)
    return [clip.result(config) for clip in decodings]


def _draft_speaks(pair: ModelPair, clips: list[ClipDecoding], options: DecodeOptions) -> bool:
    """False where the draft would only be rejected, so its encoder and steps are not paid: an English-only
    draft and no clip of the round in English (or a translation). The target decodes them alone."""
    config = pair.target.model.generation_config
    return any(pair.draft_fits(language_code(config, clip.language_id), options.task) for clip in clips)


def _encode(
    encoder: Encoder,
    model,
    features: list,
    clips: list[ClipDecoding],
    name: str,
    clock: Clock,
    settings: DraftSettings | None = None,
) -> torch.Tensor:
    """One batched encoder call over the clips' next windows, recorded once and named by each clip (a
    draft's settings may have it read only the windows' audio: `fast_draft.draft_frames`)."""
    windows = torch.cat([window_features(f, clip.seek) for f, clip in zip(features, clips, strict=True)])
    if settings is not None:
        windows = windows[..., : draft_frames(settings, windows, max(clip.window_frames for clip in clips))]
    hidden, seconds = encoder(model, windows)
    encoding = clock.new_encoding(name, len(clips), seconds)
    for clip in clips:
        clip.encodings.append(encoding)
    return hidden


def _draft_model(
    pair: ModelPair,
    hidden: torch.Tensor,
    clips: list[ClipDecoding],
    rows: list[Row],
    encoder: Encoder,
    clock: Clock,
) -> DraftModel | None:
    """The draft model for a round's rows: on the target's encoder states if shared, else on its own."""
    if pair.draft is None:
        return None
    if pair.kind is not DraftKind.SHARED_ENCODER:
        features = [c.features.draft for c in clips]
        hidden = _encode(encoder, pair.draft.model, features, clips, "draft", clock, pair.draft_settings)
    prompts = [pair.vocabulary.prompt_to_draft(row.sequence) for row in rows]
    decoder = LeanDecoder if pair.draft_settings.lean_step else CachedDecoder
    return DraftModel(decoder(pair.draft.model, hidden), pair.vocabulary, prompts)


def make_generator(options: DecodeOptions, device: torch.device) -> torch.Generator:
    """A clip's own sampling generator: seeded with options.seed, else from fresh entropy."""
    generator = torch.Generator(device=device)
    if options.seed is None:
        generator.seed()
    else:
        generator.manual_seed(options.seed)
    return generator
