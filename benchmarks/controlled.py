"""Controlled acceptance: random-weight models almost never agree, so agreement is planted. An ordinary
drafter in front of the real draft model (its cost paid in full) proposes the target's own token where a
seeded plan agrees and another where not; for assisted generation, which takes no drafter, a hook rewrites
the assistant's logits."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from specdec.engine.drafters import Drafter, Proposal
from specdec.engine.state import Row
from specdec.engine.windows import MakeDrafter
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.models import ModelPair

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
    """A seeded plan over the target's tokens per window, agreeing with probability alpha at each position."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    generator = torch.Generator().manual_seed(seed)
    uniforms = [torch.rand(len(window), generator=generator, dtype=torch.float64) for window in target_tokens]
    agree = tuple(tuple(bool(u < alpha) for u in window) for window in uniforms)
    return AcceptancePlan(tuple(tuple(window) for window in target_tokens), agree, alpha)


def judged(result: DecodeResult) -> list[tuple[int, int, bool]]:
    """(window, generated position, accepted) of every draft token the target judged, in order: what a
    plan's `agree` must match position by position when the draft followed it."""
    found, window, position = [], 0, 0
    for step in result.steps:
        if step.window != window:
            window, position = step.window, 0
        found += [(window, position + i, i < step.n_accepted) for i in range(step.num_judged)]
        position += step.n_accepted + 1
    return found


def planted(options: DecodeOptions) -> DecodeOptions:
    """The options to decode with under a plan: no stop on the draft model's own confidence, which it
    judges before the plan replaces its choice and which for random weights would stop drafting after
    one token whatever the plan. (The draft model's own end-of-text still ends its proposal.)"""
    return dataclasses.replace(options, draft_confidence=0.0)


def plan_from(result: DecodeResult, alpha: float, seed: int = 0) -> AcceptancePlan:
    """A plan for decoding the same clip again, from the target-only run's trace."""
    num_windows = max((token.window for token in result.tokens), default=-1) + 1
    windows = [[t.token_id for t in result.tokens if t.window == w] for w in range(num_windows)]
    return make_plan(windows, alpha, seed)


class ControlledDrafter:
    """A drafter whose proposals follow each row's plan, in front of the real draft model (see above)."""

    free = False

    def __init__(self, draft: Drafter, plans: list[AcceptancePlan], window: int, wrong: WrongToken) -> None:
        self.draft_model, self.plans, self.wrong = draft, plans, wrong  # plans[b]: row b's
        self.window = window  # the window these rows decode (the round of the seek loop)

    def propose(self, rows: Sequence[Row], num_draft_tokens: Sequence[int]) -> list[Proposal]:
        drafted = self.draft_model.propose(rows, num_draft_tokens)
        return [self._planned(*each) for each in zip(rows, self.plans, drafted, strict=True)]

    def keep(self, rows: Sequence[int]) -> None:
        self.draft_model.keep(rows)
        self.plans = [self.plans[b] for b in rows]

    def _planned(self, row: Row, plan: AcceptancePlan, proposal: Proposal) -> Proposal:
        """The draft model's proposal with its tokens replaced by the plan's, as many as it drafted."""
        planned, agree, first = plan.target_tokens[self.window], plan.agree[self.window], len(row.generated)
        positions = range(first, min(first + len(proposal.tokens), len(planned)))
        tokens = [
            planned[i] if agree[i] else self.wrong(drafted, planned[i])
            for i, drafted in zip(positions, proposal.tokens, strict=False)
        ]
        if not tokens:
            return Proposal([], None, proposal.source)
        probs = torch.zeros(len(tokens), proposal.draft_probs.shape[-1], device=proposal.draft_probs.device)
        probs[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal(tokens, probs, proposal.source)


class WrongToken:
    """A token the target will reject where a plan disagrees: the draft model's own choice when it is
    another text token than the target's, else the next text token that is not suppressed."""

    def __init__(self, pair: ModelPair) -> None:
        config = pair.target.model.generation_config
        eos = config.eos_token_id
        self.text_tokens = eos[0] if isinstance(eos, list) else eos  # ids below end-of-text are text
        self.avoid = {*(config.suppress_tokens or []), *(config.begin_suppress_tokens or [])}

    def __call__(self, drafted: int, target_token: int) -> int:
        if drafted != target_token and drafted < self.text_tokens:
            return drafted
        candidate = (target_token + 1) % self.text_tokens
        while candidate in self.avoid or candidate == target_token:
            candidate = (candidate + 1) % self.text_tokens
        return candidate


def controlled(pair: ModelPair, plans: list[AcceptancePlan]) -> MakeDrafter:
    """For decode_clips(make_drafter=...): the clips' plans (plans[i]: clip i's) in front of the draft
    model. Round r's rows are the r-th windows of the clips that have one, in order."""
    wrong = WrongToken(pair)

    def make_drafter(rows: list[Row], draft_model: Drafter | None) -> Drafter | None:
        window = rows[0].window
        row_plans = [plan for plan in plans if len(plan.target_tokens) > window]
        if draft_model is None or len(row_plans) != len(rows):
            raise ValueError(f"plans for {len(row_plans)} rows, {len(rows)} rows in window {window}")
        return ControlledDrafter(draft_model, row_plans, window, wrong)

    return make_drafter


def row_plans(references: list[DecodeResult], alpha: float, seed: int) -> list[AcceptancePlan]:
    """One plan per clip from its target-only result (references[i]: clip i's), clip i seeded seed + i."""
    return [plan_from(result, alpha, seed=seed + i) for i, result in enumerate(references)]


@contextmanager
def assistant_plan(
    model: nn.Module, plan: AcceptancePlan, prompt_length: int, wrong: WrongToken
) -> Iterator[None]:
    """For assisted generation: while the block runs, a same-vocabulary assistant's greedy choices follow
    a one-row plan; prompt_length: decoder prompt tokens before the first generated position."""
    window = -1  # counts fresh caches: each decoding window starts the assistant on an empty one

    def rewrite(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """Make the planned token win at each planned row of output.logits (1, n, vocab), in place."""
        nonlocal window
        logits = output.logits
        cache = getattr(output, "past_key_values", None) or kwargs.get("past_key_values")
        cached_before = (cache.get_seq_length() if cache is not None else logits.shape[1]) - logits.shape[1]
        window += cached_before == 0
        if not 0 <= window < len(plan.target_tokens):
            return
        planned, agree = plan.target_tokens[window], plan.agree[window]
        first = cached_before + 1 - prompt_length  # generated position that row 0 predicts
        for row, position in enumerate(range(first, first + logits.shape[1])):
            if 0 <= position < len(planned):
                token = planned[position]
                choice = token if agree[position] else wrong(int(logits[0, row].argmax()), token)
                logits[0, row, choice] = logits[0, row].max() + BOOST

    handle = model.register_forward_hook(rewrite, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
