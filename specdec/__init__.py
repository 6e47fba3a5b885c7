"""specdec: lossless speculative decoding for OpenAI Whisper."""

from specdec.options import DecodeOptions
from specdec.trace import DecodeResult, Step, TokenRecord
from specdec.transcriber import SpeculativeWhisper, Transcription

__all__ = ["DecodeOptions", "DecodeResult", "SpeculativeWhisper", "Step", "TokenRecord", "Transcription"]
