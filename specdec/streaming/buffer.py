"""Where a live buffer may be cut, and what its decodings record: segment ends among a hypothesis' tokens,
the quietest pause in its audio, timestamps moved with a cut, and each token's proposal source."""

from __future__ import annotations

import numpy as np

from specdec.audio import SAMPLE_RATE
from specdec.trace import KEPT_DRAFT, DecodeResult
from specdec.whisper.tokens import TIMESTAMP_SECONDS

TARGET_SOURCE = "target"  # a token's source: the target's own (correction, bonus, or no proposal)


def segment_ends(
    tokens: list[int], windows: list[int], timestamp_begin: int, latest: float = float("inf")
) -> list[tuple[int, float]]:
    """(index after, seconds) of each segment-closing timestamp of the first window in `tokens` at or
    before `latest` seconds, in order: the tokens up to one are whole segments."""
    found = []
    for index in range(1, len(tokens)):
        closes = tokens[index] >= timestamp_begin and tokens[index - 1] < timestamp_begin
        in_first_window = index >= len(windows) or windows[index] == 0
        seconds = (tokens[index] - timestamp_begin) * TIMESTAMP_SECONDS
        if closes and in_first_window and seconds <= latest:
            found.append((index + 1, seconds))
    return found


def last_segment_end(
    tokens: list[int], windows: list[int], timestamp_begin: int, latest: float = float("inf")
) -> tuple[int, float] | None:
    """The last of `segment_ends`, if any."""
    ends = segment_ends(tokens, windows, timestamp_begin, latest)
    return ends[-1] if ends else None


def quietest_pause(waveform: np.ndarray, start: int, stop: int, frame_seconds: float = 0.2) -> int:
    """A sample in [start, stop) in the quietest `frame_seconds` (RMS), at the quietest 20 ms within it: a
    gap between words, the longest pause where several are silent."""
    frame = round(frame_seconds * SAMPLE_RATE)
    if stop - start <= frame:
        return max(stop, 1)
    quietest = start + quietest_window(waveform[start:stop], frame)
    fine = round(0.02 * SAMPLE_RATE)
    return quietest + quietest_window(waveform[quietest : quietest + frame], fine) + fine // 2


def quietest_window(waveform: np.ndarray, size: int) -> int:
    """Start of the `size` samples of least energy."""
    return int(np.argmin(np.convolve(np.square(waveform, dtype=np.float64), np.ones(size), mode="valid")))


def shift_timestamps(token_ids: list[int], offset: int, timestamp_begin: int) -> list[int]:
    """Timestamp tokens moved by `offset` steps (dropping any that would go negative)."""
    shifted = []
    for token in token_ids:
        if token >= timestamp_begin:
            token += offset
            if token < timestamp_begin:
                continue
        shifted.append(token)
    return shifted


def token_sources(result: DecodeResult) -> tuple[str, ...]:
    """Per kept token: `reused` or `draft` for an accepted proposal, `target` for the target's own."""
    sources = {step.index: step.source for step in result.steps}
    return tuple(
        sources[record.step] if record.label in KEPT_DRAFT else TARGET_SOURCE
        for record in result.tokens
        if record.kept
    )


def proposal_counts(result: DecodeResult) -> dict[str, dict[str, int]]:
    """Per proposal source: target passes it drafted for, tokens drafted, tokens accepted."""
    counts: dict[str, dict[str, int]] = {}
    for step in result.steps:
        if not step.drafted:
            continue
        entry = counts.setdefault(step.source, {"steps": 0, "drafted": 0, "accepted": 0})
        entry["steps"] += 1
        entry["drafted"] += len(step.drafted)
        entry["accepted"] += step.n_accepted
    return counts
