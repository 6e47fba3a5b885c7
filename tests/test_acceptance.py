"""Tests for specdec.engine.acceptance against brute-force references, not against its own code.

Greedy: a plain Python loop over the draft. Sampling: the paper's rule enumerated exactly (in rational
arithmetic) over every draft sequence on a tiny vocabulary, where the target and draft distributions
depend on the prefix through lookup tables, then a seeded Monte-Carlo run of the real function.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction

import pytest
import torch

from specdec.engine.acceptance import (
    Verdict,
    greedy_accept,
    greedy_check,
    relaxed_accept,
    residual_probs,
    speculative_sample,
)

Prefix = tuple[int, ...]
Table = dict[Prefix, list[Fraction]]  # prefix -> distribution of the next token, shape (vocab,)
Residual = Callable[[list, list], list]  # (target row, draft row) -> residual row

# Upper 1e-3 quantiles of the chi-square distribution, by degrees of freedom (standard tables;
# checked with torch.special.gammaincc(df / 2, x / 2) == 1e-3).
CHI2_CRITICAL_1E3 = {3: 16.266, 63: 103.442}


# ---------------------------------------------------------------- greedy


def reference_greedy(draft_tokens: list[int], target_scores: list[list[float]]) -> tuple[int, int]:
    """Walk the draft; stop at the first token that is not the target's argmax there."""

    def argmax(row: list[float]) -> int:
        return max(range(len(row)), key=row.__getitem__)

    for position, token in enumerate(draft_tokens):
        if token != argmax(target_scores[position]):
            return position, argmax(target_scores[position])
    return len(draft_tokens), argmax(target_scores[len(draft_tokens)])


def test_greedy_matches_python_loop_on_random_cases() -> None:
    generator = torch.Generator().manual_seed(0)
    vocab = 7
    n_bonus = n_correction = n_first_rejected = n_empty = 0
    for _ in range(500):
        num_draft_tokens = int(torch.randint(0, 6, (), generator=generator))
        target_scores = torch.randn(num_draft_tokens + 1, vocab, generator=generator)  # (k+1, vocab)
        # Plant a matching prefix of random length so that every n_accepted in 0..k is exercised.
        n_matching = int(torch.randint(0, num_draft_tokens + 1, (), generator=generator))
        draft_tokens = torch.randint(0, vocab, (num_draft_tokens,), generator=generator)
        draft_tokens[:n_matching] = target_scores[:n_matching].argmax(dim=-1)
        scores = target_scores.tolist()
        assert all(len(set(row)) == vocab for row in scores)  # ties-free

        verdict = greedy_accept(draft_tokens, target_scores)

        assert (verdict.n_accepted, verdict.next_token) == reference_greedy(draft_tokens.tolist(), scores)
        assert isinstance(verdict.n_accepted, int) and isinstance(verdict.next_token, int)
        n_empty += num_draft_tokens == 0
        n_bonus += verdict.n_accepted == num_draft_tokens
        n_correction += verdict.n_accepted < num_draft_tokens
        n_first_rejected += num_draft_tokens > 0 and verdict.n_accepted == 0
    assert min(n_empty, n_bonus - n_empty, n_correction, n_first_rejected) >= 20


def test_greedy_edge_cases() -> None:
    target_scores = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 1.0, 5.0]])  # argmax 1, 0, 2
    assert greedy_accept(torch.tensor([], dtype=torch.long), target_scores[:1]) == Verdict(0, 1)
    assert greedy_accept(torch.tensor([1, 0]), target_scores) == Verdict(2, 2)  # all kept + bonus
    assert greedy_accept(torch.tensor([2, 0]), target_scores) == Verdict(0, 1)  # first rejected
    assert greedy_accept(torch.tensor([1, 2]), target_scores) == Verdict(1, 0)  # correction
    assert greedy_accept(torch.tensor([2, 2]), target_scores) == Verdict(0, 1)  # later match is ignored


