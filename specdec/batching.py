"""Batched speculative decoding: many 30 s windows at once, each row accepting its own number of drafts.

Cache strategy: pad-and-mask with per-row lengths and position ids (`batch_runner.BatchRunner`): each row's
keys/values are written at its own positions, a mask shows each query exactly its row's keys up to its own
position, and rolling a row back is lowering its length. We chose it over realigning (shifting every row's
cache so that all rows end together) because realigning copies every row's whole cache at each step where
rows accept different numbers of tokens, which is nearly every step; pad-and-mask copies only when
finished rows are dropped.

No row is held to the batch minimum: `speculative.Row` is the same per-row state as in the one-row loop,
and one batched step is that loop's step for every row at once:

  propose: every drafting row drafts up to its own k (one batched draft pass per drafted position; a row
           that stopped, or is not drafting, is fed nothing); with options.cost_aware the batch's k is
           chosen each step from its measured pass costs (`draft_cost`) ->
  verify:  one batched target pass over each row's pending tokens and its draft ->
  accept:  per row, the same acceptance rule and token records as the one-row loop ->
  roll back: each row's target cache to its own length (the draft's follows at its next proposal) ->
  record:  one Step per row; rows of one batched step share its start, draft and verify seconds ->
  drop:    rows that finished leave both runners, so they cost no more compute.

Greedy output of every row is token for token its clip's output decoded alone (tests/test_batching.py).
Clips are batched window by window (`decode_batch_features`): round r decodes, together, the r-th
window of every clip that still has one (generate()'s seek loop; one round for most clips under 30 s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec.acceptance import Verdict
from specdec.batch_runner import BatchRunner
from specdec.decoding import ClipDecoding, Encoder, language_ids, make_generator, window_features
from specdec.draft_cost import CostAwareDraftLength
from specdec.models import DraftKind, ModelPair
from specdec.options import DecodeOptions
from specdec.processing import LogitsPipeline
from specdec.runner import encode
from specdec.speculative import Proposal, Row, accept_tokens, adapt_draft_length, choose_token, judge
from specdec.trace import ACCEPTED, DecodeResult, Step
from specdec.vocabulary import VocabularyMap


@dataclass
class Lane:
    """One row of a batch: a window of one clip, with what its steps need besides the Row."""

    row: Row
    pipeline: LogitsPipeline
    max_new_tokens: int
    window: int  # the clip's window index, for the records
    first_step: int  # index of this window's first step in the clip's trace
    generator: torch.Generator  # the clip's own, so sampling draws as it would alone


class BatchDrafter:
    """The draft model's side of a batch: per row its own draft ids and cache length; target-id proposals."""

    def __init__(
        self, runner: BatchRunner, vocabulary: VocabularyMap, draft_prompts: list[list[int]]
    ) -> None:
        self.runner = runner
        self.vocabulary = vocabulary
        self.draft_prompts = draft_prompts
        self.sequences = [list(prompt) for prompt in draft_prompts]  # draft ids, per row

    def propose(
        self, lanes: list[Lane], num_draft_tokens: list[int], options: DecodeOptions
    ) -> list[Proposal]:
        """Row b drafts up to num_draft_tokens[b] tokens after its sequence (fewer if the draft is unsure)."""
        start = time.perf_counter()
        drafting = [b for b, n in enumerate(num_draft_tokens) if n > 0]
        self._follow(lanes, drafting)
        tokens: list[list[int]] = [[] for _ in lanes]
        probs: list[list[torch.Tensor]] = [[] for _ in lanes]
        while drafting:
            feeds = [
                self.sequences[b][self.runner.lengths[b] :] if b in drafting else []
                for b in range(len(lanes))
            ]
            logits = self.runner.feed(feeds)
            last = self.vocabulary.logits_to_target(
                torch.stack([logits[b][-1] for b in drafting])
            )  # (rows, vocab)
            still_drafting = []
            for b, row_logits in zip(drafting, last, strict=True):
                lane = lanes[b]
                scores = lane.pipeline.scores_at(lane.row.sequence + tokens[b], [], row_logits[None])
                draft_probs = (
                    lane.pipeline.probs(scores) if options.sampling else torch.softmax(scores.float(), -1)
                )
                token = choose_token(scores, draft_probs, options.sampling, lane.generator)
                tokens[b].append(token)
                probs[b].append(draft_probs[0])
                self.sequences[b].append(self.vocabulary.to_draft([token])[0])
                stop = (
                    token == lane.pipeline.eos_token_id
                    or float(draft_probs[0, token]) < options.draft_confidence
                )
                if not stop and len(tokens[b]) < num_draft_tokens[b]:
                    still_drafting.append(b)
            drafting = still_drafting
        seconds = time.perf_counter() - start
        return [
            Proposal(row_tokens, torch.stack(row_probs) if row_probs else None, seconds)
            for row_tokens, row_probs in zip(tokens, probs, strict=True)
        ]

    def _follow(self, lanes: list[Lane], rows: list[int]) -> None:
        """Make these rows' draft sequences their rows', keeping each cache up to their common prefix."""
        lengths = list(self.runner.lengths)
        for b in rows:
            sequence = self.draft_prompts[b] + self.vocabulary.to_draft(lanes[b].row.generated)
            cached = self.sequences[b][: lengths[b]]
            lengths[b] = next(
                (i for i, (mine, theirs) in enumerate(zip(cached, sequence, strict=False)) if mine != theirs),
                min(len(cached), len(sequence)),
            )
            self.sequences[b] = sequence
        self.runner.rollback(lengths)

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (indices into the current batch)."""
        self.runner.keep(rows)
        self.draft_prompts = [self.draft_prompts[b] for b in rows]
        self.sequences = [self.sequences[b] for b in rows]


def decode_batch(
    target: BatchRunner,
    drafter: BatchDrafter | None,
    lanes: list[Lane],
    options: DecodeOptions,
    clock_start: float | None = None,
) -> list[Lane]:
    """Decode every lane's window to end-of-text or its budget; a row leaves the batch when it finishes."""
    clock_start = time.perf_counter() if clock_start is None else clock_start
    active = list(lanes)  # active[b] is row b of both runners
    chooser = (
        CostAwareDraftLength(len(lanes), options.num_draft_tokens, options.max_draft_tokens)
        if options.cost_aware and drafter is not None
        else None
    )
    while active:
        step_start = time.perf_counter()
        num_draft_tokens = _draft_lengths(active, drafter, chooser, target.lengths)
        proposals = (
            drafter.propose(active, num_draft_tokens, options)
            if drafter is not None and any(n > 0 for n in num_draft_tokens)
            else [Proposal([], None, 0.0)] * len(active)
        )
        verify_start = time.perf_counter()
        feeds = [
            lane.row.sequence[length:] + proposal.tokens
            for lane, proposal, length in zip(active, proposals, target.lengths, strict=True)
        ]
        verdicts = []
        for lane, proposal, logits in zip(active, proposals, target.feed(feeds), strict=True):
            verdict, target_probs = judge(
                lane.row,
                proposal,
                logits[-(len(proposal.tokens) + 1) :],
                lane.pipeline,
                options,
                lane.generator,
            )
            step = lane.first_step + len(lane.row.steps)
            accept_tokens(
                lane.row, proposal, verdict, target_probs, lane.pipeline.eos_token_id, lane.window, step
            )
            verdicts.append(verdict)
        target.rollback([len(lane.row.sequence) - 1 for lane in active])  # the newest token is fed next step
        verify_seconds = time.perf_counter() - verify_start
        if chooser is not None:
            _observe(chooser, feeds, verify_seconds, proposals, verdicts)
        for lane, proposal, verdict in zip(active, proposals, verdicts, strict=True):
            _record(lane, proposal, verdict, step_start - clock_start, verify_seconds)
            if options.adaptive and drafter is not None and chooser is None:
                adapt_draft_length(lane.row, len(proposal.tokens), verdict.n_accepted, options)
            lane.row.finished = lane.row.finished or len(lane.row.generated) >= lane.max_new_tokens
        unfinished = [b for b, lane in enumerate(active) if not lane.row.finished]
        if len(unfinished) < len(active):
            target.keep(unfinished)
            if drafter is not None:
                drafter.keep(unfinished)
            if chooser is not None:
                chooser.keep(unfinished)
            active = [active[b] for b in unfinished]
    return lanes


