"""The previous hypothesis as a free draft: live updates decode almost the same audio, so the last
update's output usually continues the current one, at the cost of a list lookup instead of a forward pass.

`HypothesisDrafter` proposes the previous hypothesis's continuation from the current position, up to
`max_tokens` at once (it costs no forward pass, so it is not held to the draft model's k); where that runs
out, or was rejected at the previous step, it asks the draft model (if any). A proposal from the
hypothesis is a point mass, so speculative sampling stays exact with a one-hot draft distribution.
"""

from __future__ import annotations

import time

import torch

from specdec.options import DecodeOptions
from specdec.speculative import Drafter, Proposal, Row

REUSED = "reused"  # proposed from the previous hypothesis
DRAFTED = "draft"  # proposed by the draft model
NONE = "none"  # nothing proposed: the target decodes this step alone
MATCH_LENGTH = 3  # generated tokens to look up in the hypothesis after the two diverged


class HypothesisDrafter:
    """Drafts from a previous hypothesis (target ids), falling back to a draft model.

    The hypothesis costs nothing, so it is still consulted while adaptive drafting pauses the draft model.
    """

    proposes_while_paused = True

    def __init__(
        self,
        hypothesis: list[int],
        fallback: Drafter | None,
        vocabulary_size: int,
        device: torch.device,
        max_tokens: int = 32,
    ) -> None:
        self.hypothesis = list(hypothesis)  # target ids after the forced prompt, ending with end-of-text
        self.fallback = fallback
        self.max_tokens = max_tokens  # longest proposal from the hypothesis (one verify pass checks it)
        self.vocabulary_size = vocabulary_size
        self.device = device
        self.sources: dict[int, str] = {}  # step index within the window -> where its proposal came from

    def propose(
        self,
        row: Row,
        num_draft_tokens: int,
        options: DecodeOptions,
        generator: torch.Generator | None,
        max_tokens: int | None = None,
    ) -> Proposal:
        """The hypothesis's next tokens (up to self.max_tokens within max_tokens, the window's budget) if
        it has any here and was not just rejected, else the draft's num_draft_tokens."""
        start = time.perf_counter()
        step = len(row.steps)
        continuation = [] if self._just_rejected(row) else self.continuation(row.generated)
        if continuation:
            limit = min(max(num_draft_tokens, self.max_tokens), max_tokens or num_draft_tokens)
            tokens = continuation[:limit]
            self.sources[step] = REUSED
            return Proposal(tokens, self._point_masses(tokens), time.perf_counter() - start)
        if self.fallback is None or row.paused:
            self.sources[step] = NONE
            return Proposal([], None, time.perf_counter() - start)
        self.sources[step] = DRAFTED
        return self.fallback.propose(row, num_draft_tokens, options, generator)

    def continuation(self, generated: list[int]) -> list[int]:
        """What the hypothesis says comes after `generated`: by position while the two agree, else after
        the last place the hypothesis holds the newest MATCH_LENGTH generated tokens."""
        position = len(generated)
        if self.hypothesis[:position] == generated:
            return self.hypothesis[position:]
        tail = generated[-MATCH_LENGTH:]
        if len(tail) < MATCH_LENGTH:
            return []
        for start in range(len(self.hypothesis) - MATCH_LENGTH, -1, -1):
            if self.hypothesis[start : start + MATCH_LENGTH] == tail:
                return self.hypothesis[start + MATCH_LENGTH :]
        return []

    def _just_rejected(self, row: Row) -> bool:
        if not row.steps:
            return False
        last = row.steps[-1]
        reused = self.sources.get(len(row.steps) - 1) == REUSED
        return reused and last.n_accepted < len(last.drafted)

    def _point_masses(self, tokens: list[int]) -> torch.Tensor:
        """(len(tokens), vocab) one-hot draft distributions, for speculative sampling."""
        probs = torch.zeros(len(tokens), self.vocabulary_size, device=self.device)
        probs[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return probs
