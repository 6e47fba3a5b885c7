"""Cost-aware draft length for batched decoding: each step's k from measured pass costs and acceptance.

Drafting pays when a verify pass over k + 1 tokens per row costs about what a one-token pass costs
(memory-bound: the weights are read once either way). A CPU turns compute-bound as the batch grows: on a
2-core host a large-v3 verify of 8 rows x 6 tokens costs about 2.7 one-token passes of the same 8 rows,
and k = 5 decodes slower than the target alone. So each step the batch drafts the k (0 to
`max_draft_tokens`, the same for every row, capped by each row's budget) that maximises expected tokens
per second (Leviathan et al. 2023, section 3.3, with the batch's measured costs):

  expected tokens of row b:  1 + alpha_b + ... + alpha_b^k    (alpha_b: row b's acceptance so far)
  step seconds:              k * draft_pass + verify(tokens fed, all rows)

verify(n) = intercept + slope * n is a least-squares line through this batch's measured verify passes
(n: tokens fed to the target in the pass); draft_pass is the mean measured seconds of one batched draft
pass. k = 0 (the target alone) is always a candidate. To give the line two far-apart points, step 1 feeds
no draft (n = rows) and step 2 drafts `num_draft_tokens`; step 0 (the prompt, plus every row's
cross-attention keys and values) is not measured. The choice depends on timings, so with sampling the
tokens are still distributed exactly as the target's, but a seed no longer fixes them.

Any k keeps greedy output identical to the target alone, so this changes speed only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

PRIOR_ACCEPTED, PRIOR_JUDGED = 1, 2  # acceptance before any evidence: 1/2 (Laplace's rule)


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
    """Chooses each batched step's draft length; `observe` after every step with what it measured."""

    def __init__(self, num_rows: int, num_draft_tokens: int, max_draft_tokens: int) -> None:
        self.rows = [RowAcceptance() for _ in range(num_rows)]
        self.costs = PassCosts()
        self.num_draft_tokens = num_draft_tokens  # the exploration steps' k
        self.max_draft_tokens = max_draft_tokens
        self.steps = 0

    def choose(self, pending: list[int], budgets: list[int]) -> list[int]:
        """Draft lengths per row: pending[b] tokens row b feeds besides drafts; budgets[b] its most drafts."""
        k = self._batch_length(pending, budgets)
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

    def observe(
        self,
        tokens_fed: int,
        verify_seconds: float,
        draft_passes: int,
        draft_seconds: float,
        judged: list[tuple[int, int]],
    ) -> None:
        """One step's measurements; judged[b]: (tokens row b drafted, of them accepted)."""
        if self.steps > 0:  # step 0 also computes every row's cross-attention keys and values
            self.costs.observe(tokens_fed, verify_seconds, draft_passes, draft_seconds)
        for row, (num_drafted, n_accepted) in zip(self.rows, judged, strict=True):
            if num_drafted:
                row.observe(num_drafted, n_accepted)
        self.steps += 1

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (indices into the current batch)."""
        self.rows = [self.rows[b] for b in rows]
