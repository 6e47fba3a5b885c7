"""The Compare badge says when speculation lost, and why, from planted traces: a draft rarely accepted in
Spanish, a short clip whose encoders took the time, a draft that cost more than it saved, a draft that
proposed nothing; nothing is said when speculation won."""

from __future__ import annotations

import html

from specdec.api import Transcription
from specdec.app import views
from specdec.app.views import Comparison
from specdec.options import DecodeOptions
from specdec.trace import (
    DRAFT_ENCODER,
    DRAFT_MODEL,
    NO_PROPOSAL,
    TARGET_ENCODER,
    DecodeResult,
    Encoding,
    Pass,
    Step,
)


def planted(
    steps: list[tuple[int, int]],
    draft_seconds: float,
    verify_seconds: float,
    encoders: dict[str, float],
    total: float,
    language: str = "en",
) -> DecodeResult:
    """A decoding of (drafted, accepted) per target pass, its seconds spread evenly over the passes."""
    records = tuple(
        Step(i, 0, i, DRAFT_MODEL if drafted else NO_PROPOSAL, tuple(range(drafted)), accepted, 1)
        for i, (drafted, accepted) in enumerate(steps)
    )
    n = len(steps)
    passes = tuple(Pass(i, 1, 0.0, draft_seconds / n, verify_seconds / n) for i in range(n))
    encodings = tuple(Encoding(i, model, 1, s) for i, (model, s) in enumerate(encoders.items()))
    return DecodeResult((), (), language, (), records, passes, encodings, total)


def compared(baseline: DecodeResult, speculative: DecodeResult) -> Comparison:
    return Comparison(
        Transcription("a", "", baseline), Transcription("a", "", speculative), DecodeOptions(), True
    )


ALONE = planted([(0, 0)] * 20, 0.0, 1.0, {TARGET_ENCODER: 0.5}, 1.6, "es")  # 20 passes, 1.1 s decoding


def test_a_draft_rarely_accepted_is_named_with_its_language():
    """30 tokens drafted, 5 accepted (17%): 18 passes instead of 20, the draft's 0.9 s not paid back."""
    steps = [(3, 1)] * 5 + [(3, 0)] * 5 + [(0, 0)] * 8
    speculative = planted(steps, 0.9, 0.95, {TARGET_ENCODER: 0.5}, 2.4, "es")
    line = views.slower_line(compared(ALONE, speculative))
    assert line == (
        "Slower here (0.67x): the draft's tokens were accepted 17% of the time (2 of 20 target passes "
        "saved): the draft does not know Spanish well."
    )
    assert line in html.unescape(views.verdict_html(compared(ALONE, speculative)))


def test_a_short_clip_whose_encoders_took_the_time():
    """The decoding 0.4 s -> 0.3 s, but a draft encoder of its own adds 0.2 s to the target's 0.6 s."""
    baseline = planted([(0, 0)] * 10, 0.0, 0.4, {TARGET_ENCODER: 0.6}, 1.0)
    speculative = planted([(4, 4)] * 2, 0.1, 0.2, {TARGET_ENCODER: 0.6, DRAFT_ENCODER: 0.2}, 1.1)
    assert views.slower_line(compared(baseline, speculative)) == (
        "Slower here (0.91x): the decoding was faster, but the clip is short and the encoders (the draft has "
        "an encoder of its own) took 73% of the run (0.80 s against the target alone's 0.60 s), which no "
        "draft shortens."
    )


def test_a_draft_that_cost_more_than_it_saved():
    """80% accepted, 8 passes instead of 20, but the draft's 1.0 s is more than the 0.6 s it saved."""
    steps = [(5, 4)] * 3 + [(0, 0)] * 5
    speculative = planted(steps, 1.0, 0.4, {TARGET_ENCODER: 0.5}, 1.95, "es")
    line = views.slower_line(compared(ALONE, speculative))
    assert line == (
        "Slower here (0.82x): the draft's passes took 1.00 s, more than the 0.60 s of target passes they "
        "saved (80% of its tokens accepted, 12 of 20 target passes saved)."
    )


def test_a_draft_that_proposed_nothing():
    speculative = planted([(0, 0)] * 20, 0.0, 1.05, {TARGET_ENCODER: 0.5}, 1.7, "th")
    assert views.slower_line(compared(ALONE, speculative)).startswith(
        "Slower here (0.94x): the draft proposed nothing"
    )


def test_nothing_is_said_when_speculation_won():
    speculative = planted([(5, 5)] * 4, 0.2, 0.3, {TARGET_ENCODER: 0.5}, 1.0, "es")
    assert views.slower_line(compared(ALONE, speculative)) == ""
    assert "Slower" not in views.verdict_html(compared(ALONE, speculative))
