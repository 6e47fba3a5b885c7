"""Controlled acceptance, for benchmarks only: the real draft model runs, its choices follow a plan.

Random-weight models agree with each other arbitrarily (almost never), so the speedup-vs-α curve is
measured by planting the agreement. A forward hook on the draft model rewrites its logits after the real
forward pass (whose cost is paid in full): at generated position i the draft's greedy choice becomes the
target's own greedy token there (known from a target-only run beforehand) when `plan.agree[i]`, and
another plausible token when not. `agree` is Bernoulli(α) per position from a seeded generator, so every
engine and every k sees the same agreement pattern, and each position is examined by the target at most
once: the measured per-token acceptance estimates α directly.

The decoding engine (ours, or transformers' assisted generation) only ever sees a draft model; it does
not know. Its output must still be the target's, which the benchmark and `tests/test_bench.py` check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from specdec.models import ModelPair
    from specdec.trace import DecodeResult
    from specdec.vocabulary import VocabularyMap

BOOST = 100.0  # logit margin of the planned token: draft probability ~1, above any confidence threshold


@dataclass(frozen=True)
class AcceptancePlan:
    """Which draft proposals agree with the target, per window and generated position in it."""

    target_tokens: tuple[tuple[int, ...], ...]  # per window: the target's greedy tokens, end-of-text included
    agree: tuple[tuple[bool, ...], ...]  # same shape: propose the target's token (True) or another one
    alpha: float  # the requested agreement rate the plan was drawn with

    @property
    def planned_rate(self) -> float:
        flat = [agree for window in self.agree for agree in window]
        return sum(flat) / len(flat) if flat else 0.0


def make_plan(target_tokens: Sequence[Sequence[int]], alpha: float, seed: int = 0) -> AcceptancePlan:
    """A plan over windows of target tokens, agreeing with probability alpha at each position.

    Deterministic given the seed; target_tokens: per decoding window, the target-only run's tokens.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    generator = torch.Generator().manual_seed(seed)
    agree = []
    for window in target_tokens:
        uniforms = torch.rand(len(window), generator=generator, dtype=torch.float64)
        agree.append(tuple(bool(u < alpha) for u in uniforms))
    return AcceptancePlan(tuple(tuple(window) for window in target_tokens), tuple(agree), alpha)


def judged(result: DecodeResult) -> list[tuple[int, int, bool]]:
    """(window, generated position, accepted) of every draft token the target judged, in order: what a
    plan's `agree` must match position by position when the draft followed it."""
    found, window, position = [], 0, 0
    for step in result.steps:
        if step.window != window:
            window, position = step.window, 0
        found += [(window, position + i, True) for i in range(step.n_accepted)]
        if step.n_accepted < len(step.drafted):
            found.append((window, position + step.n_accepted, False))
        position += step.n_accepted + 1
    return found


def plan_from(result: DecodeResult, alpha: float, seed: int = 0) -> AcceptancePlan:
    """A plan for decoding the same clip again, from the target-only run's trace."""
    num_windows = max((token.window for token in result.tokens), default=-1) + 1
    windows = [[t.token_id for t in result.tokens if t.window == w] for w in range(num_windows)]
    return make_plan(windows, alpha, seed)


class ControlledDraft:
    """A forward hook that makes `model`'s greedy choices follow a plan; `with` it while decoding.

    prompt_length: decoder prompt tokens before the first generated position. vocabulary: maps target
    ids to the draft's (None: same vocabulary). avoid: ids never proposed as a wrong token (suppressed
    tokens, end-of-text: a suppressed proposal would fall back to the draft's next choice, which could
    be the target's). Only ids below `text_tokens` (identical in every Whisper vocabulary) are wrong tokens.
    """

    def __init__(
        self,
        model: nn.Module,
        prompt_length: int,
        text_tokens: int,
        avoid: Iterable[int] = (),
        vocabulary: VocabularyMap | None = None,
    ) -> None:
        self.model = model
        self.prompt_length = prompt_length
        self.text_tokens = text_tokens
        self.avoid = sorted({i for i in avoid if 0 <= i < text_tokens})
        self.vocabulary = vocabulary
        self.plan: AcceptancePlan | None = None
        self._draft_tokens: list[list[int]] = []  # the plan's tokens in draft ids, per window
        self._window = -1  # counts fresh caches: each decoding window starts the draft on an empty one
        self._handle = None

    def set_plan(self, plan: AcceptancePlan | None) -> None:
        """The plan for the next decoding (None: the draft's own choices)."""
        self.plan = plan
        windows = [list(tokens) for tokens in plan.target_tokens] if plan else []
        vocabulary = self.vocabulary
        self._draft_tokens = [vocabulary.to_draft(w) if vocabulary else w for w in windows]
        self._window = -1

    def __enter__(self) -> ControlledDraft:
        self._handle = self.model.register_forward_hook(self._rewrite, with_kwargs=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._handle.remove()
        self._handle = None

    def _rewrite(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """Overwrite the planned rows of output.logits (1, n, draft vocab) in place."""
        if self.plan is None:
            return
        logits = output.logits
        cache = getattr(output, "past_key_values", None) or kwargs.get("past_key_values")
        total = cache.get_seq_length() if cache is not None else logits.shape[1]
        cached_before = total - logits.shape[1]
        if cached_before == 0:
            self._window += 1
        if not 0 <= self._window < len(self._draft_tokens):
            return
        first = cached_before + 1 - self.prompt_length  # generated position that row 0 predicts
        for row in range(logits.shape[1]):
            if 0 <= first + row < len(self._draft_tokens[self._window]):
                self._set_choice(logits[0, row], self._window, first + row)

    def _set_choice(self, row_logits: torch.Tensor, window: int, position: int) -> None:
        """Make the planned token (or, where the plan disagrees, the draft's best other text token) win."""
        planned = self._draft_tokens[window][position]
        if self.plan.agree[window][position]:
            choice = planned
        else:
            candidates = row_logits[: self.text_tokens].clone()
            candidates[self.avoid] = float("-inf")
            if planned < self.text_tokens:
                candidates[planned] = float("-inf")
            choice = int(candidates.argmax())
        row_logits[choice] = row_logits.max() + BOOST


def controlled_draft(pair: ModelPair, prompt_length: int, model: nn.Module | None = None) -> ControlledDraft:
    """A ControlledDraft for a pair's draft (or another model standing for it, e.g. an assistant)."""
    config = pair.target.model.generation_config
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    avoid = [*(config.suppress_tokens or []), *(config.begin_suppress_tokens or [])]
    vocabulary = None if pair.vocabulary is None or pair.vocabulary.is_identity else pair.vocabulary
    return ControlledDraft(model or pair.draft.model, prompt_length, eos, avoid, vocabulary)
