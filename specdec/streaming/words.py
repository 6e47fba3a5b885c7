"""A live hypothesis as timed words, and the rule that commits them: LocalAgreement over words.

Each decoded update's hypothesis is split into words as word timestamps split them (transformers'
grouping: punctuation joined to its word; characters in languages written without spaces), each timed in
stream seconds by the target's own alignment heads (`whisper.word_times`) and scored by the least target
probability of its tokens. The words after those already committed are the hypothesis' *tail*
(`tail_start`: found by spelling near the last committed word, else by time). Of the newest tail, the first
words that the tails of the last two hypotheses spell alike are committed (`agreed_length`), a word the
target was unsure of (under `confident`) only once three agree, and never the newest hypothesis' last word:
its audio may end inside it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specdec import internals
from specdec.trace import DecodeResult

SAME_WORD_SECONDS = 0.5  # the newest hypothesis' copy of a committed word starts within this of it
MATCHED_WORDS = 5  # the longest run of committed words looked for in the newest hypothesis
MATCHED_SECONDS = 3.0  # how far a run of two or more may have moved (Whisper times unheard words late)
SENTENCE_ENDS = (".", "?", "!", "。", "？", "！")


@dataclass(frozen=True)
class StreamWord:
    """One word of a hypothesis, in stream time."""

    text: str  # as its tokens spell it, its leading space kept: words join into the text
    token_ids: tuple[int, ...]  # its text tokens (target ids)
    start: float  # stream seconds
    end: float
    probability: float  # the least target probability among its tokens
    position: int  # index of its last token in the hypothesis (timestamps and all)

    @property
    def key(self) -> str:
        """What agreement compares: its letters and digits, lower case (punctuation and case left out:
        Whisper writes "Americans." at the end of a buffer and "Americans," once it hears more)."""
        kept = "".join(c for c in self.text.lower() if unicodedata.category(c)[0] in "LN")
        return kept or self.text.strip()

    @property
    def middle(self) -> float:
        return (self.start + self.end) / 2


def hypothesis_words(tokenizer, result: DecodeResult, offset: float) -> list[StreamWord]:
    """The words of a decoding with word timestamps (`result.token_spans`), `offset` seconds added: the
    buffer's start in the stream."""
    first_special = tokenizer.eos_token_id  # Whisper's specials and timestamps follow its text ids
    kept = [record for record in result.tokens if record.kept]
    text = [i for i, token in enumerate(result.token_ids) if token < first_special]
    if not text:
        return []
    _, groups, indices = internals.combine_tokens_into_words(
        tokenizer, [result.token_ids[i] for i in text], result.language
    )
    spans = result.token_spans
    found = []
    for tokens, group in zip(groups, indices, strict=True):
        first, last = text[group[0]], text[group[-1]]
        found.append(
            StreamWord(
                text=tokenizer.decode(tokens),
                token_ids=tuple(tokens),
                start=spans[first][0] + offset,
                end=spans[last][1] + offset,
                probability=min(kept[text[i]].target_prob for i in group),
                position=last,
            )
        )
    return found


def tail_start(words: Sequence[StreamWord], committed: Sequence[StreamWord]) -> int:
    """Index of the first of `words` after the `committed` ones: just past the newest hypothesis' copy of
    them (`committed_copy`), else the first word that starts after the last committed word ends."""
    if not committed:
        return 0
    copy = committed_copy(words, committed)
    if copy is not None:
        return copy
    return next((i for i, word in enumerate(words) if word.middle > committed[-1].end), len(words))


def committed_copy(words: Sequence[StreamWord], committed: Sequence[StreamWord]) -> int | None:
    """Index just past the hypothesis' copy of the last committed words: the longest run of them it spells
    alike (up to MATCHED_WORDS), ending near where the last committed word starts (within
    SAME_WORD_SECONDS for one word, MATCHED_SECONDS for more; the nearest if several); None where it has
    none (it hears the committed words otherwise, or not at all)."""
    last = committed[-1]
    best: tuple[tuple[int, float], int] | None = None
    for i, word in enumerate(words):
        longest, run = min(MATCHED_WORDS, i + 1, len(committed)), 0
        while run < longest and words[i - run].key == committed[-1 - run].key:
            run += 1
        distance = abs(word.start - last.start)
        if run and distance <= (SAME_WORD_SECONDS if run == 1 else MATCHED_SECONDS):
            best = max(best or ((0, 0.0), 0), ((run, -distance), i))
    return None if best is None else best[1] + 1


def retimed(committed: Sequence[StreamWord], words: Sequence[StreamWord], start: int) -> list[StreamWord]:
    """The committed words timed as the newest hypothesis times them, where it spells them alike (its
    words before `start`, matched from the end); their text stays as committed."""
    found = list(committed)
    for back in range(1, min(len(found), start) + 1):
        newest = words[start - back]
        if newest.key != found[-back].key:
            break
        found[-back] = replace(found[-back], start=newest.start, end=newest.end, position=newest.position)
    return found


def agreed_length(tails: Sequence[Sequence[StreamWord]], confident: float, limit: int) -> int:
    """How many words of the newest tail (tails[0]; the older hypotheses' after it) to commit, at most
    `limit`: those that the newest two tails spell alike from their start, a word the newest gave less
    than `confident` probability only where the third agrees too."""
    newest = tails[0]
    agreeing = list(tails[1:3])
    count = 0
    while count < min(limit, len(newest)):
        word = newest[count]
        agreeing = [tail for tail in agreeing if len(tail) > count and tail[count].key == word.key]
        needed = 1 if word.probability >= confident else 2
        if len(agreeing) < needed:
            break
        count += 1
    return count


def sentence_end(word: StreamWord) -> bool:
    """The word ends a sentence as Whisper punctuates it."""
    return word.text.rstrip().endswith(SENTENCE_ENDS)


def words_text(words: Sequence[StreamWord]) -> list[int]:
    """The words' text tokens, in order."""
    return [token for word in words for token in word.token_ids]
