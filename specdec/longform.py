"""Long audio (over 30 s), sequential mode: Whisper's own long-form algorithm, as `generate()` runs it.

`generate()` on features longer than 3000 frames (the feature extractor called with `truncation=False,
padding="longest"`) decodes segment by segment: each 30 s window from `seek`, keeping the tokens up to
the last timestamp pair and seeking to its first timestamp (or past the window after a single final
timestamp). That is the loop `decoding.decode_features` already runs (`split_window`); here it gets the
features of a long file one window at a time, and the draft speculates inside each window. Greedy
output is token for token `generate(features, attention_mask=..., return_timestamps=True, ...)` with its
long-form defaults: no temperature fallback (`compression_ratio_threshold`/`logprob_threshold` None),
`condition_on_prev_tokens` off (what generate() uses unless the generation config sets it).

Memory: the whole file is one float32 16 kHz array (`audio.load_audio` reads it block by block), and
log-mel features exist for one window at a time. The extractor scales every frame against the loudest
frame of the whole input (a floor 8 log10 units below it), so a first pass finds that maximum window by
window; each window's features are then exactly the whole-file features' frames (tests/test_longform.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from transformers import WhisperFeatureExtractor

from specdec.audio import MAX_SECONDS, SAMPLE_RATE
from specdec.decoding import WINDOW_FRAMES, ClipDecoding, decode_features
from specdec.models import DraftKind, LoadedModel, ModelPair
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult

# (fraction done in [0, 1], a short message); long-form entry points call it as the work advances
Progress = Callable[[float, str], None]
LONG_FORM_MODES = ("sequential", "chunked")


def check_mode(long_form: str) -> None:
    if long_form not in LONG_FORM_MODES:
        raise ValueError(f"long_form must be one of {LONG_FORM_MODES}, not {long_form!r}")


def is_long(waveform: np.ndarray) -> bool:
    """More than one 30 s window of 16 kHz audio: generate() would take its long-form path."""
    return len(waveform) > MAX_SECONDS * SAMPLE_RATE


class WindowedFeatures:
    """A long waveform's log-mel features, computed one window at a time.

    `window(seek)` equals `window_features(whole, seek)` where `whole` is the feature extractor's output
    for the whole waveform (`truncation=False, padding="longest"`), bit for bit: each window's STFT frames
    see the same samples (reflect padding only at the ends of the file) and the same global floor.
    """

    def __init__(
        self, waveform: np.ndarray, extractor: WhisperFeatureExtractor, device: torch.device | str = "cpu"
    ) -> None:
        if extractor.dither:
            raise ValueError("windowed features need a feature extractor without dither")
        self.waveform = waveform  # (samples,) float32 at 16 kHz; not copied
        self.hop = extractor.hop_length
        self.n_fft = extractor.n_fft
        self.mel_filters = torch.from_numpy(extractor.mel_filters).to(torch.float32)  # (freqs, mel_bins)
        self.num_frames = len(waveform) // self.hop  # the extractor drops the STFT's last frame
        self.device = device
        starts = range(0, self.num_frames, WINDOW_FRAMES)
        self.max_log_mel = max(float(self.log_mel(start, start + WINDOW_FRAMES).max()) for start in starts)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.mel_filters.shape[1], self.num_frames)

    def window(self, seek: int) -> torch.Tensor:
        """Features (1, mel_bins, 3000) from frame `seek`, zero-padded past the end like generate()."""
        log_mel = self.log_mel(seek, seek + WINDOW_FRAMES)
        floor = torch.tensor(self.max_log_mel, dtype=torch.float32) - 8.0
        features = (torch.maximum(log_mel, floor) + 4.0) / 4.0
        padded = torch.nn.functional.pad(features, (0, WINDOW_FRAMES - features.shape[-1]))
        return padded[None].to(self.device)

    def log_mel(self, start: int, stop: int) -> torch.Tensor:
        """log10 mel power (mel_bins, frames) of frames [start, stop) (clipped to the file), unfloored.

        Always computed over a full window of frames (extended to the left near the end of the file): a
        matrix product over one or a few frames can round differently from the extractor's."""
        stop = min(stop, self.num_frames)
        begin = max(0, min(start, stop - WINDOW_FRAMES))
        samples = self._frame_samples(begin, stop)
        stft = torch.stft(
            torch.from_numpy(samples),
            self.n_fft,
            self.hop,
            window=torch.hann_window(self.n_fft),
            center=False,
            return_complex=True,
        )  # (freqs, stop - begin)
        magnitudes = (stft.abs() ** 2).contiguous()
        return torch.clamp(self.mel_filters.T @ magnitudes, min=1e-10).log10()[:, start - begin :]

    def _frame_samples(self, start: int, stop: int) -> np.ndarray:
        """The samples under frames [start, stop): n_fft/2 either side of each frame's centre, reflected
        at the ends of the file as the extractor's centred STFT does."""
        first = start * self.hop - self.n_fft // 2
        last = (stop - 1) * self.hop + self.n_fft // 2
        low, high = max(first, 0), min(last, len(self.waveform))
        samples = self.waveform[low:high]
        if low > first or high < last:
            samples = np.pad(samples, (low - first, last - high), mode="reflect")
        return np.ascontiguousarray(samples, dtype=np.float32)


def model_features(model: LoadedModel, waveform: np.ndarray) -> WindowedFeatures:
    """This model's windowed features (its own mel bins) on its device."""
    return WindowedFeatures(waveform, model.processor.feature_extractor, model.model.device)


def decode_sequential(
    pair: ModelPair,
    waveform: np.ndarray,
    options: DecodeOptions,
    use_draft: bool = True,
    progress: Progress | None = None,
) -> DecodeResult:
    """A long 16 kHz waveform decoded as generate() decodes it, segment by segment (timestamps forced on,
    as generate() requires for long input); speculative inside each segment when use_draft.

    The result's windows are its segments' seek table; tokens and steps name their window.
    """
    if getattr(pair.target.model.generation_config, "condition_on_prev_tokens", False):
        raise ValueError("long-form decoding does not condition on previous segments; unset it in the config")
    use_draft = use_draft and pair.draft is not None
    features = model_features(pair.target, waveform)
    draft_features = None
    if use_draft and pair.kind is not DraftKind.SHARED_ENCODER:
        draft_features = model_features(pair.draft, waveform)
    seconds = len(waveform) / SAMPLE_RATE

    def on_window(clip: ClipDecoding) -> None:
        if progress is not None:
            done = min(clip.seek / features.num_frames, 1.0)
            progress(done, f"segment {clip.window}, {done * seconds:.0f} of {seconds:.0f} s")

    options = dataclasses.replace(options, timestamps=True)
    return decode_features(pair, features, draft_features, options, use_draft, on_window=on_window)
