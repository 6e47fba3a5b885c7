"""The file timeline shows a clip's parts, not one flat block: each target pass over the audio of its
tokens, placed by the times the trace has (timestamp tokens, word times) and by token count between them;
on a planted 10 s clip decoded in one window."""

from __future__ import annotations

import pytest

from specdec.app import plots
from specdec.trace import (
    ACCEPTED,
    BONUS,
    CORRECTED,
    DRAFT_MODEL,
    TARGET,
    DecodeResult,
    Step,
    TokenRecord,
    Window,
)

BEGIN = 1000  # the planted vocabulary's <|0.00|>; <|4.00|> is BEGIN + 200
EOT = 999
# (token, step) of one window: <|0.00|> a b | c <|4.00|> <|4.00|> | d e <|10.00|> <|endoftext|>
TOKENS = [(BEGIN, 0), (1, 0), (2, 0), (3, 1), (BEGIN + 200, 1), (BEGIN + 200, 1)]
TOKENS += [(4, 2), (5, 2), (BEGIN + 500, 2), (EOT, 2)]


def planted(token_spans=None) -> DecodeResult:
    steps = (
        Step(0, 0, 0, DRAFT_MODEL, (BEGIN, 1, 2), 2, 2),
        Step(1, 0, 1, DRAFT_MODEL, (3, 7), 1, BEGIN + 200),
        Step(2, 0, 2, DRAFT_MODEL, (4, 5, BEGIN + 500, EOT), 4, None),
    )
    labels = [ACCEPTED, ACCEPTED, BONUS, ACCEPTED, CORRECTED, TARGET, ACCEPTED, ACCEPTED, ACCEPTED, ACCEPTED]
    records = tuple(
        TokenRecord(token, label, step, 0, 0.9, 0.8, kept=token != EOT)
        for (token, step), label in zip(TOKENS, labels, strict=True)
    )
    kept = tuple(token for token, _ in TOKENS if token != EOT)
    windows = (Window(0, 0.0, 10.0),)
    return DecodeResult(kept, (), "en", records, steps, (), (), 1.0, windows, token_spans=token_spans)


def test_each_target_pass_spans_its_tokens_audio():
    found = plots.pass_spans(planted(), 10.0, BEGIN)
    assert [(step.index, start, stop) for step, start, stop in found] == [
        (0, 0.0, pytest.approx(8 / 3)),  # <|0.00|> then a and b share 0-4 s with c
        (1, pytest.approx(8 / 3), 4.0),
        (2, 4.0, 10.0),
    ]
    figure = plots.windows_figure(planted(), 10.0, BEGIN)
    window, passes = figure.data
    assert list(window.width) == [10.0] and passes.name == "target passes"
    assert list(passes.y) == [3, 3, 4] and list(passes.x) == pytest.approx([0.0, 8 / 3, 4.0])


def test_word_times_place_the_passes_where_the_trace_has_them():
    spans = ((0.0, 0.0), (0.0, 1.0), (1.0, 3.5), (3.5, 3.9), (3.9, 3.9), (3.9, 3.9), (4.0, 6.0), (6.0, 9.0))
    spans += ((9.0, 9.0),)
    found = plots.pass_spans(planted(spans), 10.0, BEGIN)
    assert [(start, stop) for _, start, stop in found] == [
        (0.0, 3.5),
        (3.5, 4.0),
        (4.0, 10.0),
    ]  # a gap: before
