"""Long audio (over 30 s), sequential mode: Whisper's own long-form algorithm, as `generate()` runs it.

`generate()` on features longer than 3000 frames (the feature extractor called with `truncation=False,
padding="longest"`) decodes segment by segment: each 30 s window from `seek`, keeping the tokens up to
the last timestamp pair and seeking to its first timestamp (or past the window after a single final
timestamp). That is the loop `engine.windows.decode_clips` already runs (`split_window`); here it gets
the features of a long file one window at a time, and the draft speculates inside each window. Greedy
output is token for token `generate(features, attention_mask=..., return_timestamps=True, ...)` with the
same options: by default generate()'s (no temperature fallback, no conditioning on previous segments);
with `temperature` a list and its thresholds, a window that fails is decoded again at the next temperature
(`whisper.fallback`); with `condition_on_prev_tokens`, each window's prompt holds the text kept so far.

Memory: the whole file is one float32 16 kHz array (`audio.load_audio` reads it block by block), and
log-mel features exist for one window at a time. The extractor scales every frame against the loudest
frame of the whole input (a floor 8 log10 units below it), so a first pass finds that maximum window by
window; each window's features are then exactly the whole-file features' frames (tests/test_longform.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specdec.audio import SAMPLE_RATE
from specdec.engine.clip_decoding import ClipDecoding, make_generator
from specdec.engine.windows import MakeDrafter, WindowBatch
from specdec.longform import Progress, is_long
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import pair_features
from specdec.whisper.models import ModelPair


def decode_sequential(
    pair: ModelPair,
    waveform: np.ndarray,
    options: DecodeOptions,
    speculative: bool = True,
    progress: Progress | None = None,
    make_drafter: MakeDrafter | None = None,
) -> DecodeResult:
    """A long 16 kHz waveform decoded as generate() decodes it, segment by segment (timestamps forced on,
    as generate() requires for long input); speculative inside each segment.

    The result's windows are its segments' seek table; tokens and steps name their window.
    """
    seconds = len(waveform) / SAMPLE_RATE

    def on_window(clip: ClipDecoding) -> None:
        if progress is not None:
            report_segment(progress, clip, seconds)

    clip = clip_decoding(pair, waveform, options, speculative)
    (result,) = WindowBatch(pair, make_drafter=make_drafter, on_window=on_window).run([clip])
    return result


def clip_decoding(
    pair: ModelPair, waveform: np.ndarray, options: DecodeOptions, speculative: bool = True
) -> ClipDecoding:
    """A 16 kHz waveform of any length as one clip of the window loop, ready to join a batch: over 30 s it
    is decoded as generate() decodes long input (timestamps on, the whole file's features window by
    window)."""
    long = is_long(waveform)
    if long:
        options = dataclasses.replace(options, timestamps=True)
    features = pair_features(pair, waveform, speculative, long=long)
    return ClipDecoding(features, make_generator(options, pair.target.model.device), options, speculative)


def report_segment(progress: Progress, clip: ClipDecoding, seconds: float) -> None:
    """progress(fraction, message) after a window of a `seconds`-long file was folded in."""
    done = min(clip.seek / clip.num_frames, 1.0)
    progress(done, f"segment {clip.window}, {done * seconds:.0f} of {seconds:.0f} s")
