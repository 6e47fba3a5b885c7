"""The speculative transcript token by token, labelled by what happened to each token, as data and as HTML.

Each kept token carries its trace label (accepted draft token, target correction, bonus token, target
token); before every correction come the draft tokens the target rejected at that step, labelled
`rejected`, so a viewer sees what the draft proposed and where it went wrong. Timestamps are shown in
seconds of the whole file (each token's window says where its 30 s begin).

Whisper's tokens are byte-level: a Thai, Devanagari or CJK character or an emoji may be split over
several tokens, none of which is text on its own. The pieces of one character are shown as one span,
coloured by its worst piece (`SEVERITY`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from specdec.trace import ACCEPTED, BONUS, CORRECTED, RELAXED, TARGET, DecodeResult, Step, TokenRecord
from specdec.whisper.tokens import TIMESTAMP_SECONDS

REJECTED = "rejected"  # drafted, refused by the target, not in the output
END_OF_TEXT = "⟨end⟩"
UNFINISHED = "…"  # a rejected draft that stops inside a character: the rest of it was never proposed
# kept labels from best to worst: a character split over tokens of several labels takes the worst one
# (a correction anywhere in it means the draft got it wrong; a target token, that it was not drafted; a
# relaxed one, that the output is not the target's there)
SEVERITY = (ACCEPTED, BONUS, TARGET, RELAXED, CORRECTED)

COLOURS = {
    ACCEPTED: "#b7ebc0",
    CORRECTED: "#ffc9a3",
    BONUS: "#b9d7ff",
    TARGET: "#e4e4e7",
    RELAXED: "#f5d90a",
    REJECTED: "transparent",
}
DESCRIPTIONS = {
    ACCEPTED: "draft token the target accepted",
    CORRECTED: "target's token where it rejected the draft",
    BONUS: "target's extra token after a fully accepted draft",
    TARGET: "target's token with no draft",
    RELAXED: "draft token kept by the lossy acceptance threshold: not the target's own choice",
    REJECTED: "draft token the target rejected (not in the output)",
}
STYLE = """<style>
.specdec-tokens { line-height: 2.1; white-space: pre-wrap; font-size: 1.05rem; }
.specdec-tokens .tok { border-radius: 4px; padding: 1px 1px; color: #111; }
.specdec-tokens .rejected { margin: 0 3px; color: #c0262d; text-decoration: line-through;
  font-size: 0.85em; opacity: 0.85; }
.specdec-tokens .ts { font-family: monospace; font-size: 0.8em; }
.specdec-legend span { display: inline-block; margin-right: 0.9em; font-size: 0.9rem; }
.specdec-legend i { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 3px;
  margin-right: 0.3em; vertical-align: -0.1em; border: 1px solid #999; }
</style>"""


@dataclass(frozen=True)
class TokenSpan:
    """One token as shown: its text, its label and the step and probabilities behind it."""

    text: str
    label: str  # a trace label, or REJECTED
    step: int
    target_prob: float | None
    draft_prob: float | None
    kept: bool = True  # False for end-of-text, shown as ⟨end⟩ but not part of the transcript


def token_spans(result: DecodeResult, tokenizer, timestamp_begin: int) -> list[TokenSpan]:
    """Kept characters in order (and end-of-text), with each step's rejected drafts before its correction.

    A span is one token, or the tokens one character is split over (labelled by the worst of them)."""
    steps = {step.index: step for step in result.steps}
    window_starts = {window.index: window.start_seconds for window in result.windows}
    shown = [r for r in result.tokens if r.kept or r.token_id == tokenizer.eos_token_id]
    kept = [record for record in shown if record.kept]
    offsets = [window_starts.get(record.window, 0.0) for record in kept]
    groups = iter(character_groups([record.token_id for record in kept], tokenizer, timestamp_begin, offsets))
    spans: list[TokenSpan] = []
    pieces: list[TokenRecord] = []  # the kept tokens of the character being read
    for record in shown:
        if not record.kept:  # end-of-text
            if record.label == CORRECTED:
                spans += _rejected_spans(steps[record.step], [], tokenizer, timestamp_begin, window_starts)
            probs = record.target_prob, record.draft_prob
            spans.append(TokenSpan(END_OF_TEXT, record.label, record.step, *probs, kept=False))
            continue
        if not pieces:
            size, text = next(groups)
        pieces.append(record)
        if len(pieces) < size:
            continue
        for index, piece in enumerate(pieces):
            if piece.label == CORRECTED:  # the draft's rejected tokens went from the pieces before it
                before = [earlier.token_id for earlier in pieces[:index]]
                spans += _rejected_spans(steps[piece.step], before, tokenizer, timestamp_begin, window_starts)
        worst = max(pieces, key=lambda piece: SEVERITY.index(piece.label))
        spans.append(TokenSpan(text, worst.label, worst.step, worst.target_prob, worst.draft_prob))
        pieces = []
    return spans


def _rejected_spans(
    step: Step, before: list[int], tokenizer, timestamp_begin: int, window_starts: dict[int, float]
) -> list[TokenSpan]:
    """A step's rejected draft tokens, one span per character. `before`: the kept tokens of a character the
    draft went on inside, shown again with its rejected bytes (the draft proposed another character); a
    draft that stops inside a character ends with UNFINISHED."""
    rejected = list(step.drafted[step.n_accepted :])
    if not rejected:
        return []
    token_ids = before + rejected
    offsets = [window_starts.get(step.window, 0.0)] * len(token_ids)
    texts, read = [], 0
    for size, text in character_groups(token_ids, tokenizer, timestamp_begin, offsets):
        read += size
        if read > len(before):  # not the kept bytes alone (a draft that starts a character of its own)
            texts.append(text)
    if texts[-1].endswith("\ufffd"):
        texts[-1] = texts[-1].removesuffix("\ufffd") + UNFINISHED
    return [TokenSpan(text, REJECTED, step.index, None, None) for text in texts]


def highlighted_pairs(spans: list[TokenSpan]) -> list[tuple[str, str]]:
    """(text, label) pairs, the shape gr.HighlightedText and API clients take."""
    return [(span.text, span.label) for span in spans]


def token_texts(
    token_ids: list[int], tokenizer, timestamp_begin: int, offsets: Sequence[float] | None = None
) -> list[str]:
    """Each token's share of the decoded text; a character split over byte tokens goes to its last token."""
    texts: list[str] = []
    for size, text in character_groups(token_ids, tokenizer, timestamp_begin, offsets):
        texts += [""] * (size - 1) + [text]
    return texts


def character_groups(
    token_ids: list[int], tokenizer, timestamp_begin: int, offsets: Sequence[float] | None = None
) -> list[tuple[int, str]]:
    """The tokens in runs whose text is whole characters: (number of tokens, text) for each run; the texts
    joined are the decoded text.

    A run goes on while its text ends inside a character (however many tokens that takes) and the next
    token continues it; bytes that never make a character are shown as the decoder gives them, "\ufffd",
    as they are in the decoded text. Timestamps and other special tokens are runs of their own, shown as
    ⟨marks⟩ (a draft may propose any of them); a timestamp is shown `offsets[i]` seconds later (its
    window's start in the file), if given.
    """
    groups: list[tuple[int, str]] = []
    pending: list[int] = []  # text tokens whose characters are not complete yet
    for i, token_id in enumerate(token_ids):
        if token_id >= timestamp_begin or token_id in tokenizer.all_special_ids:
            if pending:
                groups.append((len(pending), _decode(pending, tokenizer)))
            offset = 0.0 if offsets is None else offsets[i]
            groups.append((1, _mark(token_id, tokenizer, timestamp_begin, offset)))
            pending = []
            continue
        if pending and not _decode([token_id], tokenizer).startswith("\ufffd"):
            # it starts with a character of its own, so it cannot finish the pending one: bytes left
            # unfinished (a model may end a character early) are a run of their own, "\ufffd"
            groups.append((len(pending), _decode(pending, tokenizer)))
            pending = []
        pending.append(token_id)
        text = _decode(pending, tokenizer)
        if not text.endswith("\ufffd"):  # else an incomplete UTF-8 character so far
            groups.append((len(pending), text))
            pending = []
    if pending:
        groups.append((len(pending), _decode(pending, tokenizer)))
    return groups


def _mark(token_id: int, tokenizer, timestamp_begin: int, offset: float = 0.0) -> str:
    """⟨seconds⟩ for a timestamp (plus offset), ⟨end⟩ for end-of-text, ⟨name⟩ for other special tokens."""
    if token_id >= timestamp_begin:
        return f"⟨{offset + (token_id - timestamp_begin) * TIMESTAMP_SECONDS:.2f}⟩"
    if token_id == tokenizer.eos_token_id:
        return END_OF_TEXT
    return "⟨" + tokenizer.convert_ids_to_tokens(token_id).strip("<|>") + "⟩"


def _decode(token_ids: list[int], tokenizer) -> str:
    return tokenizer.decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def spans_html(spans: list[TokenSpan]) -> str:
    """The tokens as coloured inline HTML with a hover title per token, plus the legend."""
    parts = [_span_html(span) for span in spans]
    relaxed = any(span.label == RELAXED for span in spans)
    return f'{STYLE}{legend_html(relaxed)}<div class="specdec-tokens">{"".join(parts)}</div>'


def _span_html(span: TokenSpan) -> str:
    text = html.escape(span.text)
    if span.label == REJECTED:
        return f'<span class="rejected" title="step {span.step}: {DESCRIPTIONS[REJECTED]}">{text}</span>'
    title = f"step {span.step}: {DESCRIPTIONS[span.label]}"
    if span.target_prob is not None:
        title += f" · target p={span.target_prob:.2f}"
    if span.draft_prob is not None:
        title += f" · draft p={span.draft_prob:.2f}"
    css_class = "tok ts" if text.startswith("⟨") else "tok"
    style = f"background:{COLOURS[span.label]}"
    return f'<span class="{css_class} {span.label}" style="{style}" title="{title}">{text}</span>'


def legend_html(relaxed: bool = False) -> str:
    """Colour legend for the token labels (the lossy threshold's label only where tokens have it)."""
    items = []
    for label, colour in COLOURS.items():
        if label == RELAXED and not relaxed:
            continue
        swatch = f'<i style="background:{colour}"></i>'
        if label == REJECTED:
            swatch = (
                '<i style="background:transparent;border-color:#c0262d"></i><s style="color:#c0262d">abc</s> '
            )
        items.append(f'<span title="{DESCRIPTIONS[label]}">{swatch}{label}</span>')
    return f'<div class="specdec-legend">{"".join(items)}</div>'
