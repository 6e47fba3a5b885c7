"""The speculative transcript token by token, labelled by what happened to each token, as data and as HTML.

Each kept token carries its trace label (accepted draft token, target correction, bonus token, target
token); before every correction come the draft tokens the target rejected at that step, labelled
`rejected`, so a viewer sees what the draft proposed and where it went wrong. Timestamps are shown in
seconds of the whole file (each token's window says where its 30 s begin).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from specdec.trace import ACCEPTED, BONUS, CORRECTED, TARGET, DecodeResult
from specdec.whisper.tokens import TIMESTAMP_SECONDS

REJECTED = "rejected"  # drafted, refused by the target, not in the output
END_OF_TEXT = "⟨end⟩"

COLOURS = {
    ACCEPTED: "#b7ebc0",
    CORRECTED: "#ffc9a3",
    BONUS: "#b9d7ff",
    TARGET: "#e4e4e7",
    REJECTED: "transparent",
}
DESCRIPTIONS = {
    ACCEPTED: "draft token the target accepted",
    CORRECTED: "target's token where it rejected the draft",
    BONUS: "target's extra token after a fully accepted draft",
    TARGET: "target's token with no draft",
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
    """Kept tokens in order (and end-of-text), with each step's rejected drafts before its correction."""
    steps = {step.index: step for step in result.steps}
    window_starts = {window.index: window.start_seconds for window in result.windows}
    shown = [r for r in result.tokens if r.kept or r.token_id == tokenizer.eos_token_id]
    kept = [record for record in shown if record.kept]
    offsets = [window_starts.get(record.window, 0.0) for record in kept]
    texts = token_texts([record.token_id for record in kept], tokenizer, timestamp_begin, offsets)
    spans, kept_texts = [], iter(texts)
    for record in shown:
        if record.label == CORRECTED:
            step = steps[record.step]
            offset = [window_starts.get(step.window, 0.0)]
            for token_id in step.drafted[step.n_accepted :]:
                draft_text = token_texts([token_id], tokenizer, timestamp_begin, offset)[0]
                spans.append(TokenSpan(draft_text, REJECTED, record.step, None, None))
        text = next(kept_texts) if record.kept else END_OF_TEXT
        spans.append(
            TokenSpan(text, record.label, record.step, record.target_prob, record.draft_prob, record.kept)
        )
    return spans


def highlighted_pairs(spans: list[TokenSpan]) -> list[tuple[str, str]]:
    """(text, label) pairs, the shape gr.HighlightedText and API clients take."""
    return [(span.text, span.label) for span in spans]


def token_texts(
    token_ids: list[int], tokenizer, timestamp_begin: int, offsets: Sequence[float] | None = None
) -> list[str]:
    """Each token's share of the decoded text; a character split over byte tokens goes to its last token.

    Timestamps and other special tokens are shown as ⟨marks⟩ (a draft may propose any of them); a
    timestamp is shown `offsets[i]` seconds later (its window's start in the file), if given.
    """
    texts: list[str] = []
    pending: list[int] = []  # text tokens whose characters are not complete yet
    for i, token_id in enumerate(token_ids):
        if token_id >= timestamp_begin or token_id in tokenizer.all_special_ids:
            offset = 0.0 if offsets is None else offsets[i]
            texts += _flush(pending, tokenizer) + [_mark(token_id, tokenizer, timestamp_begin, offset)]
            pending = []
            continue
        pending.append(token_id)
        text = _decode(pending, tokenizer)
        if text.endswith("\ufffd") and len(pending) < 4:  # an incomplete UTF-8 character so far
            continue
        texts += _flush(pending, tokenizer, text)
        pending = []
    return texts + _flush(pending, tokenizer)


def _flush(pending: list[int], tokenizer, text: str | None = None) -> list[str]:
    """The pending tokens' texts: all of it (`text` if already decoded) on the last one, "" before."""
    if not pending:
        return []
    return [""] * (len(pending) - 1) + [_decode(pending, tokenizer) if text is None else text]


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
    return f'{STYLE}{legend_html()}<div class="specdec-tokens">{"".join(parts)}</div>'


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


def legend_html() -> str:
    """Colour legend for the token labels."""
    items = []
    for label, colour in COLOURS.items():
        swatch = f'<i style="background:{colour}"></i>'
        if label == REJECTED:
            swatch = (
                '<i style="background:transparent;border-color:#c0262d"></i><s style="color:#c0262d">abc</s> '
            )
        items.append(f'<span title="{DESCRIPTIONS[label]}">{swatch}{label}</span>')
    return f'<div class="specdec-legend">{"".join(items)}</div>'
