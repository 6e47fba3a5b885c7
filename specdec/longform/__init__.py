"""Long audio (over 30 s, up to 4 hours), in two modes: `sequential` (Whisper's own long-form algorithm,
generate()'s output) and `chunked` (overlapping 30 s chunks decoded as one batch, merged as transformers'
ASR pipeline merges them)."""

from __future__ import annotations

import numpy as np

from specdec.audio import MAX_SECONDS, SAMPLE_RATE
from specdec.options import LONG_FORM_MODES, Progress

__all__ = ["LONG_FORM_MODES", "Progress", "is_long"]


def is_long(waveform: np.ndarray) -> bool:
    """More than one 30 s window of 16 kHz audio: generate() would take its long-form path."""
    return len(waveform) > MAX_SECONDS * SAMPLE_RATE
