"""Log-mel features and encoder states: what each model of a pair reads, made once per window.

A model reads its own feature extractor's features (mel bins differ: 80 up to large-v2, 128 from
large-v3). `pair_features` decides once, for a pair, what the draft reads: nothing of its own with a
shared encoder (it reads the target's encoder states), the target's very features when both extractors
are the same (whisper-base and whisper-tiny.en), else its own.

A long file's features are made one 30 s window at a time (`WindowedFeatures`), bit for bit the
extractor's features of the whole file.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

from specdec.audio import SAMPLE_RATE
from specdec.whisper.models import DraftKind, LoadedModel, ModelPair
from specdec.whisper.tokens import WINDOW_FRAMES


class FeatureWindows(Protocol):
    """Features computed one window at a time (a long file's: `WindowedFeatures`)."""

    @property
    def shape(self) -> tuple[int, int, int]: ...  # (1, mel_bins, frames) of the whole file

    def window(self, seek: int) -> torch.Tensor: ...  # what window_features gives for a full tensor


Features = torch.Tensor | FeatureWindows


def window_features(features: Features, seek: int) -> torch.Tensor:
    """30 s of features from frame `seek`, zero-padded like generate()'s `_get_input_segment`."""
    if not isinstance(features, torch.Tensor):
        return features.window(seek)
    segment = features[:, :, seek : seek + WINDOW_FRAMES]
    return F.pad(segment, (0, WINDOW_FRAMES - segment.shape[-1]))


@dataclass(frozen=True)
class PairFeatures:
    """What each model of a pair reads: the target's features, and the draft's (None: it reads the
    target's encoder states; the same object as `target`: the same features)."""

    target: Features  # (1, mel_bins, frames)
    draft: Features | None
    audio_frames: int | None = None  # frames that hold the clip's audio, in a short clip's padded window
    # (the count generate()'s attention mask gives); None: all of them


def features(model: LoadedModel, waveform: np.ndarray) -> torch.Tensor:
    """Log-mel features (1, mel_bins, 3000) of up to 30 s of 16 kHz audio, padded as generate()'s are."""
    extracted = model.processor.feature_extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    return extracted.input_features.to(model.model.device)


def pair_features(
    pair: ModelPair, waveform: np.ndarray, speculative: bool = True, long: bool = False
) -> PairFeatures:
    """The features of both models of a pair for one clip (long: window by window, any length)."""
    make = model_features if long else features
    target = make(pair.target, waveform)
    hop = pair.target.processor.feature_extractor.hop_length
    frames = None if long else math.ceil(len(waveform) / hop)
    if not speculative or pair.draft is None or pair.kind is DraftKind.SHARED_ENCODER:
        return PairFeatures(target, None, frames)
    if same_extractor(pair.target, pair.draft):
        return PairFeatures(target, target, frames)
    return PairFeatures(target, make(pair.draft, waveform), frames)


def same_extractor(first: LoadedModel, second: LoadedModel) -> bool:
    """The two models' feature extractors make the same features from the same audio."""
    return first.processor.feature_extractor.to_dict() == second.processor.feature_extractor.to_dict()


@torch.inference_mode()
def encode(model: WhisperForConditionalGeneration, features: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Encoder output (batch, 1500, d_model) for log-mel features (batch, mel_bins, 3000), and seconds.

    On a CPU the windows are encoded one at a time: there a batch of them is slower than the same windows
    one by one (its activations outgrow the caches), and each window's states are then bit for bit those
    it gets alone."""
    start = time.perf_counter()
    features = features.to(model.device, model.dtype)
    if model.device.type == "cpu" and len(features) > 1:
        hidden = torch.cat([model.model.encoder(window[None]).last_hidden_state for window in features])
    else:
        hidden = model.model.encoder(features).last_hidden_state
    if hidden.device.type == "cuda":
        torch.cuda.synchronize(hidden.device)
    return hidden, time.perf_counter() - start


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
