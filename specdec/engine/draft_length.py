"""How many tokens each row drafts at each step: one policy interface, three policies.

    choose(rows, pending) -> k per row     before a step (pending[b]: tokens row b feeds besides drafts)
    observe(facts)                         after it, with what it proposed, kept and cost
    add(rows)                              when rows join the batch
    keep(rows)                             when rows leave it

Each row drafts by its own options (`row.options`); the policy is the batch's.

- `FixedDraftLength`: k = options.num_draft_tokens.
- `AdaptiveDraftLength` (options.adaptive): each row's k grows after a fully accepted draft and shrinks
  after a rejection; a row whose draft keeps failing at the minimum pauses for 1, 2, 4, ... MAX_PAUSE
  target-only passes (any accepted token ends the pauses). A useless draft then costs about one draft
  step per MAX_PAUSE passes instead of one per pass; a useful one pauses rarely and briefly.
- `CostAwareDraftLength` (options.cost_aware): the batch's k maximises expected tokens per second from
  measured pass costs and each row's acceptance (below).
- `LoadAwareDraftLength` (the shared batch of many requests, `specdec.scheduler`): adaptive per row, capped
  by the cost-aware k while more than one row decodes.

Every k keeps the output exactly the target's; these change speed only (and, with sampling, the cost-aware
choice depends on timings, so a seed no longer fixes the tokens).

Cost-aware: drafting pays when a verify pass over k + 1 tokens per row costs about what a one-token pass
costs (memory-bound: the weights are read once either way). A CPU turns compute-bound as the batch grows:
on a 2-core host a large-v3 verify of 8 rows x 6 tokens costs about 2.7 one-token passes of the same 8
rows, and k = 5 decodes slower than the target alone. So each step the batch drafts the k (0 to
`max_draft_tokens`, the same for every row, capped by each row's budget) that maximises expected tokens
per second (Leviathan et al. 2023, section 3.3, with the batch's measured costs):

  expected tokens of row b:  1 + alpha_b + ... + alpha_b^k    (alpha_b: row b's acceptance so far)
  step seconds:              k * draft_pass + verify(tokens fed, all rows)

verify(n) = intercept + slope * n is a least-squares line through this batch's measured verify passes
(n: tokens fed to the target in the pass); draft_pass is the mean measured seconds of one batched draft
pass. k = 0 (the target alone) is always a candidate. To give the line two far-apart points, step 1 feeds
no draft (n = rows) and step 2 drafts `num_draft_tokens`; step 0 (the prompt, plus every row's
cross-attention keys and values) is not measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specdec.engine.state import Row
from specdec.options import DecodeOptions

PRIOR_ACCEPTED, PRIOR_JUDGED = 1, 2  # acceptance before any evidence: 1/2 (Laplace's rule)
MAX_PAUSE = 16  # adaptive: the longest run of target-only passes after the draft keeps failing


@dataclass(frozen=True)
class StepFacts:
    """What one step of the batch proposed, kept and cost, for a policy to learn from."""

    num_drafted: list[int]  # per row: tokens proposed
    n_accepted: list[int]  # per row: of them accepted
    tokens_fed: int  # to the target, every row together
    verify_seconds: float
    draft_passes: int  # batched draft-model passes (one per drafted position)
    draft_seconds: float


class DraftLength(Protocol):
    def choose(self, rows: Sequence[Row], pending: Sequence[int]) -> list[int]: ...

    def observe(self, facts: StepFacts) -> None: ...

    def add(self, rows: Sequence[Row]) -> None: ...

    def keep(self, rows: Sequence[int]) -> None: ...


def draft_length(options: DecodeOptions) -> DraftLength:
    """The policy the options ask for, for a batch with no rows yet: cost-aware, else adaptive, else fixed."""
    if options.cost_aware:
        return CostAwareDraftLength(options.num_draft_tokens, options.max_draft_tokens)
    if options.adaptive:
        return AdaptiveDraftLength()
    return FixedDraftLength()


def within_budget(lengths: Sequence[int], rows: Sequence[Row]) -> list[int]:
    """Each row's k, at most its budget less one (the last token of a window is the target's own)."""
    return [max(0, min(k, row.budget - 1)) for k, row in zip(lengths, rows, strict=True)]


class FixedDraftLength:
    def choose(self, rows: Sequence[Row], pending: Sequence[int]) -> list[int]:
        return within_budget([row.options.num_draft_tokens for row in rows], rows)

    def observe(self, facts: StepFacts) -> None:
        pass

    def add(self, rows: Sequence[Row]) -> None:
        pass

    def keep(self, rows: Sequence[int]) -> None:
        pass


class AdaptiveDraftLength:
    """Per row: k within [min_draft_tokens, max_draft_tokens], and pauses after repeated failure; a row
    whose options ask for a fixed k (adaptive=False) keeps it."""

    def __init__(self) -> None:
        self.options: list[DecodeOptions] = []  # each row's
        self.lengths: list[int] = []  # current k of each row
        self.paused: list[int] = []  # target-only passes left before the draft is tried again
        self.backoff: list[int] = []  # length of each row's last pause (doubles while the draft fails)

    def choose(self, rows: Sequence[Row], pending: Sequence[int]) -> list[int]:
        lengths = [0 if paused else k for k, paused in zip(self.lengths, self.paused, strict=True)]
        return within_budget(lengths, rows)

    def observe(self, facts: StepFacts) -> None:
        for b, (used, n_accepted) in enumerate(zip(facts.num_drafted, facts.n_accepted, strict=True)):
            self._adapt(b, used, n_accepted)

    def _adapt(self, b: int, used: int, n_accepted: int) -> None:
        """Grow k after a fully accepted draft of full length, shrink it after a rejection; bounded. A draft
        already at the minimum and rejected outright pauses drafting for 1, 2, 4, ... MAX_PAUSE passes."""
        if self.paused[b]:
            self.paused[b] -= 1  # this was a target-only pass
            return
        current, options = self.lengths[b], self.options[b]
        if not used or not options.adaptive:
            return
        if n_accepted == used and used == current:
            self.lengths[b] = min(current + 1, options.max_draft_tokens)
        elif n_accepted < used:
            self.lengths[b] = max(current - 1, options.min_draft_tokens)
        if n_accepted == 0 and current == options.min_draft_tokens:
            self.backoff[b] = min(2 * self.backoff[b] or 1, MAX_PAUSE)
            self.paused[b] = self.backoff[b]
        elif n_accepted > 0:
            self.backoff[b] = 0

    def add(self, rows: Sequence[Row]) -> None:
        self.options += [row.options for row in rows]
        self.lengths += [row.options.num_draft_tokens for row in rows]
        self.paused += [0] * len(rows)
        self.backoff += [0] * len(rows)

    def keep(self, rows: Sequence[int]) -> None:
        self.options = [self.options[b] for b in rows]
        self.lengths = [self.lengths[b] for b in rows]
        self.paused = [self.paused[b] for b in rows]
        self.backoff = [self.backoff[b] for b in rows]


@dataclass
class RowAcceptance:
    """Draft tokens the target judged for one row, and how many it accepted."""

    accepted: int = PRIOR_ACCEPTED
    judged: int = PRIOR_JUDGED

    @property
    def alpha(self) -> float:
        return self.accepted / self.judged

    def observe(self, num_drafted: int, n_accepted: int) -> None:
        self.accepted += n_accepted
        self.judged += n_accepted + (n_accepted < num_drafted)  # positions past a rejection are not judged


def expected_tokens(alpha: float, num_draft_tokens: int) -> float:
    """Tokens one verify pass yields when each draft token is accepted with probability alpha."""
    return sum(alpha**j for j in range(num_draft_tokens + 1))


@dataclass
class PassCosts:
    """Measured seconds of this batch's verify passes (by tokens fed) and of its draft passes."""

    verify_points: list[tuple[int, float]] = field(default_factory=list)  # (tokens fed, seconds)
    draft_seconds: float = 0.0
    draft_passes: int = 0

    def observe(
        self, tokens_fed: int, verify_seconds: float, draft_passes: int, draft_seconds: float
    ) -> None:
        self.verify_points.append((tokens_fed, verify_seconds))
        self.draft_passes += draft_passes
        self.draft_seconds += draft_seconds

    def verify_line(self) -> tuple[float, float] | None:
        """(intercept, slope) of verify seconds against tokens fed; None until two distinct n are seen."""
        if len({n for n, _ in self.verify_points}) < 2:
            return None
        fed = torch.tensor([[1.0, n] for n, _ in self.verify_points], dtype=torch.float64)
        seconds = torch.tensor([[s] for _, s in self.verify_points], dtype=torch.float64)
        intercept, slope = torch.linalg.lstsq(fed, seconds).solution.flatten().tolist()
        return max(intercept, 0.0), max(slope, 0.0)

    @property
    def draft_pass_seconds(self) -> float | None:
        return self.draft_seconds / self.draft_passes if self.draft_passes else None


