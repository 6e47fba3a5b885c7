"""The speculative decoding loop, over a batch of rows (one clip's window is a batch of one).

Each step, for every row still decoding:

  propose:   the drafter proposes up to each row's draft length (`draft_length`), in target ids ->
  verify:    one target pass over each row's pending tokens and its proposal (on a window's first pass,
             the target's no-speech probability at <|startoftranscript|>, when asked for) ->
  accept:    the acceptance rule keeps a prefix and supplies one token (greedy, or rejection sampling) ->
  roll back: each row's target cache to its own length (a draft model's follows at its next proposal) ->
  record:    one Step per row, each naming the one Pass that holds the step's seconds ->
  stop:      rows that reached end-of-text or their budget leave the batch and cost nothing more.

Rows may join between steps (`Batch.add`): the windows of other clips, or a clip's next window, each
with its own options (a row drafts only if `row.drafts`).

No row is held to the batch's minimum: each accepts its own number of tokens (the cache keeps each row
at its own length). Target-only decoding is this loop without a drafter, so both are timed by the same
code. Greedy output of every row is token for token what decoding its clip alone gives, and what
`generate()` gives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from specdec.engine import cancel
from specdec.engine.acceptance import Verdict, greedy_accept, relaxed_accept, speculative_sample
from specdec.engine.cache import CachedDecoder
from specdec.engine.draft_length import DraftLength, StepFacts
from specdec.engine.drafters import NOTHING, Drafter, Proposal
from specdec.engine.state import Clock, Row
from specdec.trace import (
    ACCEPTED,
    BONUS,
    CORRECTED,
    DRAFT_MODEL,
    KEPT_DRAFT,
    RELAXED,
    TARGET,
    Pass,
    Step,
    TokenRecord,
)


class Batch:
    """Rows decoding together, one target pass per step over all of them: rows join between steps (`add`)
    and leave when finished. row b of `rows` is row b of the target's, the drafter's and the policy's batch.
    """

    def __init__(
        self, target: CachedDecoder, drafter: Drafter | None, policy: DraftLength | None, clock: Clock
    ) -> None:
        """target (and drafter) hold no rows yet or exactly the rows that `add` is called with next."""
        self.target = target
        self.drafter = drafter
        self.policy = policy  # how many tokens each row drafts (None: none)
        self.clock = clock
        self.rows: list[Row] = []

    def add(self, rows: list[Row]) -> None:
        """Rows whose encoder states the target's (and drafter's) caches have just been given."""
        self.rows += rows
        if self.policy is not None:
            self.policy.add(rows)

    def step(self) -> list[Row]:
        """One pass for every row; returns the rows that finished (they have left the batch)."""
        cancel.check()  # a cancelled decoding stops here, before its next target pass
        active, target, drafter = self.rows, self.target, self.drafter
        start = time.perf_counter()
        pending = [len(row.sequence) - length for row, length in zip(active, target.lengths, strict=True)]
        num_draft_tokens = [0] * len(active)
        if self.policy is not None:
            chosen = self.policy.choose(active, pending)
            num_draft_tokens = [k if row.drafts else 0 for k, row in zip(chosen, active, strict=True)]
        proposals = propose(drafter, active, num_draft_tokens)
        verify_start = time.perf_counter()
        draft_seconds = verify_start - start if drafter is not None else 0.0
        fed = list(target.lengths)  # each row's cached length before this pass
        feeds = [
            row.sequence[length:] + proposal.tokens
            for row, proposal, length in zip(active, proposals, fed, strict=True)
        ]
        logits = target.feed(feeds)  # per row (len(feed), vocab)
        for row, row_logits, length in zip(active, logits, fed, strict=True):
            measure_no_speech(row, row_logits, length)
        verdicts = [
            verify(row, proposal, row_logits[-(len(proposal.tokens) + 1) :])
            for row, proposal, row_logits in zip(active, proposals, logits, strict=True)
        ]
        target.rollback([len(row.sequence) - 1 for row in active])  # the newest token is fed next step
        done = time.perf_counter()
        step_pass = self.clock.new_pass(len(active), start, draft_seconds, done - verify_start)
        for row, proposal, verdict in zip(active, proposals, verdicts, strict=True):
            record(row, proposal, verdict, step_pass)
        if self.policy is not None:
            self.policy.observe(_facts(proposals, verdicts, feeds, step_pass))
        return self._drop_finished()

    def _drop_finished(self) -> list[Row]:
        """The finished rows leave the target's, the drafter's and the policy's batch."""
        unfinished = [b for b, row in enumerate(self.rows) if not row.finished]
        finished = [row for row in self.rows if row.finished]
        if finished:
            for part in (self.target, self.drafter, self.policy):
                if part is not None:
                    part.keep(unfinished)
            self.rows = [self.rows[b] for b in unfinished]
        return finished


