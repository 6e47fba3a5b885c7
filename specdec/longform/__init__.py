"""Long audio (over 30 s, up to 4 hours), in two modes: `sequential` (Whisper's own long-form algorithm,
generate()'s output) and `chunked` (overlapping 30 s chunks decoded as one batch, merged as transformers'
ASR pipeline merges them)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specdec.audio import MAX_SECONDS, SAMPLE_RATE

# (fraction done in [0, 1], a short message); long-form entry points call it as the work advances
Progress = Callable[[float, str], None]
LONG_FORM_MODES = ("sequential", "chunked")


def check_mode(long_form: str) -> None:
    if long_form not in LONG_FORM_MODES:
        raise ValueError(f"long_form must be one of {LONG_FORM_MODES}, not {long_form!r}")


def is_long(waveform: np.ndarray) -> bool:
    """More than one 30 s window of 16 kHz audio: generate() would take its long-form path."""
    return len(waveform) > MAX_SECONDS * SAMPLE_RATE
