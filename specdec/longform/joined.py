"""Decodings of pieces of one file joined into the file's trace: each piece's steps and windows numbered
after the pieces before it and moved to where it lies in the file; every pass and encoding once (one
clock numbers them, and the pieces of a batch share theirs). Used by the chunked mode's merge and by
`speech` (only the speech decoded)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from specdec.trace import DecodeResult, Segment, Step, TokenRecord, Window


def moved_steps(result: DecodeResult, first_step: int, first_window: int) -> list[Step]:
    """A piece's steps numbered after the first_step steps and first_window windows before it."""
    return [
        dataclasses.replace(step, index=first_step + step.index, window=first_window + step.window)
        for step in result.steps
    ]


def moved_windows(
    result: DecodeResult,
    first_window: int,
    start_seconds: float,
    audio_seconds: float,
    chunk: int | None = None,
) -> list[Window]:
    """A piece's windows in the file: starting start_seconds in, its padding past audio_seconds left out
    (what the no-speech rule found in each kept)."""
    return [
        dataclasses.replace(
            window,
            index=first_window + window.index,
            start_seconds=round(start_seconds + window.start_seconds, 2),
            seconds=round(max(0.0, min(window.seconds, audio_seconds - window.start_seconds)), 2),
            chunk=chunk,
        )
        for window in result.windows
    ]


def joined(
    results: Sequence[DecodeResult],
    token_ids: tuple[int, ...],
    tokens: list[TokenRecord],
    steps: list[Step],
    windows: list[Window],
    segments: tuple[Segment, ...] = (),
) -> DecodeResult:
    """The file's trace from its pieces' records, with every pass and encoding of theirs once."""
    passes = {p.index: p for result in results for p in result.passes}
    encodings = {e.index: e for result in results for e in result.encodings}
    return DecodeResult(
        token_ids=token_ids,
        prompt_ids=results[0].prompt_ids,
        language=results[0].language,
        tokens=tuple(tokens),
        steps=tuple(steps),
        passes=tuple(passes[i] for i in sorted(passes)),
        encodings=tuple(encodings[i] for i in sorted(encodings)),
        total_seconds=0.0,
        windows=tuple(windows),
        segments=segments,
        acceptance_threshold=results[0].acceptance_threshold,
    )
