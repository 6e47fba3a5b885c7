"""Who proposes the next tokens: the draft model, the previous hypothesis of a live stream, or a plug-in.

A drafter serves a whole batch. `propose(rows, num_draft_tokens)` returns one `Proposal` per row
(target ids, the draft's distribution at each position for rejection sampling, and where it came from),
each row drafting by its own options (`row.options`: draft confidence) at its own temperature
(`row.pipeline`); `keep(rows)` follows the rows that stay when others finish. Any object with these two
methods and a `free` flag is a drafter: the benchmarks' controlled-acceptance drafter is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specdec.engine import host
from specdec.engine.cache import CachedDecoder
from specdec.engine.state import Row
from specdec.trace import DRAFT_MODEL, HYPOTHESIS, NO_PROPOSAL
from specdec.whisper.vocabulary import VocabularyMap

MATCH_LENGTH = 3  # generated tokens to look up in a previous hypothesis after the two diverged


@dataclass(frozen=True)
class Proposal:
    """A row's proposed tokens (target ids) with the draft's distribution at each position."""

    tokens: list[int]
    draft_probs: torch.Tensor | None  # (len(tokens), target vocab); None when nothing was proposed
    source: str  # trace.SOURCES: the draft model, the previous hypothesis, or none


NOTHING = Proposal([], None, NO_PROPOSAL)


class Drafter(Protocol):
    """Proposes tokens for every row of a batch."""

    free: bool  # its proposals cost no forward pass: asked even for rows whose draft length is 0

    def propose(self, rows: Sequence[Row], num_draft_tokens: Sequence[int]) -> list[Proposal]:
        """Row b's proposal of up to num_draft_tokens[b] tokens after row b's sequence."""
        ...

    def keep(self, rows: Sequence[int]) -> None:
        """Forget every row not in `rows` (indices into the current batch, in the order kept)."""
        ...


def choose_token(
    row: Row, drafted: list[int], logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The draft's next token for a row after its sequence and what it drafted so far, on the device: the
    argmax of the processed scores, or a sample from the row's distribution with its own generator.

    logits: (target vocab,). Returns the token (1,), its probability (1,), the distribution (target vocab,).
    """
    scores = row.pipeline.scores_at(row.sequence + drafted, [], logits[None])
    if row.pipeline.sampling:
        draft_probs = row.pipeline.probs(scores)[0]
        token = torch.multinomial(draft_probs, 1, generator=row.generator)
    else:
        draft_probs = torch.softmax(scores.float(), -1)[0]
        token = scores[0].argmax(dim=-1, keepdim=True)
    return token, draft_probs.gather(0, token), draft_probs


class DraftModel:
    """The draft model's side of a batch: per row its own draft ids and cache length, proposals in target
    ids (a draft token the target lacks gets no mass: `VocabularyMap.logits_to_target`)."""

    free = False

    def __init__(
        self, decoder: CachedDecoder, vocabulary: VocabularyMap, draft_prompts: list[list[int]]
    ) -> None:
        self.decoder = decoder
        self.vocabulary = vocabulary
        self.draft_prompts = draft_prompts
        self.sequences = [list(prompt) for prompt in draft_prompts]  # draft ids, per row

    def propose(self, rows: Sequence[Row], num_draft_tokens: Sequence[int]) -> list[Proposal]:
        """Row b drafts up to num_draft_tokens[b] tokens, one batched draft pass per position (fewer if
        the draft proposes end-of-text or is less sure than its options' draft_confidence)."""
        drafting = [b for b, n in enumerate(num_draft_tokens) if n > 0]
        self._follow(rows, drafting)
        tokens: list[list[int]] = [[] for _ in rows]
        probs: list[list[torch.Tensor]] = [[] for _ in rows]
        while drafting:
            feeds = [
                self.sequences[b][self.decoder.lengths[b] :] if b in drafting else []
                for b in range(len(rows))
            ]
            logits = self.decoder.feed(feeds)
            last = self.vocabulary.logits_to_target(torch.stack([logits[b][-1] for b in drafting]))
            chosen = [choose_token(rows[b], tokens[b], last[i]) for i, b in enumerate(drafting)]
            readings = host.read([(token, prob) for token, prob, _ in chosen])  # this position's one wait
            still_drafting = []
            for b, ((token,), (prob,)), (_, _, draft_probs) in zip(drafting, readings, chosen, strict=True):
                row, token = rows[b], int(token)
                tokens[b].append(token)
                probs[b].append(draft_probs)
                self.sequences[b].append(self.vocabulary.to_draft([token])[0])
                unsure = prob < row.options.draft_confidence
                if token != row.pipeline.eos_token_id and not unsure and len(tokens[b]) < num_draft_tokens[b]:
                    still_drafting.append(b)
            drafting = still_drafting
        return [
            Proposal(row_tokens, torch.stack(row_probs), DRAFT_MODEL) if row_tokens else NOTHING
            for row_tokens, row_probs in zip(tokens, probs, strict=True)
        ]

    def _follow(self, rows: Sequence[Row], drafting: list[int]) -> None:
        """Make these rows' draft sequences their rows', keeping each cache up to their common prefix."""
        lengths = list(self.decoder.lengths)
        for b in drafting:
            sequence = self.draft_prompts[b] + self.vocabulary.to_draft(rows[b].generated)
            # keep the common prefix, but feed at least the newest token: its logits predict the next one
            lengths[b] = min(common_length(self.sequences[b][: lengths[b]], sequence), len(sequence) - 1)
            self.sequences[b] = sequence
        self.decoder.rollback(lengths)

    def add(self, encoder_hidden_states: torch.Tensor, draft_prompts: list[list[int]]) -> None:
        """New rows at the end of the batch: the draft's encoder states for them, and their prompts."""
        self.decoder.add(encoder_hidden_states)
        self.draft_prompts += draft_prompts
        self.sequences += [list(prompt) for prompt in draft_prompts]

    def keep(self, rows: Sequence[int]) -> None:
        self.decoder.keep(list(rows))
        self.draft_prompts = [self.draft_prompts[b] for b in rows]
        self.sequences = [self.sequences[b] for b in rows]