def test_greedy_check_is_the_python_loop_left_on_the_device() -> None:
    """The loop reads greedy_check's tensors once a pass: the target's argmax at every position, and the
    number of leading draft tokens equal to it (the row takes target_choice[:n_accepted + 1])."""
    generator = torch.Generator().manual_seed(5)
    for _ in range(300):
        num_draft_tokens = int(torch.randint(0, 6, (), generator=generator))
        target_scores = torch.randn(num_draft_tokens + 1, 7, generator=generator)  # (k+1, vocab)
        n_matching = int(torch.randint(0, num_draft_tokens + 1, (), generator=generator))
        draft_tokens = torch.randint(0, 7, (num_draft_tokens,), generator=generator)
        draft_tokens[:n_matching] = target_scores[:n_matching].argmax(dim=-1)

        target_choice, n_accepted = greedy_check(draft_tokens, target_scores)

        scores = target_scores.tolist()
        expected = reference_greedy(draft_tokens.tolist(), scores)
        assert target_choice.shape == (num_draft_tokens + 1,) and n_accepted.shape == ()
        assert (int(n_accepted), int(target_choice[int(n_accepted)])) == expected
        assert target_choice.tolist() == [max(range(7), key=row.__getitem__) for row in scores]


# ---------------------------------------------------------------- residual


