"""Acceptance rules of speculative decoding: pure tensor functions, no model inside.

Greedy: keep the longest prefix of the draft that equals the target's argmax, then take the target's
argmax at the first disagreement (a correction) or after the last draft token (a bonus).

Sampling (Leviathan et al. 2023, Chen et al. 2023): accept draft token x with probability
min(1, target_probs[x] / draft_probs[x]); on the first rejection sample from the residual
normalise(max(0, target_probs - draft_probs)); if every draft token is accepted, sample a bonus
token from the target's distribution after the last one. The output is distributed exactly as
sampling from the target alone.

Relaxed (opt-in, lossy: the output is no longer the target's): greedy, but a draft token is also kept
where the target gives it at least `acceptance_threshold` of its own top probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.engine.host import read


@dataclass(frozen=True)
class Verdict:
    """What the target decided about one row's draft."""

    n_accepted: int  # leading draft tokens kept
    next_token: int  # the target's own token after them: a correction or a bonus
    relaxed: tuple[int, ...] = ()  # kept positions that were not the target's own choice (relaxed_accept)


def greedy_check(
    draft_tokens: torch.Tensor, target_scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy acceptance on the device, nothing read: the target's argmax at every position, (k+1,), and
    n_accepted, (), the length of the draft's prefix that equals it. The row takes target_choice[:n + 1]:
    the kept draft tokens are the target's own choices there, then a correction or a bonus.

    draft_tokens: (num_draft_tokens,) ids; target_scores: (num_draft_tokens + 1, vocab) processed logits.
    """
    target_choice = target_scores.argmax(dim=-1)  # (k+1,)
    matches = draft_tokens == target_choice[: draft_tokens.shape[0]]  # (k,)
    n_accepted = matches.long().cumprod(dim=0).sum()  # leading matches: ones until the first mismatch
    return target_choice, n_accepted


def greedy_accept(draft_tokens: torch.Tensor, target_scores: torch.Tensor) -> Verdict:
    """Longest matching prefix under the target's argmax (`greedy_check`, read on the host).

    draft_tokens: (num_draft_tokens,) ids; target_scores: (num_draft_tokens + 1, vocab) processed logits.
    """
    target_choice, n_accepted = read([greedy_check(draft_tokens, target_scores)])[0]
    n = int(n_accepted[0])
    return Verdict(n, int(target_choice[n]))


def relaxed_accept(draft_tokens: torch.Tensor, target_scores: torch.Tensor, threshold: float) -> Verdict:
    """Greedy with a lossy relaxation: keep the longest prefix of draft tokens that are the target's argmax
    or have at least `threshold` of its top probability; then the target's argmax, as `greedy_accept`.

    draft_tokens: (num_draft_tokens,) ids; target_scores: (num_draft_tokens + 1, vocab) processed logits.
    """
    num_draft_tokens = draft_tokens.shape[0]
    target_choice = target_scores.argmax(dim=-1)  # (k+1,)
    target_probs = torch.softmax(target_scores[:num_draft_tokens].float(), dim=-1)  # (k, vocab)
    positions = torch.arange(num_draft_tokens, device=draft_tokens.device)
    is_choice = draft_tokens == target_choice[:num_draft_tokens]
    close_enough = target_probs[positions, draft_tokens] >= threshold * target_probs.max(dim=-1).values
    refused = (~(is_choice | close_enough)).nonzero()
    n_accepted = int(refused[0, 0]) if refused.numel() else num_draft_tokens
    relaxed = tuple(int(i) for i in (~is_choice[:n_accepted]).nonzero().flatten())
    return Verdict(n_accepted, int(target_choice[n_accepted]), relaxed)


def residual_probs(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, target_probs - draft_probs)) over the last dimension.

    Where the difference is zero everywhere (target == draft), a rejection has probability zero;
    we then fall back to the target distribution so the function is total.
    """
    residual = (target_probs - draft_probs).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(residual.dtype).tiny), target_probs)


def speculative_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Leviathan et al. rejection sampling for one row.

    draft_tokens: (k,) sampled from draft_probs; draft_probs: (k, vocab); target_probs: (k + 1, vocab).
    """
    num_draft_tokens = draft_tokens.shape[0]
    positions = torch.arange(num_draft_tokens, device=draft_tokens.device)
    target_of_draft = target_probs[positions, draft_tokens]  # (k,)
    draft_of_draft = draft_probs[positions, draft_tokens]  # (k,)
    uniforms = torch.rand(
        num_draft_tokens, generator=generator, device=draft_tokens.device, dtype=torch.float64
    )
    # accept iff u * draft < target: min(1, target/draft) without dividing by a zero draft prob
    accepted = uniforms * draft_of_draft.double() < target_of_draft.double()
    rejected = (~accepted).nonzero()
    if rejected.numel() == 0:
        bonus = torch.multinomial(target_probs[num_draft_tokens], 1, generator=generator)
        return Verdict(num_draft_tokens, int(bonus))
    n_accepted = int(rejected[0, 0])
    residual = residual_probs(target_probs[n_accepted], draft_probs[n_accepted])
    correction = torch.multinomial(residual, 1, generator=generator)
    return Verdict(n_accepted, int(correction))