def _draft_lengths(
    active: list[Lane],
    drafter: BatchDrafter | None,
    chooser: CostAwareDraftLength | None,
    target_lengths: list[int],
) -> list[int]:
    """Each row's k this step: its own (fixed or adaptive) or the cost-aware choice; within its budget."""
    budgets = [lane.max_new_tokens - len(lane.row.generated) - 1 for lane in active]
    if drafter is None:
        return [0] * len(active)
    if chooser is not None:
        pending = [
            len(lane.row.sequence) - length for lane, length in zip(active, target_lengths, strict=True)
        ]
        return chooser.choose(pending, budgets)
    return [
        0 if lane.row.paused else min(lane.row.num_draft_tokens, budget)
        for lane, budget in zip(active, budgets, strict=True)
    ]


def _observe(
    chooser: CostAwareDraftLength,
    feeds: list[list[int]],
    verify_seconds: float,
    proposals: list[Proposal],
    verdicts: list[Verdict],
) -> None:
    """Tell the cost-aware chooser what this step fed, how long its passes took and what was accepted."""
    draft_passes = max(len(proposal.tokens) for proposal in proposals)  # one batched pass per position
    chooser.observe(
        sum(len(feed) for feed in feeds),
        verify_seconds,
        draft_passes,
        proposals[0].seconds if draft_passes else 0.0,
        [(len(p.tokens), v.n_accepted) for p, v in zip(proposals, verdicts, strict=True)],
    )