class CostAwareDraftLength:
    """Chooses each batched step's draft length from the batch's measured costs and rows' acceptance."""

    def __init__(self, num_draft_tokens: int, max_draft_tokens: int) -> None:
        self.rows: list[RowAcceptance] = []
        self.costs = PassCosts()
        self.num_draft_tokens = num_draft_tokens  # the exploration steps' k
        self.max_draft_tokens = max_draft_tokens
        self.steps = 0

    def choose(self, rows: Sequence[Row], pending: Sequence[int]) -> list[int]:
        budgets = within_budget([self.max_draft_tokens] * len(rows), rows)
        k = self._batch_length(list(pending), budgets)
        return [min(k, budget) for budget in budgets]

    def _batch_length(self, pending: list[int], budgets: list[int]) -> int:
        if self.steps == 1:
            return 0  # the line's one-token-per-row point
        line, draft_pass = self.costs.verify_line(), self.costs.draft_pass_seconds
        if line is None or draft_pass is None:
            return self.num_draft_tokens
        intercept, slope = line

        def tokens_per_second(k: int) -> float:
            lengths = [min(k, budget) for budget in budgets]
            tokens = sum(expected_tokens(r.alpha, n) for r, n in zip(self.rows, lengths, strict=True))
            fed = sum(pending) + sum(lengths)
            return tokens / (max(lengths, default=0) * draft_pass + intercept + slope * fed)

        return max(range(self.max_draft_tokens + 1), key=tokens_per_second)

    def observe(self, facts: StepFacts) -> None:
        if self.steps > 0:  # step 0 also computes every row's cross-attention keys and values
            self.costs.observe(
                facts.tokens_fed, facts.verify_seconds, facts.draft_passes, facts.draft_seconds
            )
        for row, num_drafted, n_accepted in zip(self.rows, facts.num_drafted, facts.n_accepted, strict=True):
            if num_drafted:
                row.observe(num_drafted, n_accepted)
        self.steps += 1

    def add(self, rows: Sequence[Row]) -> None:
        self.rows += [RowAcceptance() for _ in rows]

    def keep(self, rows: Sequence[int]) -> None:
        self.rows = [self.rows[b] for b in rows]


