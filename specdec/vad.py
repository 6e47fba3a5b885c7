"""Voice activity: which parts of 16 kHz audio are speech, by Silero VAD (its TorchScript model).

The network reads 512-sample windows (32 ms at 16 kHz), each with the 64 samples before it, and carries a
recurrent state from window to window. Silero's own wrapper keeps that state inside the loaded model, so
one model could serve one stream only; here the state is passed in and out of the network's forward, so
one model, loaded on first use and once per process, serves every stream and file at once.

- `SpeechDetector`: one live stream's activity, chunk by chunk, with the hysteresis of Silero's
  `VADIterator` (speech from `threshold` on; it ends after `pause_seconds` below `threshold - 0.15`).
- `speech_regions`: a file's speech as (start, stop) samples, by Silero's `get_speech_timestamps`
  rules; the file is read in 30 s blocks run side by side as one batch, each block from a fresh state.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch

from specdec.audio import SAMPLE_RATE

WINDOW_SAMPLES = 512  # one window at 16 kHz
CONTEXT_SAMPLES = 64  # the end of the previous window, read again in front of each window
STATE_SIZE = 128  # the recurrent state: (2, rows, STATE_SIZE)
BLOCK_WINDOWS = 938  # the longest block of a file (30 s); a file's blocks run as one batch
THRESHOLD = 0.5  # Silero's default: a window is speech from this probability on
END_MARGIN = 0.15  # speech ends only below threshold - END_MARGIN (Silero's hysteresis)

_LOADED: dict[str, tuple[ModuleType, torch.jit.ScriptModule]] = {}
_LOAD_LOCK = threading.Lock()


def silero() -> tuple[ModuleType, torch.jit.ScriptModule]:
    """The silero_vad package and its 16 kHz network, loaded on first use, once per process."""
    with _LOAD_LOCK:
        if "silero" not in _LOADED:
            threads = torch.get_num_threads()
            try:
                import silero_vad  # its import sets torch to one thread for the whole process
            finally:
                torch.set_num_threads(threads)
            with warnings.catch_warnings():  # its loader's importlib and torch.jit.load deprecations
                warnings.simplefilter("ignore", DeprecationWarning)
                model = silero_vad.load_silero_vad(onnx=False)
            _LOADED["silero"] = (silero_vad, model._model)  # the network, without the wrapper's state
        return _LOADED["silero"]


def initial_state(rows: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The network's state before any audio: (recurrent state (2, rows, 128), context (rows, 64))."""
    return torch.zeros(2, rows, STATE_SIZE), torch.zeros(rows, CONTEXT_SAMPLES)