def propose(drafter: Drafter | None, rows: Sequence[Row], num_draft_tokens: list[int]) -> list[Proposal]:
    """Every row's proposal; nothing without a drafter, or when no row may draft from a costly one."""
    if drafter is None or not (drafter.free or any(num_draft_tokens)):
        return [NOTHING] * len(rows)
    return drafter.propose(rows, num_draft_tokens)


def measure_no_speech(row: Row, logits: torch.Tensor, fed: int) -> None:
    """On a window's first pass: the target's (never the draft's) no-speech probability, from its logits
    (len(feed), vocab) at <|startoftranscript|>; the feed began at position `fed`."""
    rule = row.no_speech
    if rule is not None and not row.steps:
        row.no_speech_prob = rule.no_speech_prob(logits[rule.sot_index - fed])


def verify(row: Row, proposal: Proposal, logits: torch.Tensor) -> Verdict:
    """The acceptance rule on the target's logits (k+1, vocab) after the row's sequence; the row gets the
    kept proposal tokens and the target's own token, labelled (and, for the no-speech rule, each one's
    log-probability under the target)."""
    scores = row.pipeline.scores_at(row.sequence, proposal.tokens, logits)
    draft_tokens = torch.tensor(proposal.tokens, dtype=torch.long, device=scores.device)
    if row.pipeline.sampling:  # the row's own temperature (a fallback's may differ from the clip's first)
        target_probs = row.pipeline.probs(scores)
        draft_probs = proposal.draft_probs if proposal.draft_probs is not None else target_probs[:0]
        verdict = speculative_sample(draft_tokens, draft_probs, target_probs, row.generator)
    else:
        threshold = row.options.acceptance_threshold  # None: exact; else lossy, opt-in
        verdict = (
            greedy_accept(draft_tokens, scores)
            if threshold is None
            else relaxed_accept(draft_tokens, scores, threshold)
        )
        target_probs = torch.softmax(scores[: verdict.n_accepted + 1].float(), dim=-1)  # the rows recorded
    before = len(row.sequence)
    accept_tokens(row, proposal, verdict, target_probs)
    if row.no_speech is not None:
        new_tokens = row.sequence[before:]
        kept_scores = scores[: len(new_tokens)]
        row.token_logprobs += row.no_speech.token_logprobs(kept_scores, new_tokens, row.pipeline)
    return verdict


def accept_tokens(row: Row, proposal: Proposal, verdict: Verdict, target_probs: torch.Tensor) -> None:
    """Append the kept proposal tokens and the target's token to the row, labelled; stop at end-of-text."""
    num_proposed = len(proposal.tokens)
    new_tokens = proposal.tokens[: verdict.n_accepted] + [verdict.next_token]
    last_label = TARGET if not num_proposed else BONUS if verdict.n_accepted == num_proposed else CORRECTED
    kept = [RELAXED if i in verdict.relaxed else ACCEPTED for i in range(verdict.n_accepted)]
    labels = kept + [last_label]
    eos = row.pipeline.eos_token_id
    if eos in new_tokens:
        new_tokens = new_tokens[: new_tokens.index(eos) + 1]
        row.finished = True
    for position, (token, label) in enumerate(zip(new_tokens, labels, strict=False)):
        has_draft = position < num_proposed and proposal.draft_probs is not None
        row.tokens.append(
            TokenRecord(
                token_id=token,
                label=label,
                step=row.next_step,
                window=row.window,
                target_prob=float(target_probs[position, token]),
                draft_prob=float(proposal.draft_probs[position, token]) if has_draft else None,
                kept=token != eos,
            )
        )
    row.sequence.extend(new_tokens)


def record(row: Row, proposal: Proposal, verdict: Verdict, step_pass: Pass) -> None:
    """The row's Step for this pass, and the pass among those the row took part in."""
    row.steps.append(
        Step(
            index=row.next_step,
            window=row.window,
            pass_index=step_pass.index,
            source=proposal.source,
            drafted=tuple(proposal.tokens),
            n_accepted=verdict.n_accepted,
            target_token=row.tokens[-1].token_id if row.tokens[-1].label not in KEPT_DRAFT else None,
        )
    )
    row.passes.append(step_pass)
    row.finished = row.finished or row.budget <= 0


def _facts(
    proposals: list[Proposal], verdicts: list[Verdict], feeds: list[list[int]], step_pass: Pass
) -> StepFacts:
    drafted = [len(p.tokens) if p.source == DRAFT_MODEL else 0 for p in proposals]
    return StepFacts(
        num_drafted=[len(p.tokens) for p in proposals],
        n_accepted=[v.n_accepted for v in verdicts],
        tokens_fed=sum(len(feed) for feed in feeds),
        verify_seconds=step_pass.verify_seconds,
        draft_passes=max(drafted, default=0),  # one batched draft-model pass per drafted position
        draft_seconds=step_pass.draft_seconds,
    )