class LoadAwareDraftLength:
    """Drafting by load (a shared batch of requests): each row's adaptive k (`AdaptiveDraftLength`, as it
    drafts alone), capped, while more than one row decodes, at the k the batch's measured costs find best
    (`CostAwareDraftLength`): as the batch fills and its verify pass turns compute-bound, rows draft
    fewer tokens, or none. A row whose options fix k (adaptive=False) drafts that k, as it asked."""

    def __init__(self, options: DecodeOptions | None = None) -> None:
        """options: the cost-aware cap's exploration k and largest k (default: DecodeOptions' defaults)."""
        options = options or DecodeOptions()
        self.adaptive = AdaptiveDraftLength()
        self.cost_aware = CostAwareDraftLength(options.num_draft_tokens, options.max_draft_tokens)

    def choose(self, rows: Sequence[Row], pending: Sequence[int]) -> list[int]:
        lengths = self.adaptive.choose(rows, pending)
        if len(rows) > 1:
            caps = self.cost_aware.choose(rows, pending)
            lengths = [
                min(k, cap) if row.options.adaptive else k
                for k, cap, row in zip(lengths, caps, rows, strict=True)
            ]
        return lengths

    def observe(self, facts: StepFacts) -> None:
        self.adaptive.observe(facts)
        self.cost_aware.observe(facts)

    def add(self, rows: Sequence[Row]) -> None:
        self.adaptive.add(rows)
        self.cost_aware.add(rows)

    def keep(self, rows: Sequence[int]) -> None:
        self.adaptive.keep(rows)
        self.cost_aware.keep(rows)
