"""Translation of token ids between a draft's and the target's vocabularies, by token string.

Whisper's vocabularies differ in three ways, all handled here:
- v2-style multilingual (tiny ... large-v2: 51865 ids) and large-v3's (51866: `<|yue|>` added) share every
  text token, `<|endoftext|>`, `<|startoftranscript|>` and the first 99 languages; every special token
  after the language block sits one id higher in v3;
- English-only models (tiny.en ... medium.en) use GPT-2's byte-level BPE: 50256 text tokens whose ids
  differ from the multilingual ones (about 29k strings are common to both), `<|endoftext|>` at 50256 and
  every special one id lower than in v2;
- an English-only model's own prompt has no language or task token (`<|startoftranscript|>` then
  `<|notimestamps|>` unless timestamps are on): `prompt_to_draft` gives the draft its own prompt.

Target -> draft (the draft's context): a token with the same string in the draft's vocabulary maps to it;
a text token the draft lacks is spelled out in draft tokens (its byte-level string re-tokenised with the
draft's BPE), so the draft always reads the whole text. Draft -> target (proposals): a draft token with no
target counterpart is never proposed (`logits_to_target` gives it no mass; the draft's distribution over
the rest is renormalised, so speculative sampling stays exact).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.models.whisper.tokenization_whisper import LANGUAGES

# A language the draft lacks is replaced in the draft's prompt by its closest relative. The draft only
# proposes, so this costs acceptance at worst, never correctness.
LANGUAGE_FALLBACK = {"yue": "zh"}
# The same special token under another name: v2 tokenizers say <|nocaptions|>, large-v3's <|nospeech|>.
TOKEN_ALIASES = {"<|nocaptions|>": "<|nospeech|>", "<|nospeech|>": "<|nocaptions|>"}
END_OF_TEXT = "<|endoftext|>"
LANGUAGE_TOKENS = frozenset(f"<|{code}|>" for code in LANGUAGES)
TASK_TOKENS = frozenset(("<|transcribe|>", "<|translate|>"))
NUM_BYTE_SYMBOLS = 256  # a byte-level BPE vocabulary has one single-character token per byte

Spell = Callable[[str], list[int]]  # a byte-level token string -> draft ids (the draft's BPE on it)


class VocabularyError(ValueError):
    """The two models cannot share text."""


class VocabularyMap:
    """Maps ids draft <-> target; identity when the vocabularies are the same."""

    def __init__(
        self,
        target_vocab: dict[str, int],
        draft_vocab: dict[str, int],
        target_size: int,
        draft_size: int,
        spell: Spell | None = None,
        draft_multilingual: bool = True,
    ) -> None:
        """spell: the draft's BPE, for target text tokens it lacks; draft_multilingual: False for an
        English-only draft (its prompt then has no language or task token)."""
        for name, vocab in (("target", target_vocab), ("draft", draft_vocab)):
            if END_OF_TEXT not in vocab:
                raise VocabularyError(f"the {name} tokenizer has no {END_OF_TEXT}: not a Whisper tokenizer")
        draft_to_target = torch.full((draft_size,), -1, dtype=torch.long)
        for token, draft_id in draft_vocab.items():
            alias = TOKEN_ALIASES.get(token)  # (multilingual vocabularies have a "" token: never look it up)
            target_id = target_vocab.get(token, target_vocab.get(alias, -1) if alias else -1)
            if draft_id < draft_size and 0 <= target_id < target_size:
                draft_to_target[draft_id] = target_id
        self.draft_to_target = draft_to_target  # (draft_size,), -1 where the target has no such token
        self.target_to_draft = torch.full((target_size,), -1, dtype=torch.long)  # -1: none of that string
        known = draft_to_target >= 0
        self.target_to_draft[draft_to_target[known]] = torch.arange(draft_size)[known]
        self.target_vocab = target_vocab
        self.draft_vocab = draft_vocab
        self.target_tokens = {i: token for token, i in target_vocab.items()}
        self.draft_eos_id = draft_vocab[END_OF_TEXT]
        self.num_target_text = target_vocab[END_OF_TEXT]  # text tokens are the ids below <|endoftext|>
        self.target_size = target_size
        self.draft_multilingual = draft_multilingual
        self.is_identity = draft_size == target_size and bool(
            (draft_to_target == torch.arange(draft_size)).all()
        )
        self._single = self.target_to_draft.tolist()
        self._spell = spell
        self._spellings: dict[int, tuple[int, ...]] = {}
        # each target id's column in the draft's logits, or draft_size: a column of -inf appended to them
        self._draft_columns = torch.where(self.target_to_draft >= 0, self.target_to_draft, draft_size)
        self._check_spelling()

    @classmethod
    def from_tokenizers(
        cls, target_tokenizer, draft_tokenizer, target_size: int, draft_size: int, draft_multilingual: bool
    ) -> VocabularyMap:
        """The map between two transformers Whisper tokenizers, the draft's BPE spelling what it lacks."""
        draft_bpe = draft_tokenizer.backend_tokenizer.model
        return cls(
            target_tokenizer.get_vocab(),
            draft_tokenizer.get_vocab(),
            target_size,
            draft_size,
            spell=lambda token: [piece.id for piece in draft_bpe.tokenize(token)],
            draft_multilingual=draft_multilingual,
        )

    def _check_spelling(self) -> None:
        """Text tokens the draft lacks need the draft's BPE, and a byte-level one (every byte a token)."""
        lacking = int((self.target_to_draft[: self.num_target_text] < 0).sum())
        if not lacking:
            return
        if self._spell is None:
            raise VocabularyError(
                f"{lacking} target text tokens have no draft token and no way to be spelled"
            )
        single_characters = sum(len(token) == 1 for token in self.draft_vocab)
        if single_characters < NUM_BYTE_SYMBOLS:
            raise VocabularyError(
                f"{lacking} target text tokens have no draft token, and the draft's tokenizer is not "
                f"byte-level BPE (it has {single_characters} single-character tokens, not {NUM_BYTE_SYMBOLS})"
            )

    def to_target(self, draft_ids: list[int]) -> list[int]:
        """Draft ids -> target ids (-1 for a draft token the target lacks)."""
        return self.draft_to_target[draft_ids].tolist() if not self.is_identity else list(draft_ids)

    def to_draft(self, target_ids: list[int]) -> list[int]:
        """Target ids -> draft ids: the same token where the draft has it, else the token spelled out in
        draft tokens (a special token the draft lacks is left out: it only conditions the draft)."""
        if self.is_identity:
            return list(target_ids)
        draft_ids: list[int] = []
        for target_id in target_ids:
            single = self._single[target_id]
            if single >= 0:
                draft_ids.append(single)
            else:
                draft_ids.extend(self.spelling(target_id))
        return draft_ids

    def spelling(self, target_id: int) -> tuple[int, ...]:
        """The draft tokens that spell a target text token the draft lacks (memoised); () for a special."""
        if target_id not in self._spellings:
            is_text = target_id < self.num_target_text and self._spell is not None
            token = self.target_tokens.get(target_id, "")
            self._spellings[target_id] = tuple(self._spell(token)) if is_text else ()
        return self._spellings[target_id]

    def prompt_to_draft(self, target_prompt: list[int]) -> list[int]:
        """The target's forced prompt as the draft's own prompt: the same tokens in draft ids, without the
        language and task tokens for an English-only draft, a language the draft lacks replaced by its
        fallback, and previous text (after `<|startofprev|>`) mapped like generated text."""
        draft_prompt: list[int] = []
        for target_id in target_prompt:
            token = self.target_tokens[target_id]
            if target_id < self.num_target_text:
                draft_prompt += self.to_draft([target_id])
                continue
            if token in LANGUAGE_TOKENS | TASK_TOKENS and not self.draft_multilingual:
                continue
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
        # one gather (a third of the time of filling -inf and writing the known columns, per draft token)
        padded = torch.nn.functional.pad(draft_logits, (0, 1), value=float("-inf"))
        if self._draft_columns.device != draft_logits.device:  # moved once, not copied every draft step
            self._draft_columns = self._draft_columns.to(draft_logits.device)
        return padded.index_select(-1, self._draft_columns)