def test_residual_is_normalised_positive_part() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(2, 200, 6, generator=generator, dtype=torch.float64)
    logits[1, :, 0] = -math.inf  # draft rows with a zero where the target has mass
    target_probs, draft_probs = logits[0].softmax(dim=-1), logits[1].softmax(dim=-1)  # (rows, vocab)

    residual = residual_probs(target_probs, draft_probs)

    positive_part = (target_probs - draft_probs).clamp(min=0)
    assert residual.shape == target_probs.shape
    torch.testing.assert_close(residual.sum(dim=-1), torch.ones(200, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (residual[target_probs <= draft_probs] == 0).all()
    assert (residual[target_probs > draft_probs] > 0).all()
    expected = positive_part / positive_part.sum(dim=-1, keepdim=True)
    torch.testing.assert_close(residual, expected, rtol=1e-12, atol=1e-15)


def test_residual_exact_small_case() -> None:
    target_probs = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64)
    draft_probs = torch.tensor([0.25, 0.25, 0.0, 0.5], dtype=torch.float64)
    # max(0, t - d) = [0.25, 0, 0.25, 0], mass 0.5
    expected = torch.tensor([0.5, 0.0, 0.5, 0.0], dtype=torch.float64)
    assert torch.equal(residual_probs(target_probs, draft_probs), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_residual_falls_back_to_target_row_by_row(dtype: torch.dtype) -> None:
    target_probs = torch.tensor([[0.1, 0.2, 0.7], [0.6, 0.4, 0.0]], dtype=dtype)
    draft_probs = torch.tensor([[0.1, 0.2, 0.7], [0.2, 0.4, 0.4]], dtype=dtype)
    residual = residual_probs(target_probs, draft_probs)
    assert residual.dtype == dtype
    assert torch.equal(residual[0], target_probs[0])  # equal rows: no residual mass, use the target
    assert torch.equal(residual[1], torch.tensor([1.0, 0.0, 0.0], dtype=dtype))


# ---------------------------------------------------------------- exact enumeration


def random_table(
    generator: torch.Generator,
    vocab: int,
    max_prefix: int,
    min_weight: int = 0,
    zero_token: int | None = None,
) -> Table:
    """A distribution over the next token for every prefix of length <= max_prefix, as exact fractions.

    Weights are integers in [min_weight, 9]; zero_token, if given, gets weight 0 after every prefix.
    """
    table = {}
    for length in range(max_prefix + 1):
        for prefix in itertools.product(range(vocab), repeat=length):
            weights = torch.randint(min_weight, 10, (vocab,), generator=generator).tolist()
            if zero_token is not None:
                weights[zero_token] = 0
            if sum(weights) == 0:  # rare; any valid distribution will do
                weights[0 if zero_token != 0 else 1] = 1
            table[prefix] = [Fraction(weight, sum(weights)) for weight in weights]
    return table


def paper_residual(target_row: list, draft_row: list) -> list:
    """normalise(max(0, target - draft)), written from the paper."""
    positive_part = [max(0, t - d) for t, d in zip(target_row, draft_row, strict=True)]
    return [x / sum(positive_part) for x in positive_part]


def specdec_residual(target_row: list, draft_row: list) -> list:
    """The real residual_probs on float64 rows."""
    rows = torch.tensor([target_row, draft_row], dtype=torch.float64)
    return residual_probs(rows[0], rows[1]).tolist()


def one_step_distribution(
    target: Table, draft: Table, num_draft_tokens: int, residual: Residual = paper_residual
) -> dict[Prefix, object]:
    """Exact probability of each sequence one speculative step emits (kept drafts + correction or bonus).

    Every draft sequence is enumerated with its draft probability; at each position it is kept with
    probability min(1, target / draft), and the first rejection emits a token from the residual.
    """
    vocab = len(target[()])
    emitted = defaultdict(int)
    for drafts in itertools.product(range(vocab), repeat=num_draft_tokens):
        reach = math.prod(draft[drafts[:i]][drafts[i]] for i in range(num_draft_tokens))
        if reach == 0:
            continue
        for i in range(num_draft_tokens):  # reach = P(drafts drawn, drafts[:i] kept)
            target_row, draft_row = target[drafts[:i]], draft[drafts[:i]]
            accept = min(1, target_row[drafts[i]] / draft_row[drafts[i]])
            if accept < 1:
                for token, prob in enumerate(residual(target_row, draft_row)):
                    emitted[drafts[:i] + (token,)] += reach * (1 - accept) * prob
            reach *= accept
        for token, prob in enumerate(target[drafts]):  # bonus after the last draft token
            emitted[drafts + (token,)] += reach * prob
    return dict(emitted)


def first_tokens_distribution(
    emitted: dict[Prefix, object], target: Table, length: int
) -> dict[Prefix, object]:
    """Distribution of the first `length` output tokens: one step, then plain target sampling."""
    vocab = len(target[()])
    out = defaultdict(int)
    for sequence, prob in emitted.items():
        if len(sequence) >= length:
            out[sequence[:length]] += prob
            continue
        for suffix in itertools.product(range(vocab), repeat=length - len(sequence)):
            full = sequence + suffix
            out[full] += prob * math.prod(target[full[:i]][full[i]] for i in range(len(sequence), length))
    return dict(out)


def target_only_distribution(target: Table, length: int) -> dict[Prefix, object]:
    """p(x1) p(x2 | x1) ... for every sequence of `length` tokens."""
    vocab = len(target[()])
    return {
        sequence: math.prod(target[sequence[:i]][sequence[i]] for i in range(length))
        for sequence in itertools.product(range(vocab), repeat=length)
    }


def to_float(table: Table) -> dict[Prefix, list[float]]:
    return {prefix: [float(x) for x in row] for prefix, row in table.items()}


TABLE_CASES = [  # (vocab, num_draft_tokens, seed, draft zero_token)
    (3, 1, 10, None),
    (4, 1, 11, None),
    (3, 2, 12, None),
    (4, 2, 13, None),
    (3, 3, 14, None),
    (4, 2, 15, 2),  # the draft never proposes token 2, which the target likes
]


@pytest.mark.parametrize(("vocab", "num_draft_tokens", "seed", "zero_token"), TABLE_CASES)
def test_speculative_step_is_exactly_target_sampling(
    vocab: int, num_draft_tokens: int, seed: int, zero_token: int | None
) -> None:
    generator = torch.Generator().manual_seed(seed)
    target = random_table(generator, vocab, num_draft_tokens, min_weight=0)
    draft = random_table(generator, vocab, num_draft_tokens - 1, min_weight=0, zero_token=zero_token)

    emitted = one_step_distribution(target, draft, num_draft_tokens)

    assert sum(emitted.values()) == 1
    lengths = {len(sequence) for sequence, prob in emitted.items() if prob > 0}
    assert lengths == set(range(1, num_draft_tokens + 2))  # a rejection at every position, and a bonus
    for length in range(1, num_draft_tokens + 2):
        # Rational arithmetic: equal exactly, not to a tolerance.
        assert first_tokens_distribution(emitted, target, length) == target_only_distribution(target, length)


@pytest.mark.parametrize(("vocab", "num_draft_tokens", "seed", "zero_token"), TABLE_CASES)
def test_speculative_step_with_specdec_residual_is_target_sampling(
    vocab: int, num_draft_tokens: int, seed: int, zero_token: int | None
) -> None:
    generator = torch.Generator().manual_seed(seed)
    target = to_float(random_table(generator, vocab, num_draft_tokens))
    draft = to_float(random_table(generator, vocab, num_draft_tokens - 1, zero_token=zero_token))

    emitted = one_step_distribution(target, draft, num_draft_tokens, residual=specdec_residual)

    for length in range(1, num_draft_tokens + 2):
        got = first_tokens_distribution(emitted, target, length)
        expected = target_only_distribution(target, length)
        assert max(abs(got[sequence] - expected[sequence]) for sequence in expected) < 1e-12


def test_enumeration_catches_a_wrong_residual() -> None:
    """Resampling from the target on rejection (a common mistake) is biased: the check has teeth."""
    generator = torch.Generator().manual_seed(13)
    target = random_table(generator, 4, 2)
    draft = random_table(generator, 4, 1)
    emitted = one_step_distribution(target, draft, 2, residual=lambda target_row, draft_row: target_row)
    assert first_tokens_distribution(emitted, target, 1) != target_only_distribution(target, 1)


# ---------------------------------------------------------------- Monte-Carlo of speculative_sample


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson statistic and degrees of freedom; cells of probability zero must be empty."""
    assert (counts[probs == 0] == 0).all()
    expected = counts.sum() * probs[probs > 0]
    statistic = float(((counts[probs > 0] - expected) ** 2 / expected).sum())
    return statistic, int((probs > 0).sum()) - 1


def run_speculative_steps(
    target: Table, draft: Table, num_trials: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """num_trials steps with k = 2: draft tokens sampled from the draft table, then speculative_sample.

    Returns (first three output tokens (trials, 3), n_accepted (trials,), drafted first token (trials,)).
    Tokens a step did not emit are sampled from the target, as the following steps would.
    """
    vocab = len(target[()])
    generator = torch.Generator().manual_seed(seed)

    def row(table: Table, prefix: Prefix) -> torch.Tensor:
        return torch.tensor([float(x) for x in table[prefix]], dtype=torch.float64)

    def rows(table: Table, length: int) -> torch.Tensor:  # (vocab,) * length + (vocab,)
        prefixes = itertools.product(range(vocab), repeat=length)
        return torch.stack([row(table, prefix) for prefix in prefixes]).reshape((vocab,) * (length + 1))

    draft_first = torch.multinomial(row(draft, ()), num_trials, replacement=True, generator=generator)
    draft_second = torch.multinomial(rows(draft, 1)[draft_first], 1, generator=generator).squeeze(1)
    draft_probs = [torch.stack([row(draft, ()), row(draft, (a,))]) for a in range(vocab)]  # (2, vocab)
    target_probs = {  # (3, vocab)
        (a, b): torch.stack([row(target, ()), row(target, (a,)), row(target, (a, b))])
        for a, b in itertools.product(range(vocab), repeat=2)
    }
    draft_tokens = {pair: torch.tensor(pair) for pair in target_probs}

    outputs, n_accepted = [], []
    for pair in zip(draft_first.tolist(), draft_second.tolist(), strict=True):
        verdict = speculative_sample(draft_tokens[pair], draft_probs[pair[0]], target_probs[pair], generator)
        emitted = pair[: verdict.n_accepted] + (verdict.next_token,)
        outputs.append(emitted + (-1,) * (3 - len(emitted)))
        n_accepted.append(verdict.n_accepted)
    outputs = torch.tensor(outputs)  # (trials, 3), -1 where not emitted
    for position in (1, 2):
        missing = outputs[:, position] == -1
        next_given = rows(target, position)[outputs[missing, :position].unbind(dim=1)]  # (missing, vocab)
        outputs[missing, position] = torch.multinomial(next_given, 1, generator=generator).squeeze(1)
    return outputs, torch.tensor(n_accepted), draft_first


@pytest.mark.parametrize(
    ("seed", "zero_token", "num_trials"),
    [(20, None, 40_000), (21, 1, 20_000)],  # the second draft never proposes token 1
)
def test_speculative_sample_monte_carlo(seed: int, zero_token: int | None, num_trials: int) -> None:
    vocab = 4
    generator = torch.Generator().manual_seed(seed)
    # Target weights >= 3: every cell of the 64-cell joint below expects >= 20 counts at 20_000 trials.
    target = random_table(generator, vocab, 2, min_weight=3)
    draft = random_table(generator, vocab, 1, zero_token=zero_token)

    outputs, n_accepted, draft_first = run_speculative_steps(target, draft, num_trials, seed)

    if zero_token is not None:
        assert (draft_first != zero_token).all()
    first_probs = torch.tensor([float(x) for x in target[()]], dtype=torch.float64)
    statistic, dof = chi_square(torch.bincount(outputs[:, 0], minlength=vocab).double(), first_probs)
    assert dof == 3 and statistic < CHI2_CRITICAL_1E3[3]
    # All three tokens a step can emit (kept drafts, bonus): p(x1) p(x2 | x1) p(x3 | x1, x2).
    joint_probs = torch.tensor(
        [float(x) for x in target_only_distribution(target, 3).values()], dtype=torch.float64
    )  # (vocab ** 3,) in the order (x1 * vocab + x2) * vocab + x3
    joint_counts = torch.bincount(
        (outputs[:, 0] * vocab + outputs[:, 1]) * vocab + outputs[:, 2], minlength=64
    )
    statistic, dof = chi_square(joint_counts.double(), joint_probs)
    assert dof == 63 and statistic < CHI2_CRITICAL_1E3[63]

    def overlap(prefix: Prefix) -> float:  # P(accept) at a position: sum over x of min(target, draft)
        return float(sum(min(t, d) for t, d in zip(target[prefix], draft[prefix], strict=True)))

    first_kept = (n_accepted >= 1).double()
    standard_error = math.sqrt(overlap(()) * (1 - overlap(())) / num_trials)
    assert abs(float(first_kept.mean()) - overlap(())) < 4 * standard_error
    # E[n_accepted] = sum_a min(p(a), q(a)) * (1 + P(accept second | a))
    expected_kept = sum(float(min(target[()][a], draft[()][a])) * (1 + overlap((a,))) for a in range(vocab))
    standard_error = float(n_accepted.double().std()) / math.sqrt(num_trials)
    assert abs(float(n_accepted.double().mean()) - expected_kept) < 4 * standard_error
    assert (n_accepted == 2).any() and (n_accepted == 0).any()


def test_draft_equal_to_target_keeps_every_token_and_draws_a_bonus() -> None:
    generator = torch.Generator().manual_seed(30)
    num_draft_tokens, num_trials = 3, 2_000
    target_probs = torch.randn(num_draft_tokens + 1, 5, generator=generator).softmax(dim=-1)  # (k+1, vocab)
    target_probs[num_draft_tokens] = torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0])  # the bonus row
    draft_probs = target_probs[:num_draft_tokens].clone()  # (k, vocab)

    bonus_tokens = []
    for _ in range(num_trials):
        draft_tokens = torch.multinomial(draft_probs, 1, generator=generator).squeeze(1)
        verdict = speculative_sample(draft_tokens, draft_probs, target_probs, generator)
        assert verdict.n_accepted == num_draft_tokens
        bonus_tokens.append(verdict.next_token)
    assert set(bonus_tokens) == {1, 3}
    standard_error = math.sqrt(0.3 * 0.7 / num_trials)
    assert abs(bonus_tokens.count(1) / num_trials - 0.3) < 4 * standard_error


@pytest.mark.parametrize("seed", range(20))
def test_speculative_sample_certain_outcomes(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    no_draft = torch.tensor([], dtype=torch.long)
    one_hot = torch.tensor([[0.0, 0.0, 1.0]])
    assert speculative_sample(no_draft, torch.empty(0, 3), one_hot, generator) == Verdict(0, 2)

    # The target gives the drafted token 0 no mass: always rejected; the residual is all on token 2.
    draft_probs = torch.tensor([[0.5, 0.5, 0.0]])
    target_probs = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    assert speculative_sample(torch.tensor([0]), draft_probs, target_probs, generator) == Verdict(0, 2)

    # A draft token with zero draft probability where the target has mass is kept (min(1, p / 0) = 1).
    draft_probs = torch.tensor([[0.0, 0.5, 0.5], [0.5, 0.5, 0.0]])
    target_probs = torch.tensor([[0.4, 0.3, 0.3], [0.2, 0.8, 0.0], [0.0, 1.0, 0.0]])
    verdict = speculative_sample(torch.tensor([0, 1]), draft_probs, target_probs, generator)
    assert verdict.n_accepted >= 1


def test_same_seed_same_verdicts() -> None:
    setup = torch.Generator().manual_seed(40)
    draft_probs = torch.randn(4, 6, generator=setup).softmax(dim=-1)  # (k, vocab)
    target_probs = torch.randn(5, 6, generator=setup).softmax(dim=-1)  # (k+1, vocab)
    draft_tokens = torch.multinomial(draft_probs, 1, generator=setup).squeeze(1)

    def verdicts(seed: int) -> list[Verdict]:
        generator = torch.Generator().manual_seed(seed)
        return [speculative_sample(draft_tokens, draft_probs, target_probs, generator) for _ in range(50)]

    assert verdicts(7) == verdicts(7)
    assert verdicts(7) != verdicts(8)  # the generator is what drives the randomness


# ---------------------------------------------------------------- the lossy relaxation, against a plain loop
def _relaxed_by_loop(draft_tokens: list[int], target_scores: torch.Tensor, threshold: float) -> Verdict:
    """The design's rule written out: keep a draft token while it is the target's argmax or has at least
    threshold of the target's top probability; then the target's argmax."""
    relaxed = []
    for position, token in enumerate(draft_tokens):
        probs = torch.softmax(target_scores[position].float(), dim=-1)
        choice = int(target_scores[position].argmax())
        if token != choice and probs[token] < threshold * probs.max():
            return Verdict(position, choice, tuple(relaxed))
        if token != choice:
            relaxed.append(position)
    return Verdict(len(draft_tokens), int(target_scores[len(draft_tokens)].argmax()), tuple(relaxed))


@pytest.mark.parametrize("threshold", [1.0, 0.8, 0.5, 0.2, 0.01])
def test_relaxed_accept_equals_a_plain_loop(threshold):
    generator = torch.Generator().manual_seed(5)
    relaxed_seen = 0
    for _ in range(300):
        k = int(torch.randint(0, 6, (1,), generator=generator))
        target_scores = 2 * torch.randn(k + 1, 7, generator=generator)
        draft_tokens = torch.randint(0, 7, (k,), generator=generator)
        expected = _relaxed_by_loop(draft_tokens.tolist(), target_scores, threshold)
        assert relaxed_accept(draft_tokens, target_scores, threshold) == expected
        relaxed_seen += len(expected.relaxed)
    assert (relaxed_seen == 0) == (threshold == 1.0)  # both kinds of outcome exercised
