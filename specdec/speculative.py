"""The speculative decoding loop for one 30 s window, and target-only decoding through the same loop.

Each step: the draft proposes up to k tokens -> the target verifies them plus one in a single pass ->
the acceptance rule keeps a prefix and supplies one token -> both caches roll back to what was kept ->
the step is recorded -> stop at end-of-text or the token budget. Target-only decoding is the same loop
with no draft (k = 0), so both are timed by the same code.

State is per row (`Row`: its own sequence, cache length, k) so that batching, where rows accept
different numbers of tokens, can reuse this loop's parts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specdec.acceptance import Verdict, greedy_accept, speculative_sample
from specdec.options import DecodeOptions
from specdec.processing import LogitsPipeline
from specdec.runner import DecoderRunner
from specdec.trace import ACCEPTED, BONUS, CORRECTED, TARGET, Step, TokenRecord
from specdec.vocabulary import VocabularyMap

MAX_PAUSE = 16  # adaptive drafting: longest run of target-only passes after the draft keeps failing


@dataclass
class Row:
    """Mutable decoding state of one sequence in one window."""

    sequence: list[int]  # target ids: forced prompt + generated tokens
    prompt_length: int
    num_draft_tokens: int  # current k (changes when adaptive)
    tokens: list[TokenRecord] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    finished: bool = False
    paused: int = 0  # adaptive: target-only passes left before the draft is tried again
    backoff: int = 0  # adaptive: length of the last pause (doubles while the draft keeps failing)

    @property
    def generated(self) -> list[int]:
        return self.sequence[self.prompt_length :]


@dataclass(frozen=True)
class Proposal:
    """The draft's tokens (target ids) with the draft's distribution at each position."""

    tokens: list[int]
    draft_probs: torch.Tensor | None  # (len(tokens), target vocab); None when nothing was drafted
    seconds: float


class Drafter:
    """The draft model's side of a window: its own ids and cache, proposals in target ids."""

    proposes_while_paused = (
        False  # adaptive pauses stop the draft model (a drafter with free proposals may go on)
    )

    def __init__(
        self,
        runner: DecoderRunner,
        vocabulary: VocabularyMap,
        draft_prompt: list[int],
        pipeline: LogitsPipeline,
    ) -> None:
        self.runner = runner
        self.vocabulary = vocabulary
        self.draft_prompt = draft_prompt
        self.sequence = list(draft_prompt)  # draft ids
        self.pipeline = pipeline

    def propose(
        self,
        row: Row,
        num_draft_tokens: int,
        options: DecodeOptions,
        generator: torch.Generator | None,
        max_tokens: int | None = None,
    ) -> Proposal:
        """Draft up to num_draft_tokens tokens after row.sequence (fewer if the draft loses confidence).

        max_tokens: the most the window's budget allows; a drafter whose proposals cost nothing (the
        previous hypothesis) may go past num_draft_tokens up to it, a draft model does not."""
        start = time.perf_counter()
        self._follow(row)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for _ in range(num_draft_tokens):
            logits = self.runner.feed(self.sequence[self.runner.length :])[-1:]  # (1, draft vocab)
            scores = self.pipeline.scores_at(
                row.sequence + tokens, [], self.vocabulary.logits_to_target(logits)
            )
            draft_probs = (
                self.pipeline.probs(scores) if options.sampling else torch.softmax(scores.float(), -1)
            )
            token = choose_token(scores, draft_probs, options.sampling, generator)
            tokens.append(token)
            probs.append(draft_probs[0])
            self.sequence.append(self.vocabulary.to_draft([token])[0])
            if token == self.pipeline.eos_token_id or float(draft_probs[0, token]) < options.draft_confidence:
                break
        stacked = torch.stack(probs) if probs else None
        return Proposal(tokens, stacked, time.perf_counter() - start)

    def _follow(self, row: Row) -> None:
        """Make the draft's sequence the row's, keeping the cache up to their common prefix."""
        sequence = self.draft_prompt + self.vocabulary.to_draft(row.generated)
        common = 0
        for mine, theirs in zip(self.sequence[: self.runner.length], sequence, strict=False):
            if mine != theirs:
                break
            common += 1
        self.runner.rollback(common)
        self.sequence = sequence


def choose_token(
    scores: torch.Tensor, probs: torch.Tensor, sampling: bool, generator: torch.Generator | None
) -> int:
    """Argmax of the processed scores, or a sample from probs; scores, probs: (1, vocab)."""
    if sampling:
        return int(torch.multinomial(probs[0], 1, generator=generator))
    return int(scores[0].argmax())


