"""Translation of token ids between a draft's and the target's vocabularies.

Whisper v2-style vocabularies (tiny ... large-v2: 51865 ids, 99 languages) and large-v3's (51866 ids,
100 languages: `<|yue|>` added) share every text token, `<|endoftext|>`, `<|startoftranscript|>` and the
first 99 language tokens; every special token after the language block (`<|translate|>`,
`<|transcribe|>`, `<|notimestamps|>`, all timestamps, ...) sits one id higher in v3. We match tokens by
their string, so any pair of Whisper vocabularies is handled, not only this shift.
"""

from __future__ import annotations

import torch

# A language the draft lacks is replaced in the draft's prompt by its closest relative. The draft only
# proposes, so this costs acceptance at worst, never correctness.
LANGUAGE_FALLBACK = {"yue": "zh"}
# The same special token under another name: v2 tokenizers say <|nocaptions|>, large-v3's <|nospeech|>.
TOKEN_ALIASES = {"<|nocaptions|>": "<|nospeech|>", "<|nospeech|>": "<|nocaptions|>"}


class VocabularyError(ValueError):
    """The two models cannot share text tokens."""


class VocabularyMap:
    """Maps ids draft <-> target; identity when the vocabularies are the same."""

    def __init__(
        self,
        target_vocab: dict[str, int],
        draft_vocab: dict[str, int],
        target_size: int,
        draft_size: int,
        eos_token: str = "<|endoftext|>",
    ) -> None:
        self._check_text_tokens(target_vocab, draft_vocab, eos_token)
        draft_to_target = torch.full((draft_size,), -1, dtype=torch.long)
        for token, draft_id in draft_vocab.items():
            target_id = target_vocab.get(token, target_vocab.get(TOKEN_ALIASES.get(token, ""), -1))
            if draft_id < draft_size and 0 <= target_id < target_size:
                draft_to_target[draft_id] = target_id
        self.draft_to_target = draft_to_target  # (draft_size,), -1 where the target has no such token
        self.target_to_draft = torch.full((target_size,), -1, dtype=torch.long)
        known = draft_to_target >= 0
        self.target_to_draft[draft_to_target[known]] = torch.arange(draft_size)[known]
        self.target_vocab = target_vocab
        self.draft_vocab = draft_vocab
        self.draft_eos_id = draft_vocab[eos_token]
        self.target_size = target_size
        self.is_identity = draft_size == target_size and bool(
            (draft_to_target == torch.arange(draft_size)).all()
        )
        self._known_draft_ids = known.nonzero().squeeze(-1)
        self._known_target_ids = draft_to_target[known]

    @staticmethod
    def _check_text_tokens(target_vocab: dict[str, int], draft_vocab: dict[str, int], eos_token: str) -> None:
        """Text tokens (ids below `<|endoftext|>`) must be the same strings at the same ids."""
        if eos_token not in target_vocab or eos_token not in draft_vocab:
            raise VocabularyError(f"both tokenizers must define {eos_token}; is this a Whisper tokenizer?")
        if target_vocab[eos_token] != draft_vocab[eos_token]:
            raise VocabularyError(
                f"incompatible text vocabularies: {eos_token} is id {target_vocab[eos_token]} in the target "
                f"but {draft_vocab[eos_token]} in the draft"
            )
        num_text = target_vocab[eos_token]
        target_text = {i: t for t, i in target_vocab.items() if i < num_text}
        draft_text = {i: t for t, i in draft_vocab.items() if i < num_text}
        differing = [i for i in range(num_text) if target_text.get(i) != draft_text.get(i)]
        if differing:
            raise VocabularyError(
                f"incompatible text vocabularies: {len(differing)} of {num_text} text tokens differ "
                f"(first at id {differing[0]}: target {target_text.get(differing[0])!r}, "
                f"draft {draft_text.get(differing[0])!r}); speculative decoding needs the same tokenizer"
            )

    def to_target(self, draft_ids: list[int]) -> list[int]:
        """Draft ids -> target ids (-1 for a draft token the target lacks)."""
        return self.draft_to_target[draft_ids].tolist() if not self.is_identity else list(draft_ids)

    def to_draft(self, target_ids: list[int]) -> list[int]:
        """Target ids -> draft ids; a token the draft lacks becomes its end-of-text (it only conditions)."""
        if self.is_identity:
            return list(target_ids)
        draft_ids = self.target_to_draft[target_ids].tolist()
        return [i if i >= 0 else self.draft_eos_id for i in draft_ids]

    def prompt_to_draft(self, target_prompt: list[int]) -> list[int]:
        """The forced decoder prompt in draft ids, with a missing language replaced by its fallback."""
        prompt_ids = set(target_prompt)
        target_tokens = {i: t for t, i in self.target_vocab.items() if i in prompt_ids}
        draft_prompt = []
        for target_id in target_prompt:
            token = target_tokens[target_id]
            token = token if token in self.draft_vocab else TOKEN_ALIASES.get(token, token)
            if token not in self.draft_vocab:
                language = token.strip("<|>")
                token = f"<|{LANGUAGE_FALLBACK.get(language, 'en')}|>"
            draft_prompt.append(self.draft_vocab[token])
        return draft_prompt

    def logits_to_target(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """(n, draft_vocab) logits -> (n, target_vocab), -inf for target tokens the draft cannot propose."""
        if self.is_identity:
            return draft_logits
        target_logits = draft_logits.new_full((draft_logits.shape[0], self.target_size), float("-inf"))
        known_draft = self._known_draft_ids.to(draft_logits.device)
        known_target = self._known_target_ids.to(draft_logits.device)
        target_logits[:, known_target] = draft_logits[:, known_draft]
        return target_logits
