"""Controlled acceptance in a batch, for benchmarks only: every row of a batched draft call follows its plan.

`specdec.controlled` plants agreement in a one-row draft call; a batched draft call (`BatchRunner.feed`)
carries many rows, each at its own position, and rows leave the batch when they finish. Here each row
keeps its own `AcceptancePlan` (its clip's target-only tokens, its own seed), and a forward hook on the
draft model rewrites row b's logits after the real forward pass with `controlled.ControlledDraft`'s own
rule, at the generated positions that row's `decoder_position_ids` say it is at.

Which plan row b of a call belongs to: the rows of a window round are the clips that still have a window
(generate()'s seek loop, as `batching.decode_batch_features` runs it), in order, and a new round is a new
cache object; a row that leaves the batch is dropped from the cache with transformers'
`Cache.batch_select_indices`, which the hook watches on each round's cross-attention cache to learn which
rows stayed. The engine does not know: it calls a draft model, drops rows as it always does, and its
output must still be the target's (checked by the benchmark and tests/test_batch_bench.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from specdec.controlled import AcceptancePlan, ControlledDraft, controlled_draft, plan_from

if TYPE_CHECKING:
    from specdec.models import ModelPair
    from specdec.trace import DecodeResult


class BatchControlledDraft:
    """A forward hook that makes row i of every batched draft call follow plans[i]; `with` it while decoding.

    prompt_length: decoder prompt tokens before the first generated position (the same for every row).
    """

    def __init__(self, pair: ModelPair, prompt_length: int, plans: list[AcceptancePlan]) -> None:
        self.model = pair.draft.model
        self.prompt_length = prompt_length
        self.rows: list[ControlledDraft] = []  # one planner per row (never hooked itself): its rule and ids
        for plan in plans:
            row = controlled_draft(pair, prompt_length)
            row.set_plan(plan)
            self.rows.append(row)
        self._cache: object | None = None  # the current round's draft cache
        self._window = -1
        self._ids: list[int] = []  # plan index of each row of the current batch
        self._handle = None

    def __enter__(self) -> BatchControlledDraft:
        self._cache, self._window, self._ids = None, -1, []
        self._handle = self.model.register_forward_hook(self._rewrite, with_kwargs=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._handle.remove()
        self._handle = None

    def _new_round(self, cache: object) -> None:
        """A new cache: the next window round, whose rows are the plans that still have a window."""
        self._cache = cache
        self._window += 1
        self._ids = [i for i, row in enumerate(self.rows) if len(row.plan.target_tokens) > self._window]
        cross = getattr(cache, "cross_attention_cache", None)
        if cross is None:
            return
        select = cross.batch_select_indices

        def tracked(indices: torch.Tensor) -> None:  # the engine drops finished rows: keep ours in step
            self._ids = [self._ids[i] for i in indices.tolist()]
            select(indices)

        cross.batch_select_indices = tracked

    def _rewrite(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """Overwrite each row's planned positions of output.logits (batch, width, draft vocab) in place."""
        cache = kwargs.get("past_key_values")
        if cache is not self._cache:
            self._new_round(cache)
        logits = output.logits
        if logits.shape[0] != len(self._ids):
            raise RuntimeError(
                f"controlled batch: {logits.shape[0]} rows in a draft call, {len(self._ids)} expected "
                "(rows left the batch without Cache.batch_select_indices)"
            )
        positions = kwargs.get("decoder_position_ids")
        if positions is None:  # a one-row runner: positions follow the cache
            total = cache.get_seq_length() if cache is not None else logits.shape[1]
            positions = torch.arange(total - logits.shape[1], total)[None]
        # position p predicts generated token p + 1 - prompt_length; padding columns are rewritten too
        # (harmless: the engine never reads their logits)
        for b, generated in enumerate((positions + 1 - self.prompt_length).tolist()):
            row = self.rows[self._ids[b]]
            planned = len(row.plan.target_tokens[self._window])
            for column, position in enumerate(generated):
                if 0 <= position < planned:
                    row._set_choice(logits[b, column], self._window, position)


def row_plans(references: list[DecodeResult], alpha: float, seed: int) -> list[AcceptancePlan]:
    """One plan per row from its clip's target-only result (references[i]: row i's), row i seeded seed + i."""
    return [plan_from(result, alpha, seed=seed + i) for i, result in enumerate(references)]
