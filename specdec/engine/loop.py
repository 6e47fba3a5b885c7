"""The speculative decoding loop, over a batch of rows (one clip's window is a batch of one).

Each step, for every row still decoding:

  propose:   the drafter proposes up to each row's draft length (`draft_length`), in target ids ->
  verify:    one target pass over each row's pending tokens and its proposal, and on the device what
             the host needs of it: a greedy row's acceptance, the probabilities its records hold (on a
             window's first pass, the target's no-speech probability at <|startoftranscript|>) ->
  accept:    one read of every row's numbers (`host.read`, the pass's one wait for a GPU); the rule keeps
             a prefix and supplies one token (greedy, or rejection sampling, drawn row by row) ->
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
from dataclasses import dataclass

import torch

from specdec.engine import cancel, host
from specdec.engine.acceptance import Verdict, greedy_check, relaxed_accept, speculative_sample
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
        checks = [
            verify(row, proposal, row_logits, length)
            for row, proposal, row_logits, length in zip(active, proposals, logits, fed, strict=True)
        ]
        readings = host.read([check.values() for check in checks])  # the pass's one wait for the device
        verdicts = [
            accept(row, proposal, check, reading)
            for row, proposal, check, reading in zip(active, proposals, checks, readings, strict=True)
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


@dataclass(frozen=True)
class Check:
    """One row's verify pass as the device computed it, for the pass's one read (`host.read`).

    tokens[i] is the token the row takes at position i if it keeps i + 1 tokens: for a greedy row the
    target's argmax (a kept draft token is the argmax there), for a sampled or relaxed row the verdict's
    tokens, drawn before the read. The other tensors are those tokens' numbers for the records."""

    verdict: Verdict | None  # drawn already (sampling, relaxed); None: greedy, from n_accepted once read
    n_accepted: torch.Tensor  # (1,) greedy; (0,) when the verdict is drawn
    tokens: torch.Tensor  # (m,) target ids
    target_probs: torch.Tensor  # (m,): the target's probability of tokens[i] at position i
    draft_probs: torch.Tensor  # (min(m, k),): the draft's; (0,) without the draft's distributions
    logprobs: torch.Tensor  # (m,): for the no-speech rule (generate()'s log-probabilities); (0,) without
    no_speech_prob: torch.Tensor  # (1,): on a window's first pass under the rule; else (0,)

    def values(self) -> list[torch.Tensor]:
        return [
            self.n_accepted, self.tokens, self.target_probs, self.draft_probs, self.logprobs,
            self.no_speech_prob,
        ]  # fmt: skip


def verify(row: Row, proposal: Proposal, logits: torch.Tensor, fed: int) -> Check:
    """The acceptance rule on the target's logits (len(feed), vocab) for the row's feed, which began at
    position `fed` and ends with the proposal; what the row's records need, left on the device."""
    num_proposed = len(proposal.tokens)
    scores = row.pipeline.scores_at(row.sequence, proposal.tokens, logits[-(num_proposed + 1) :])
    draft_tokens = host.send(proposal.tokens, scores.device)
    nothing = draft_tokens.new_empty(0)
    verdict = None
    if row.pipeline.sampling or row.options.acceptance_threshold is not None:
        verdict, target_probs = draw(row, proposal, draft_tokens, scores)
        kept = proposal.tokens[: verdict.n_accepted] + [verdict.next_token]
        tokens, n_accepted = host.send(kept, scores.device), nothing
    else:  # exact greedy: decided on the device
        tokens, n_accepted = greedy_check(draft_tokens, scores)
        n_accepted, target_probs = n_accepted[None], torch.softmax(scores.float(), dim=-1)
    draft_probs, rule = proposal.draft_probs, row.no_speech
    logprobs = rule.logprobs_of(scores[: len(tokens)], tokens, row.pipeline) if rule is not None else nothing
    return Check(
        verdict,
        n_accepted,
        tokens,
        target_probs=_at(target_probs, tokens),
        draft_probs=_at(draft_probs, tokens[:num_proposed]) if draft_probs is not None else nothing,
        logprobs=logprobs,
        no_speech_prob=measure_no_speech(row, logits, fed) if rule is not None and not row.steps else nothing,
    )


def measure_no_speech(row: Row, logits: torch.Tensor, fed: int) -> torch.Tensor:
    """On a window's first pass: the target's (never the draft's) no-speech probability, (1,), from its
    logits (len(feed), vocab) at <|startoftranscript|>; the feed began at position `fed`."""
    return row.no_speech.no_speech_prob(logits[row.no_speech.sot_index - fed])


def draw(
    row: Row, proposal: Proposal, draft_tokens: torch.Tensor, scores: torch.Tensor
) -> tuple[Verdict, torch.Tensor]:
    """A sampled row's verdict (rejection sampling with its own generator, as it draws alone) or a relaxed
    row's (lossy, opt-in), each read on the host; and the target's probabilities (n, vocab) at its
    positions, for the records."""
    if row.pipeline.sampling:  # the row's own temperature (a fallback's may differ from the clip's first)
        target_probs = row.pipeline.probs(scores)
        draft_probs = proposal.draft_probs if proposal.draft_probs is not None else target_probs[:0]
        return speculative_sample(draft_tokens, draft_probs, target_probs, row.generator), target_probs
    verdict = relaxed_accept(draft_tokens, scores, row.options.acceptance_threshold)
    return verdict, torch.softmax(scores[: verdict.n_accepted + 1].float(), dim=-1)  # the rows recorded


def _at(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """probs[i, tokens[i]] for each position i: (len(tokens),)."""
    return probs[: len(tokens)].gather(1, tokens[:, None])[:, 0]


def accept(row: Row, proposal: Proposal, check: Check, reading: list[list[float]]) -> Verdict:
    """The row's verdict from its check, read: the row gets the kept proposal tokens and the target's own
    token, labelled (and, for the no-speech rule, each one's log-probability under the target)."""
    n_accepted, tokens, target_probs, draft_probs, logprobs, no_speech_prob = reading
    if (verdict := check.verdict) is None:  # greedy: the target's own token after the kept ones
        n = int(n_accepted[0])
        verdict = Verdict(n, int(tokens[n]))
    if no_speech_prob:
        row.no_speech_prob = no_speech_prob[0]
    before = len(row.sequence)
    accept_tokens(row, proposal, verdict, target_probs, draft_probs)
    if row.no_speech is not None:
        row.token_logprobs += logprobs[: len(row.sequence) - before]
    return verdict


def accept_tokens(
    row: Row, proposal: Proposal, verdict: Verdict, target_probs: list[float], draft_probs: list[float]
) -> None:
    """Append the kept proposal tokens and the target's token to the row, labelled; stop at end-of-text.
    target_probs[i], draft_probs[i]: the target's and the draft's probability of the token at position i."""
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
                target_prob=target_probs[position],
                draft_prob=draft_probs[position] if has_draft else None,
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
