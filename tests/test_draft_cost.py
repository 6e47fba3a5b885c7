"""Cost-aware draft length: the choice follows the measured costs, and never changes the output.

The chooser's decision is checked on stated costs (a compute-bound verify pass must stop drafting, a
memory-bound one must draft long); its use in a real batch is checked for what matters to users: every
row is still its clip decoded alone, while the batch's k really changes between steps. (On the demo
pair a draft pass costs about what a verify pass costs, so after the exploration steps the chooser
rightly stops drafting: measured k = 0.)
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_batching import BATCH, MAX_NEW_TOKENS, assert_same_outputs, decode_alone, decode_together

from specdec.engine.draft_length import (
    CostAwareDraftLength,
    LoadAwareDraftLength,
    RowAcceptance,
    StepFacts,
    expected_tokens,
)
from specdec.options import DecodeOptions

ROWS = 8


def rows_with_budgets(drafts: list[int]) -> list[SimpleNamespace]:
    """Test doubles for rows: only their budget, which allows each `drafts[b]` draft tokens."""
    return [SimpleNamespace(budget=most + 1) for most in drafts]


def facts(
    judged: list[tuple[int, int]], tokens_fed: int, verify: float, passes: int, draft: float
) -> StepFacts:
    return StepFacts([d for d, _ in judged], [a for _, a in judged], tokens_fed, verify, passes, draft)


def chooser_after(
    slope: float, intercept: float, draft_pass: float, alpha_steps: int = 20
) -> CostAwareDraftLength:
    """A chooser that measured verify(n) = intercept + slope * n at two n; rows accept 4 of 5 drafts."""
    chooser = CostAwareDraftLength(num_draft_tokens=5, max_draft_tokens=12)
    chooser.add(rows_with_budgets([30] * ROWS))
    for row in chooser.rows:
        for _ in range(alpha_steps):
            row.observe(5, 4)  # 4 accepted, the 5th judged and rejected: alpha -> 0.8
    chooser.steps = 1
    chooser.observe(facts([(0, 0)] * ROWS, ROWS, intercept + slope * ROWS, 0, 0.0))
    chooser.observe(facts([(0, 0)] * ROWS, ROWS * 6, intercept + slope * ROWS * 6, 5, 5 * draft_pass))
    return chooser


def test_acceptance_counts_only_judged_positions():
    row = RowAcceptance()
    row.observe(5, 2)  # 2 accepted, the 3rd rejected, the last 2 never judged
    row.observe(3, 3)
    assert (row.accepted, row.judged) == (1 + 5, 2 + 3 + 3)


def test_expected_tokens_is_leviathans_formula():
    assert expected_tokens(0.8, 0) == 1
    assert expected_tokens(0.8, 5) == pytest.approx((1 - 0.8**6) / (1 - 0.8))
    assert expected_tokens(1.0, 4) == 5


def test_memory_bound_verify_drafts_long():
    """A verify pass costs the same for any number of tokens: draft as long as the bound allows."""
    chooser = chooser_after(slope=0.0, intercept=1.0, draft_pass=0.001)
    assert chooser.choose(rows_with_budgets([30] * ROWS), [1] * ROWS) == [12] * ROWS
    budgets = rows_with_budgets([3] * (ROWS - 1) + [0])
    assert chooser.choose(budgets, [1] * ROWS) == [3] * (ROWS - 1) + [0]  # each row's budget


def test_compute_bound_verify_stops_drafting():
    """Each token costs its full share (no intercept) and drafts cost time: the target alone is fastest."""
    chooser = chooser_after(slope=0.1, intercept=0.0, draft_pass=0.2)
    assert chooser.choose(rows_with_budgets([30] * ROWS), [1] * ROWS) == [0] * ROWS


def test_partly_compute_bound_verify_drafts_short():
    """The 2-core figures at batch 8 (one-token pass 0.97 s, 8 x 6 tokens 2.6 s, draft pass 0.18 s)."""
    slope = (2.6 - 0.97) / (ROWS * 6 - ROWS)
    chooser = chooser_after(slope=slope, intercept=0.97 - slope * ROWS, draft_pass=0.18)
    assert chooser.choose(rows_with_budgets([30] * ROWS), [1] * ROWS)[0] in (1, 2, 3)


def test_exploration_then_choice():
    """Step 0 drafts k, step 1 drafts nothing (the line's low point), step 2 drafts k; then it decides."""
    chooser = CostAwareDraftLength(num_draft_tokens=4, max_draft_tokens=8)
    rows = rows_with_budgets([30, 30])
    chooser.add(rows)
    assert chooser.choose(rows, [4, 4]) == [4, 4]
    chooser.observe(facts([(4, 4), (4, 1)], 16, 5.0, 4, 0.4))  # step 0: not a cost point (cross-attention)
    assert chooser.costs.verify_points == []
    assert chooser.choose(rows, [1, 1]) == [0, 0]
    chooser.observe(facts([(0, 0), (0, 0)], 2, 0.1, 0, 0.0))
    assert chooser.choose(rows, [1, 1]) == [4, 4]
    chooser.observe(facts([(4, 4), (4, 4)], 10, 0.1, 4, 0.004))
    assert chooser.choose(rows, [1, 1]) == [8, 8]  # free verify tokens, cheap drafts, high acceptance


def test_cost_aware_batch_equals_alone_while_k_changes(shared_pair):
    """Batch == alone for every option and kind is test_lossless.py's; here the batch's k really changes
    between steps (exploration, then the measured choice), with accepted and rejected drafts."""
    pair = shared_pair
    # draft_confidence=0: every row drafts the k chosen (no early stop), so the drafts' lengths show k
    options = DecodeOptions(
        language="en", cost_aware=True, draft_confidence=0.0, max_new_tokens=MAX_NEW_TOKENS
    )
    batched = decode_together(pair, options)
    assert_same_outputs(batched, decode_alone(pair, options))
    first_window = [[s for s in t.result.steps if s.window == 0] for t in batched]
    assert all(not steps[1].drafted for steps in first_window if len(steps) > 1)  # the exploration step
    drafted = {len(s.drafted) for steps in first_window for s in steps}
    assert {0, options.num_draft_tokens} <= drafted, f"the batch's k never changed: {drafted}"
    labels = {token.label for t in batched for token in t.result.tokens}
    assert {"accepted", "corrected"} <= labels, "needs both accepted and rejected drafts to prove anything"
    assert len(batched) == len(BATCH)


def test_load_aware_drafts_adaptively_alone_and_caps_a_full_batch():
    """Alone a row drafts its adaptive k; in a batch whose verify pass costs as much per token as a draft
    saves, the cost-aware cap holds every row to k = 0 once measured."""
    alone = LoadAwareDraftLength()
    (row,) = rows_with_budgets([30])
    row.options = DecodeOptions(num_draft_tokens=5)
    alone.add([row])
    assert alone.choose([row], [1]) == [5]
    full = LoadAwareDraftLength()
    rows = rows_with_budgets([30] * ROWS)
    for one in rows:
        one.options = DecodeOptions(num_draft_tokens=5)
    full.add(rows)
    full.cost_aware = chooser_after(slope=0.2, intercept=0.0, draft_pass=0.2)  # verify ~ tokens fed
    assert full.choose(rows, [1] * ROWS) == [0] * ROWS