class PreviousHypothesis:
    """The previous update's hypothesis as a free draft (live streams): consecutive updates decode almost
    the same audio, so the last output usually continues the current one, at the cost of a list lookup.

    Row b proposes its hypothesis's continuation from the current position, up to `max_tokens` at once (it
    is not held to the draft model's k: a proposal costs nothing to make); where the two diverged, what
    followed the newest generated tokens in the hypothesis, or in the row's own prompt and output (the
    previous text a live session passes as the prompt, a phrase said twice, a repetition loop: prompt
    lookup); where none of that finds anything, or it was rejected at the previous step, the fallback
    (the draft model, if any) proposes. A hypothesis proposal is a point mass, so rejection sampling
    stays exact with a one-hot draft distribution.
    """

    free = True

    def __init__(
        self,
        hypotheses: Sequence[Sequence[int] | None],
        fallback: Drafter | None,
        vocabulary_size: int,
        max_tokens: int = 32,
    ) -> None:
        self.hypotheses = [
            list(h) if h is not None else None for h in hypotheses
        ]  # target ids, to end-of-text
        self.fallback = fallback
        self.vocabulary_size = vocabulary_size
        self.max_tokens = max_tokens  # longest proposal from a hypothesis (one verify pass checks it)

    def propose(self, rows: Sequence[Row], num_draft_tokens: Sequence[int]) -> list[Proposal]:
        proposals = [NOTHING] * len(rows)
        fallback_lengths = [0] * len(rows)
        for b, (row, hypothesis) in enumerate(zip(rows, self.hypotheses, strict=True)):
            found = (
                []
                if _just_rejected(row)
                else continuation(
                    hypothesis or [], row.generated, row.sequence[: row.prompt_length], self.max_tokens
                )
            )
            tokens = found[: min(max(num_draft_tokens[b], self.max_tokens), row.budget - 1)]
            if tokens:
                proposals[b] = Proposal(tokens, self._point_masses(tokens, row), HYPOTHESIS)
            elif self.fallback is not None:
                fallback_lengths[b] = num_draft_tokens[b]
        if any(fallback_lengths):
            drafted = self.fallback.propose(rows, fallback_lengths)
            proposals = [d if n else p for p, d, n in zip(proposals, drafted, fallback_lengths, strict=True)]
        return proposals

    def keep(self, rows: Sequence[int]) -> None:
        self.hypotheses = [self.hypotheses[b] for b in rows]
        if self.fallback is not None:
            self.fallback.keep(rows)

    def _point_masses(self, tokens: list[int], row: Row) -> torch.Tensor:
        """(len(tokens), vocab) one-hot draft distributions, for rejection sampling."""
        device = row.generator.device
        probs = torch.zeros(len(tokens), self.vocabulary_size, device=device)
        return probs.scatter_(1, host.send(tokens, device)[:, None], 1.0)


def continuation(
    hypothesis: Sequence[int], generated: Sequence[int], earlier: Sequence[int] = (), limit: int = 32
) -> list[int]:
    """What comes after `generated`: the hypothesis by position while the two agree; else what followed the
    newest MATCH_LENGTH generated tokens where they last appeared in the hypothesis, or else in the text
    decoded so far (`earlier`, the row's prompt, then `generated` itself: a repetition goes on as it went,
    up to `limit` tokens)."""
    hypothesis, generated = list(hypothesis), list(generated)
    position = len(generated)
    if hypothesis[:position] == generated:
        return hypothesis[position:]
    tail = generated[-MATCH_LENGTH:]
    if len(tail) < MATCH_LENGTH:
        return []
    start = _last_start(hypothesis, tail, len(hypothesis) - 1)  # with something after it
    if start is not None:
        return hypothesis[start + MATCH_LENGTH :]
    decoded = list(earlier) + generated
    start = _last_start(decoded, tail, len(decoded) - 1)  # an earlier occurrence, not the tail itself
    return _copied(decoded, start + MATCH_LENGTH, limit) if start is not None else []


def _last_start(text: list[int], tail: list[int], end: int) -> int | None:
    """Where the last occurrence of tail in text[:end] starts (None: nowhere)."""
    for start in range(end - len(tail), -1, -1):
        if text[start : start + len(tail)] == tail:
            return start
    return None


def _copied(text: list[int], source: int, count: int) -> list[int]:
    """`count` tokens continuing text as it went from `source` on, the copy reading its own output
    where it runs past the end (a loop of any period repeats)."""
    copy = list(text)
    for offset in range(count):
        copy.append(copy[source + offset])
    return copy[len(text) :]


def _just_rejected(row: Row) -> bool:
    """The row's last step proposed from the hypothesis and the target rejected part of it."""
    if not row.steps:
        return False
    last = row.steps[-1]
    return last.source == HYPOTHESIS and last.n_accepted < len(last.drafted)


def common_length(first: Sequence[int], second: Sequence[int]) -> int:
    """Length of the longest common prefix of two sequences."""
    return next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
        min(len(first), len(second)),
    )