def _record(
    lane: Lane, proposal: Proposal, verdict: Verdict, start_seconds: float, verify_seconds: float
) -> None:
    row = lane.row
    row.steps.append(
        Step(
            index=lane.first_step + len(row.steps),
            window=lane.window,
            drafted=tuple(proposal.tokens),
            n_accepted=verdict.n_accepted,
            target_token=row.tokens[-1].token_id if row.tokens[-1].label != ACCEPTED else None,
            draft_seconds=proposal.seconds,
            verify_seconds=verify_seconds,
            start_seconds=start_seconds,
        )
    )


def decode_batch_features(
    pair: ModelPair,
    features: list[torch.Tensor],
    draft_features: list[torch.Tensor | None],
    options: DecodeOptions,
    use_draft: bool = True,
    encoder: Encoder = encode,
) -> list[DecodeResult]:
    """Decode clips together (features[i]: (1, mel_bins, frames); draft_features[i] the draft's own, or None
    for a shared encoder); each result is the one `decode_features` gives for that clip alone.

    Timings are the batch's wall clock: a clip's encoder seconds are its rounds' batched encodings, its
    total seconds run from the batch's start to the end of its last window. encoder runs a model's encoder
    on a batch of windows (batch, mel_bins, 3000), as decode_features' does on one (the benchmark's memo).
    """
    clock_start = time.perf_counter()
    target = pair.target.model
    config = target.generation_config
    use_draft = use_draft and pair.draft is not None
    clips = [
        ClipDecoding(
            clip_features, clip_draft_features, make_generator(options, clip_features.device), clock_start
        )
        for clip_features, clip_draft_features in zip(features, draft_features, strict=True)
    ]
    while pending := [clip for clip in clips if not clip.done]:
        hidden, seconds = encoder(target, torch.cat([window_features(c.features, c.seek) for c in pending]))
        for clip, language_id in zip(pending, language_ids(pair, options, hidden), strict=True):
            if clip.first_prompt is None:
                clip.language_id = language_id
        lanes = [_lane(clip, pair, options, hidden.device) for clip in pending]
        drafter = None
        if use_draft:
            drafter, draft_seconds = _batch_drafter(pair, hidden, pending, lanes, encoder)
            seconds += draft_seconds
        for clip in pending:
            clip.encoder_seconds += seconds
        decode_batch(BatchRunner(target, hidden), drafter, lanes, options, clock_start)
        for clip, lane in zip(pending, lanes, strict=True):
            clip.finish_window(lane.row, config, lane.pipeline.eos_token_id)
    return [clip.result(config) for clip in clips]


def _lane(clip: ClipDecoding, pair: ModelPair, options: DecodeOptions, device: torch.device) -> Lane:
    """The row for the clip's next window: its forced prompt, logits processing and token budget."""
    model = pair.target.model
    prompt = clip.prompt(model.generation_config, options)
    pipeline = LogitsPipeline(
        model.generation_config, len(prompt), options.timestamps, options.temperature, options.top_p, device
    )
    row = Row(list(prompt), len(prompt), options.num_draft_tokens)
    max_new_tokens = clip.max_new_tokens(model.config, options, prompt)
    return Lane(row, pipeline, max_new_tokens, clip.window, len(clip.steps), clip.generator)


def _batch_drafter(
    pair: ModelPair,
    target_hidden: torch.Tensor,
    clips: list[ClipDecoding],
    lanes: list[Lane],
    encoder: Encoder = encode,
) -> tuple[BatchDrafter, float]:
    """The draft's batch runner: the target's encoder output if shared, else its own batched encoding."""
    seconds = 0.0
    if pair.kind is DraftKind.SHARED_ENCODER:
        hidden = target_hidden
    else:
        windows = torch.cat([window_features(clip.draft_features, clip.seek) for clip in clips])
        hidden, seconds = encoder(pair.draft.model, windows)
    draft_prompts = [pair.vocabulary.prompt_to_draft(lane.row.sequence) for lane in lanes]
    return BatchDrafter(BatchRunner(pair.draft.model, hidden), pair.vocabulary, draft_prompts), seconds