@torch.inference_mode()
def window_probabilities(
    audio: torch.Tensor, state: torch.Tensor, context: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Speech probability of each 512-sample window of audio (rows, windows * 512), rows in parallel.

    Returns (probabilities (rows, windows), the state and context after the last window)."""
    _, network = silero()
    probabilities = []
    for start in range(0, audio.shape[1] - WINDOW_SAMPLES + 1, WINDOW_SAMPLES):
        window = torch.cat([context, audio[:, start : start + WINDOW_SAMPLES]], dim=1)  # (rows, 64 + 512)
        probability, state = network(window, state)  # (rows, 1)
        context = window[:, -CONTEXT_SAMPLES:]
        probabilities.append(probability[:, 0])
    if not probabilities:
        return torch.zeros(audio.shape[0], 0), state, context
    return torch.stack(probabilities, dim=1), state, context


def speech_probabilities(waveform: np.ndarray) -> np.ndarray:
    """Each 512-sample window's speech probability (the last window padded with zeros), (windows,).

    Blocks of equal length, at most 30 s, run side by side, each from a fresh state: a few times faster
    than one pass, and the regions found move by at most a few windows."""
    windows = -(-len(waveform) // WINDOW_SAMPLES)
    if windows == 0:
        return np.zeros(0, dtype=np.float32)
    rows = -(-windows // BLOCK_WINDOWS)
    block = -(-windows // rows)
    padded = np.zeros(rows * block * WINDOW_SAMPLES, dtype=np.float32)
    padded[: len(waveform)] = waveform
    audio = torch.from_numpy(padded).reshape(rows, block * WINDOW_SAMPLES)
    probabilities, _, _ = window_probabilities(audio, *initial_state(rows))
    return probabilities.reshape(-1)[:windows].numpy()


def speech_regions(
    waveform: np.ndarray,
    min_silence_seconds: float = 2.0,
    pad_seconds: float = 0.4,
    threshold: float = THRESHOLD,
) -> list[tuple[int, int]]:
    """The speech in 16 kHz audio as (start, stop) samples, in order, by Silero's rules: a silence shorter
    than min_silence_seconds does not split speech, speech shorter than 0.25 s is dropped, and each
    region is widened by pad_seconds on both sides (into the silence, never over a neighbour)."""
    package, _ = silero()
    found = package.get_speech_timestamps_from_probs(
        speech_probabilities(waveform).tolist(),
        sampling_rate=SAMPLE_RATE,
        threshold=threshold,
        min_silence_duration_ms=round(1000 * min_silence_seconds),
        speech_pad_ms=round(1000 * pad_seconds),
        audio_length_samples=len(waveform),
    )
    return [(region["start"], region["end"]) for region in found]


def rms_dbfs(chunk: np.ndarray) -> float:
    """Root-mean-square level in dB relative to full scale (-inf for digital silence): the energy gate
    that spares the network chunks too quiet to hold speech."""
    if len(chunk) == 0:
        return float("-inf")
    rms = float(np.sqrt(np.mean(np.square(chunk, dtype=np.float64))))
    return 20 * np.log10(rms) if rms > 0 else float("-inf")


@dataclass(frozen=True)
class Activity:
    """What one chunk of a stream held."""

    speech: bool  # some of its windows were speech
    ongoing: bool  # it ends in speech, or in a pause shorter than pause_seconds: the utterance goes on


class SpeechDetector:
    """One stream's voice activity, chunk by chunk: the network's state and the samples short of a whole
    window carry over from one chunk to the next, and Silero's hysteresis decides where speech ends."""

    def __init__(self, threshold: float = THRESHOLD, pause_seconds: float = 0.5) -> None:
        self.threshold = threshold
        self.pause_samples = round(pause_seconds * SAMPLE_RATE)
        self.in_speech = False
        self.quiet_samples = 0  # in speech: samples since the probability last fell below the end level
        self.restart()

    def restart(self) -> None:
        """The network starts afresh (its state and the samples it has not read are dropped)."""
        self.state, self.context = initial_state()
        self.pending = np.zeros(0, dtype=np.float32)

    def hear(self, chunk: np.ndarray) -> Activity:
        """Run the network over the chunk, window by window, and follow the speech through it."""
        audio = np.concatenate([self.pending, chunk.astype(np.float32, copy=False)])
        whole = len(audio) // WINDOW_SAMPLES * WINDOW_SAMPLES
        self.pending = audio[whole:]
        windows = torch.from_numpy(np.ascontiguousarray(audio[:whole])).reshape(1, whole)
        probabilities, self.state, self.context = window_probabilities(windows, self.state, self.context)
        speech = [self._follow(probability, WINDOW_SAMPLES) for probability in probabilities[0].tolist()]
        return Activity(any(speech), self.in_speech)

    def skip(self, num_samples: int) -> Activity:
        """A chunk known to hold no speech (too quiet to be): no network run, and a fresh state after it."""
        self._follow(0.0, num_samples)
        self.restart()
        return Activity(False, self.in_speech)

    def _follow(self, probability: float, num_samples: int) -> bool:
        """One window (or num_samples of silence) through the hysteresis; True if it is speech."""
        if probability >= self.threshold:
            self.in_speech, self.quiet_samples = True, 0
            return True
        if self.in_speech and (self.quiet_samples or probability < self.threshold - END_MARGIN):
            self.quiet_samples += num_samples
            if self.quiet_samples >= self.pause_samples:
                self.in_speech, self.quiet_samples = False, 0
        return False
