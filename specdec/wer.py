"""Word error rate against a reference text, with Whisper's text normaliser and the word alignment.

jiwer does the alignment and counting; transformers' Whisper normalisers do the normalising (the
English one with Whisper's spelling map, vendored in assets/ because it otherwise comes with a hub
checkpoint).
"""

from __future__ import annotations

import functools
import html
import json
from dataclasses import dataclass
from pathlib import Path

import jiwer
from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

SPELLING_MAP = Path(__file__).parent / "whisper" / "assets" / "english-normalizer.json"


@dataclass(frozen=True)
class AlignedWord:
    """One position of the alignment: the reference word, the hypothesis word and what happened."""

    kind: str  # "equal", "substitute", "delete" (missing from the hypothesis) or "insert" (extra in it)
    reference: str | None
    hypothesis: str | None


@dataclass(frozen=True)
class WordErrors:
    """WER of one transcript against a reference, after normalising both."""

    wer: float
    substitutions: int
    deletions: int
    insertions: int
    num_reference_words: int
    alignment: tuple[AlignedWord, ...]


@functools.cache
def _english_normalizer() -> EnglishTextNormalizer:
    return EnglishTextNormalizer(json.loads(SPELLING_MAP.read_text(encoding="utf-8")))


def normalize(text: str, language: str | None) -> str:
    """Whisper's normaliser: the English one for English, the basic one for other languages."""
    if language in (None, "en", "english"):
        return _english_normalizer()(text)
    return BasicTextNormalizer()(text)


def word_errors(reference: str, hypothesis: str, language: str | None = "en") -> WordErrors:
    """Normalise both texts and align their words (raises ValueError for an empty reference)."""
    reference_words = normalize(reference, language).split()
    hypothesis_words = normalize(hypothesis, language).split()
    if not reference_words:
        raise ValueError("The reference text is empty after normalisation.")
    output = jiwer.process_words(" ".join(reference_words), " ".join(hypothesis_words) or "")
    return WordErrors(
        wer=output.wer,
        substitutions=output.substitutions,
        deletions=output.deletions,
        insertions=output.insertions,
        num_reference_words=len(reference_words),
        alignment=tuple(_aligned_words(output.alignments[0], reference_words, hypothesis_words)),
    )


def _aligned_words(chunks: list, reference: list[str], hypothesis: list[str]) -> list[AlignedWord]:
    words = []
    for chunk in chunks:
        ref = reference[chunk.ref_start_idx : chunk.ref_end_idx]
        hyp = hypothesis[chunk.hyp_start_idx : chunk.hyp_end_idx]
        for i in range(max(len(ref), len(hyp))):
            words.append(
                AlignedWord(chunk.type, ref[i] if i < len(ref) else None, hyp[i] if i < len(hyp) else None)
            )
    return words


def alignment_html(errors: WordErrors, max_words: int = 400) -> str:
    """The alignment as inline HTML: equal words plain, substitutions as ref→hyp, deletions struck; the
    first max_words positions, then how many more there are (the counts cover them all)."""
    parts = []
    for word in errors.alignment[:max_words]:
        ref, hyp = html.escape(word.reference or ""), html.escape(word.hypothesis or "")
        if word.kind == "equal":
            parts.append(f'<span class="wer-equal">{hyp}</span>')
        elif word.kind == "substitute":
            parts.append(f'<span class="wer-sub" title="substitution"><del>{ref}</del>→<b>{hyp}</b></span>')
        elif word.kind == "delete":
            parts.append(
                f'<span class="wer-del" title="deleted: missing from the transcript"><del>{ref}</del></span>'
            )
        else:
            parts.append(f'<span class="wer-ins" title="inserted: not in the reference"><b>+{hyp}</b></span>')
    if len(errors.alignment) > max_words:
        parts.append(f"<i>… and {len(errors.alignment) - max_words:,} more words</i>")
    return " ".join(parts)


@dataclass(frozen=True)
class LossyCost:
    """What a lossy decoding (an acceptance threshold) changed against the target alone's output."""

    token_edits: int  # insertions, deletions and substitutions that turn the target's ids into its ids
    num_target_tokens: int
    wer: float | None  # its words against the target alone's, normalised; None: the target said nothing

    def describe(self) -> str:
        """One line: what it cost."""
        if not self.token_edits:
            return "the same tokens as the target alone here"
        wer = "" if self.wer is None else f", WER {self.wer:.1%} against the target alone's words"
        return f"{self.token_edits} token edits from the target alone's {self.num_target_tokens}{wer}"


def lossy_cost(
    target_ids: list[int], target_text: str, token_ids: list[int], text: str, language: str | None
) -> LossyCost:
    """How far a lossy decoding's output (token_ids, text) is from the target alone's."""
    edits = 0
    if target_ids or token_ids:
        # jiwer aligns any tokens: the ids written as words ("_" keeps an empty side a valid input)
        as_words = [" ".join(map(str, ids)) or "_" for ids in (target_ids, token_ids)]
        counted = jiwer.process_words(*as_words)
        edits = counted.substitutions + counted.deletions + counted.insertions
    try:
        wer = word_errors(target_text, text, language).wer
    except ValueError:  # the target alone's text is empty
        wer = None
    return LossyCost(edits, len(target_ids), wer)