def decode_window(
    target: DecoderRunner,
    drafter: Drafter | None,
    row: Row,
    pipeline: LogitsPipeline,
    options: DecodeOptions,
    max_new_tokens: int,
    window: int = 0,
    generator: torch.Generator | None = None,
    clock_start: float | None = None,
    first_step: int = 0,
) -> Row:
    """Decode one window to end-of-text or max_new_tokens; the row's steps and tokens record how."""
    clock_start = time.perf_counter() if clock_start is None else clock_start
    while not row.finished:
        step_start = time.perf_counter()
        budget = max_new_tokens - len(row.generated)
        drafting = drafter is not None and (not row.paused or drafter.proposes_while_paused)
        num_draft_tokens = min(row.num_draft_tokens, budget - 1) if drafting else 0
        proposal = (
            drafter.propose(row, num_draft_tokens, options, generator, max_tokens=budget - 1)
            if num_draft_tokens > 0
            else Proposal([], None, 0.0)
        )
        verify_start = time.perf_counter()
        verdict, target_probs = _verify(target, row, proposal, pipeline, options, generator)
        accept_tokens(
            row, proposal, verdict, target_probs, pipeline.eos_token_id, window, first_step + len(row.steps)
        )
        target.rollback(len(row.sequence) - 1)  # the newest token is fed with the next step
        row.steps.append(
            Step(
                index=first_step + len(row.steps),
                window=window,
                drafted=tuple(proposal.tokens),
                n_accepted=verdict.n_accepted,
                target_token=row.tokens[-1].token_id if row.tokens[-1].label != ACCEPTED else None,
                draft_seconds=proposal.seconds,
                verify_seconds=time.perf_counter() - verify_start,
                start_seconds=step_start - clock_start,
            )
        )
        if options.adaptive and drafter is not None:
            adapt_draft_length(row, len(proposal.tokens), verdict.n_accepted, options)
        row.finished = row.finished or len(row.generated) >= max_new_tokens
    return row


def _verify(
    target: DecoderRunner,
    row: Row,
    proposal: Proposal,
    pipeline: LogitsPipeline,
    options: DecodeOptions,
    generator: torch.Generator | None,
) -> tuple[Verdict, torch.Tensor]:
    """One target pass over the pending tokens and the draft; the verdict and target_probs (k+1, vocab)."""
    num_draft_tokens = len(proposal.tokens)
    pending = row.sequence[target.length :]
    logits = target.feed(pending + proposal.tokens)[-(num_draft_tokens + 1) :]  # (k+1, vocab)
    return judge(row, proposal, logits, pipeline, options, generator)


def judge(
    row: Row,
    proposal: Proposal,
    logits: torch.Tensor,
    pipeline: LogitsPipeline,
    options: DecodeOptions,
    generator: torch.Generator | None,
) -> tuple[Verdict, torch.Tensor]:
    """The acceptance rule on the target's logits (k+1, vocab) after row.sequence: verdict, target_probs."""
    scores = pipeline.scores_at(row.sequence, proposal.tokens, logits)
    draft_tokens = torch.tensor(proposal.tokens, dtype=torch.long, device=scores.device)
    if options.sampling:
        target_probs = pipeline.probs(scores)
        draft_probs = proposal.draft_probs if proposal.draft_probs is not None else target_probs[:0]
        return speculative_sample(draft_tokens, draft_probs, target_probs, generator), target_probs
    return greedy_accept(draft_tokens, scores), torch.softmax(scores.float(), dim=-1)


def accept_tokens(
    row: Row,
    proposal: Proposal,
    verdict: Verdict,
    target_probs: torch.Tensor,
    eos_token_id: int,
    window: int,
    step: int,
) -> None:
    """Append the kept draft tokens and the target's token to the row, labelled; stop after end-of-text."""
    num_draft_tokens = len(proposal.tokens)
    new_tokens = proposal.tokens[: verdict.n_accepted] + [verdict.next_token]
    if not num_draft_tokens:
        last_label = TARGET
    else:
        last_label = BONUS if verdict.n_accepted == num_draft_tokens else CORRECTED
    labels = [ACCEPTED] * verdict.n_accepted + [last_label]
    if eos_token_id in new_tokens:
        new_tokens = new_tokens[: new_tokens.index(eos_token_id) + 1]
        row.finished = True
    for position, (token, label) in enumerate(zip(new_tokens, labels, strict=False)):
        has_draft = position < num_draft_tokens and proposal.draft_probs is not None
        row.tokens.append(
            TokenRecord(
                token_id=token,
                label=label,
                step=step,
                window=window,
                target_prob=float(target_probs[position, token]),
                draft_prob=float(proposal.draft_probs[position, token]) if has_draft else None,
                kept=token != eos_token_id,
            )
        )
    row.sequence.extend(new_tokens)


def adapt_draft_length(row: Row, used: int, n_accepted: int, options: DecodeOptions) -> None:
    """Grow k after a fully accepted draft of full length, shrink it after a rejection; bounded.

    A draft already at the minimum length and rejected outright pauses drafting for 1, 2, 4, ...
    MAX_PAUSE target-only passes; any accepted token ends the pauses. A useless draft then costs about
    one draft step per MAX_PAUSE passes instead of one per pass; a useful one pauses rarely and briefly.
    """
    if row.paused:
        row.paused -= 1  # this was a target-only pass
        return
    if not used:
        return
    current = row.num_draft_tokens
    if n_accepted == used and used == current:
        row.num_draft_tokens = min(current + 1, options.max_draft_tokens)
    elif n_accepted < used:
        row.num_draft_tokens = max(current - 1, options.min_draft_tokens)
    if n_accepted == 0 and current == options.min_draft_tokens:
        row.backoff = min(2 * row.backoff or 1, MAX_PAUSE)
        row.paused = row.backoff
    elif n_accepted > 0:
        row.backoff = 0
