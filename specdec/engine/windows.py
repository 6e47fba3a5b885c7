"""generate()'s window loop over many clips at once: the rows of one batch are the next windows of the clips
that still have one.

A clip goes through Whisper's seek loop (`engine.clip_decoding.ClipDecoding`): each 30 s window from
`seek` is decoded, its tokens kept up to the last timestamp pair, and decoding seeks on (one window for
most clips under 30 s). A `WindowBatch` decodes the clips' windows as rows of one `loop.Batch`: clips
join at any step (one encoder call per model for those joining together), and a clip whose window is
done rejoins with its next one at the next step (or with the same window at the temperature fallback's
next temperature), so no row waits for the batch's slowest. Each clip has
its own options (language, task, timestamps, sampling, whether to speculate). A clip's result is the
same as decoding it alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from transformers import GenerationConfig, WhisperForConditionalGeneration

from specdec.engine import cancel
from specdec.engine.cache import CachedDecoder
from specdec.engine.clip_decoding import ClipDecoding, make_generator
from specdec.engine.draft_length import DraftLength, draft_length
from specdec.engine.drafters import Drafter, DraftModel
from specdec.engine.fast_draft import draft_frames, pooled_positions, pooled_states
from specdec.engine.lean_decoder import lean_decoder
from specdec.engine.loop import Batch
from specdec.engine.state import Clock, Row
from specdec.options import DecodeOptions
from specdec.trace import DRAFT_ENCODER, TARGET_ENCODER, DecodeResult
from specdec.whisper import word_times
from specdec.whisper.features import PairFeatures, encode, window_features
from specdec.whisper.models import DraftKind, ModelPair
from specdec.whisper.tokens import WINDOW_FRAMES, detected_languages, given_language_id, needs_detection

# How a model turns windows of features (batch, mel_bins, 3000) into encoder states (batch, 1500, d_model),
# and the seconds it took. Default `whisper.features.encode`; a caller decoding the same audio many times
# (a benchmark) may pass a memo.
Encoder = Callable[[WhisperForConditionalGeneration, torch.Tensor], tuple[torch.Tensor, float]]
# Given a round's rows and the draft model's drafter for them (None without a draft), the drafter to use:
# e.g. the previous hypothesis of a live stream in front of it, or a benchmark's controlled drafter.
MakeDrafter = Callable[[list[Row], Drafter | None], Drafter | None]


class WindowBatch:
    """Clips' windows decoded as the rows of one `loop.Batch`: clips join at any step, a clip whose window
    is done rejoins with its next one, and `step` returns the clips whose last window it finished.

    Clips joining together are rows in the order they first joined. make_drafter (see MakeDrafter) makes
    each batch's drafter when the batch starts; with it, clips join only a batch with no rows (the seek
    loop in rounds, the r-th windows of the clips in order: the drafter was made for its rows). policy: makes
    the draft-length policy of each new batch (default: the one the first clip's options ask for).
    """

    def __init__(
        self,
        pair: ModelPair,
        clock: Clock | None = None,
        encoder: Encoder = encode,
        make_drafter: MakeDrafter | None = None,
        on_window: Callable[[ClipDecoding], None] | None = None,
        policy: Callable[[], DraftLength] | None = None,
    ) -> None:
        self.pair = pair
        self.clock = clock or Clock()
        self.encoder = encoder
        self.make_drafter = make_drafter
        self.on_window = on_window
        self.policy = policy
        self.batch: Batch | None = None
        self.waiting: list[ClipDecoding] = []  # their next windows join at the next step
        self._clips: dict[int, ClipDecoding] = {}  # id(row) -> the clip whose window it is
        self._states: dict[int, torch.Tensor] = {}  # id(row) -> its window's encoder states (1500, d_model),
        # while it decodes, for a row with word timestamps
        self._cross: dict[int, word_times.KeysValues] = {}  # id(row) -> its cross-attention keys and values
        self._arrival: dict[int, int] = {}  # id(clip) -> its place in the order clips joined
        self._draft_frames = WINDOW_FRAMES  # feature frames a separate draft's encoder reads in this batch

    @property
    def rows(self) -> list[Row]:
        return self.batch.rows if self.batch is not None else []

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.rows)

    def join(self, clips: Sequence[ClipDecoding]) -> None:
        """Clips to decode: their first windows join at the next step."""
        for clip in clips:
            self._arrival.setdefault(id(clip), len(self._arrival))
        self.waiting += [clip for clip in clips if not clip.done]

    def drop(self, clip: ClipDecoding) -> None:
        """Stop decoding a clip (its request was cancelled): its row leaves at the next step."""
        self.waiting = [other for other in self.waiting if other is not clip]
        self._arrival.pop(id(clip), None)
        clip.done = True
        for row in self.rows:
            if self._clips.get(id(row)) is clip:
                row.finished = True

    def settled(self, clip: ClipDecoding) -> list[int]:
        """A joined clip's output so far that no later pass can change (`ClipDecoding.settled`)."""
        row = next((row for row in self.rows if self._clips.get(id(row)) is clip), None)
        return clip.settled(row, self.pair.target.model.generation_config)

    def run(self, clips: Sequence[ClipDecoding]) -> list[DecodeResult]:
        """clips joined and decoded to the end, with the rest of the batch: their results, in order."""
        self.join(clips)
        while self.busy:
            self.step()
        return [clip.result(self.pair.target.model.generation_config) for clip in clips]

    def step(self) -> list[ClipDecoding]:
        """Waiting windows join, then one target pass over every row; the clips it finished."""
        self._admit()
        if not self.rows:
            return []
        config = self.pair.target.model.generation_config
        finished = []
        for row in self.batch.step():
            clip = self._clips.pop(id(row))
            states, cross = self._states.pop(id(row), None), self._cross.pop(id(row), None)
            if clip.done:  # dropped
                continue
            verdict = clip.judge(row)
            timed = states is not None and not verdict.needs_fallback  # a window decoded again is not timed
            times = self._token_times(clip, row, states, cross) if timed else None
            clip.finish_window(row, verdict, config, self.clock, times)
            if self.on_window is not None:
                self.on_window(clip)
            (finished if clip.done else self.waiting).append(clip)
        for clip in finished:
            del self._arrival[id(clip)]
        self._keep_cross()
        return finished

    def _keep_cross(self) -> None:
        """Word-timed rows keep their cross-attention keys and values once the target has computed them,
        for their alignment pass (a row that finishes at its first pass has its computed again there)."""
        for b, row in enumerate(self.rows):
            if id(row) in self._states and id(row) not in self._cross:
                cross = self.batch.target.cross_keys_values_of(b)
                if cross is not None:
                    self._cross[id(row)] = cross

    def _token_times(
        self, clip: ClipDecoding, row: Row, states: torch.Tensor, cross: word_times.KeysValues | None
    ) -> list[float]:
        """A finished window's token times (`word_times.token_times`), the extra pass timed on the clock."""
        start = time.perf_counter()
        model = self.pair.target.model
        frames = clip.features.audio_frames or clip.window_frames  # a short clip's audio, not its padding
        times = word_times.token_times(model, states, row.sequence, row.prompt_length, frames, cross)
        clip.alignment_seconds += time.perf_counter() - start
        return times

    def _admit(self) -> None:
        """The waiting clips' next windows join the batch: encoded together, one row each."""
        if not self.waiting or (self.rows and self.make_drafter is not None):
            return
        if not self.rows:
            self.batch = None
        clips = sorted(self._fitting(self.waiting), key=lambda clip: self._arrival[id(clip)])  # join order
        self.waiting = [clip for clip in self.waiting if clip not in clips]
        if not clips:
            return
        cancel.check()  # and before each join (encoders included)
        target = self.pair.target.model
        hidden = _encode(
            self.encoder, target, [c.features.target for c in clips], clips, TARGET_ENCODER, self.clock
        )
        config = target.generation_config
        detect = _set_given_languages(config, clips)  # before the target's cache grows: may raise
        decoder = self._target_decoder(hidden)
        first_row = decoder.batch_size - len(clips)
        _detect_languages(config, [clips[i] for i in detect], decoder, [first_row + i for i in detect])
        rows = [clip.next_row(self.pair, target.device) for clip in clips]
        for row, states in zip(rows, hidden, strict=True):  # kept for its word timestamps, if asked for
            if row.options.word_timestamps:
                self._states[id(row)] = states
        if self.batch is None:
            self._start(decoder, hidden, clips, rows)
        else:
            self._add_drafting(hidden, clips, rows)
            self.batch.add(rows)
        self._clips.update({id(row): clip for row, clip in zip(rows, clips, strict=True)})
        self._keep_cross()  # a detected language's pass has computed them already

    def _target_decoder(self, hidden: torch.Tensor) -> CachedDecoder:
        """The target's decoder with rows for these encoder states at its end: the batch's, or a new one."""
        if self.batch is None:
            return CachedDecoder(self.pair.target.model, hidden)
        self.batch.target.add(hidden)
        return self.batch.target

    def _start(
        self, decoder: CachedDecoder, hidden: torch.Tensor, clips: list[ClipDecoding], rows: list[Row]
    ) -> None:
        if self.make_drafter is not None and any(row.drafts for row in rows):
            for row in rows:  # a plug-in drafter gets the draft model of every row, as the seek loop gave it
                row.drafts = True
        drafter = None
        if any(row.drafts for row in rows):
            self._draft_frames = self._frames_for(_drafting(clips, rows))
            drafter = self._draft_model(hidden, clips, rows)
        if self.make_drafter is not None:
            drafter = self.make_drafter(rows, drafter)
            for row in rows:  # a plug-in drafter proposes for every row (it may hold a draft model back)
                row.drafts = drafter is not None
        policy = self._policy(clips[0].options) if drafter is not None else None
        self.batch = Batch(decoder, drafter, policy, self.clock)
        self.batch.add(rows)

    def _add_drafting(self, hidden: torch.Tensor, clips: list[ClipDecoding], rows: list[Row]) -> None:
        """The joining rows' side of the draft: added to the drafter, or the drafter made now (with blank
        rows for those already in the batch) when these are the first rows that draft."""
        batch = self.batch
        if batch.drafter is not None:
            draft_hidden, prompts = self._draft_rows(hidden, clips, rows)
            batch.drafter.add(draft_hidden, prompts)
        elif any(row.drafts for row in rows):
            earlier = list(batch.rows)
            self._draft_frames = self._frames_for(_drafting(clips, rows))
            blank = self._blank_draft_rows(len(earlier))
            prompts = [self.pair.vocabulary.prompt_to_draft(row.sequence) for row in earlier]
            batch.drafter = self._draft_model(hidden, clips, rows)
            batch.drafter.add(blank, prompts)  # after the new rows: reordered so that row b stays row b
            batch.drafter.keep([*range(len(rows), len(rows) + len(earlier)), *range(len(rows))])
            batch.policy = self._policy(clips[0].options)
            batch.policy.add(earlier)

    def _draft_model(self, hidden: torch.Tensor, clips: list[ClipDecoding], rows: list[Row]) -> DraftModel:
        draft_hidden, prompts = self._draft_rows(hidden, clips, rows)
        decoder = lean_decoder if self.pair.draft_settings.lean_step else CachedDecoder
        return DraftModel(decoder(self.pair.draft.model, draft_hidden), self.pair.vocabulary, prompts)

    def _draft_rows(
        self, hidden: torch.Tensor, clips: list[ClipDecoding], rows: list[Row]
    ) -> tuple[torch.Tensor, list[list[int]]]:
        """The draft's encoder states for rows (the target's for a shared encoder; else its own, blank for
        rows that do not draft), pooled as its settings say (`fast_draft.pooled_states`), and their draft
        prompts."""
        prompts = [self.pair.vocabulary.prompt_to_draft(row.sequence) for row in rows]
        pooling = self.pair.draft_settings.frame_pooling
        if self.pair.kind is DraftKind.SHARED_ENCODER:
            return pooled_states(hidden, pooling), prompts
        drafting = [i for i, row in enumerate(rows) if row.drafts]
        draft_hidden = self._blank_draft_rows(len(rows))
        if drafting:
            features = [clips[i].features.draft for i in drafting]
            draft_hidden[drafting] = pooled_states(_encode(
                self.encoder, self.pair.draft.model, features, [clips[i] for i in drafting], DRAFT_ENCODER,
                self.clock, self._draft_frames,
            ), pooling)  # fmt: skip
        return draft_hidden, prompts

    def _blank_draft_rows(self, count: int) -> torch.Tensor:
        """Pooled draft encoder states for rows that never draft (a separate draft's encoder is not run for
        them)."""
        model = self.pair.draft.model
        positions = self._draft_frames // 2 if self.pair.kind is not DraftKind.SHARED_ENCODER else 1500
        positions = pooled_positions(positions, self.pair.draft_settings.frame_pooling)
        return torch.zeros(count, positions, model.config.d_model, dtype=model.dtype, device=model.device)

    def _frames_for(self, clips: list[ClipDecoding]) -> int:
        """Feature frames a separate draft's encoder reads of these clips' next windows."""
        if self.pair.kind is DraftKind.SHARED_ENCODER:
            return WINDOW_FRAMES  # (no encoder of its own)
        windows = torch.cat([window_features(c.features.draft, c.seek) for c in clips])
        return draft_frames(self.pair.draft_settings, windows, max(clip.window_frames for clip in clips))

    def _fitting(self, clips: list[ClipDecoding]) -> list[ClipDecoding]:
        """The clips that may join now: all, unless the batch's separate draft reads fewer encoder frames
        than a clip's audio needs (that clip waits for a new batch)."""
        if self.batch is None or self.batch.drafter is None or self.pair.kind is DraftKind.SHARED_ENCODER:
            return list(clips)
        return [
            clip
            for clip in clips
            if clip.features.draft is None or self._frames_for([clip]) <= self._draft_frames
        ]

    def _policy(self, options: DecodeOptions) -> DraftLength:
        return self.policy() if self.policy is not None else draft_length(options)


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
    each batch's drafter (see MakeDrafter); on_window(clip) follows every window folded in (progress of
    a long file); clock: the decoding's clock, when several calls make one decoding (chunks of a file).
    """
    device = pair.target.model.device
    decodings = [
        ClipDecoding(features, make_generator(options, device), options, speculative) for features in clips
    ]
    return WindowBatch(pair, clock, encoder, make_drafter, on_window).run(decodings)


def _drafting(clips: list[ClipDecoding], rows: list[Row]) -> list[ClipDecoding]:
    return [clip for clip, row in zip(clips, rows, strict=True) if row.drafts]


def _set_given_languages(config: GenerationConfig, clips: list[ClipDecoding]) -> list[int]:
    """The language of each clip that starts now and has nothing to detect (its options' language; None for
    an English-only target); returns the indices of the clips whose language the target must detect."""
    detect = []
    for i, clip in enumerate(clips):
        if clip.first_prompt is not None:  # a later window: its language was set at the first
            continue
        if needs_detection(config, clip.options):
            detect.append(i)
        else:
            clip.language_id = given_language_id(config, clip.options)
    return detect


def _detect_languages(
    config: GenerationConfig, clips: list[ClipDecoding], decoder: CachedDecoder, rows: list[int]
) -> None:
    """The target's language for each clip (the decoder's row rows[i]) from its logits after
    `<|startoftranscript|>`, one pass for all of them. That pass computes the rows' cross-attention keys
    and values, which their decoding then reuses (transformers' `detect_language` computes them once more)."""
    if clips:
        logits = decoder.peek(rows, [config.decoder_start_token_id])
        for clip, language_id in zip(clips, detected_languages(config, logits), strict=True):
            clip.language_id = language_id


def _encode(
    encoder: Encoder,
    model,
    features: list,
    clips: list[ClipDecoding],
    name: str,
    clock: Clock,
    frames: int = WINDOW_FRAMES,
) -> torch.Tensor:
    """The encoder states of the clips' next windows: one batched encoder call, recorded once and named by
    each clip it encoded (a draft may read only the first frames, those of the windows' audio:
    `fast_draft.draft_frames`), over those that have none kept (`ClipDecoding.kept_states`: a window the
    temperature fallback decodes again reads the same states)."""
    kept = [clip.kept_states(name, frames) for clip in clips]
    todo = [i for i, states in enumerate(kept) if states is None]
    if todo:
        windows = torch.cat([window_features(features[i], clips[i].seek) for i in todo])[..., :frames]
        hidden, seconds = encoder(model, windows)
        encoding = clock.new_encoding(name, len(todo), seconds)
        for i, states in zip(todo, hidden, strict=True):
            clips[i].encodings.append(encoding)
            kept[i] = clips[i].keep_states(name, frames, states)
    return torch.stack(kept)
