"""specdec: lossless speculative decoding for OpenAI Whisper.

The public names are imported on first use, so that `import specdec.engine.acceptance` (pure tensor code)
does not pay for importing transformers.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "SpeculativeWhisper": "specdec.api",
    "Transcription": "specdec.api",
    "DecodeOptions": "specdec.options",
    "SpeculativeConfig": "specdec.options",
    "TranscribeOptions": "specdec.options",
    "DecodeResult": "specdec.trace",
    "Step": "specdec.trace",
    "TokenRecord": "specdec.trace",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'specdec' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
