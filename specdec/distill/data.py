"""What a self-draft learns from: windows of unlabelled audio, each with the target's own reading of it.

Clips from an audio folder are packed into 30 s windows (one clip, or several of one language with pauses
between them, up to a random length, so that windows are as short or as full as the ones users send); a
recording longer than a window (a meeting, a podcast) is cut into consecutive pieces of random length first,
each read from its file without decoding the rest where soundfile can seek. The
frozen target reads each window once: its encoder states, and for each decoding mode (with timestamps, as
long-form and live decoding run, and without, as a short clip is transcribed) the tokens it generates
greedily, forced prompt included, with its final hidden state at every position (its logits, for a KL term,
are these times its embedding matrix). No transcript is needed: the labels are the target's own output.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import WhisperForConditionalGeneration

from specdec.audio import SAMPLE_RATE, AudioError, load_audio, recorded_seconds
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions
from specdec.whisper.features import PairFeatures, encode, features
from specdec.whisper.models import ModelPair
from specdec.whisper.tokens import TO_LANGUAGE_CODE

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".webm")
MAX_WINDOW_SECONDS = 28.0  # a packed window's audio at most (Whisper's window is 30 s)
MIN_WINDOW_SECONDS = 3.0  # the shortest random window limit (and piece of a long recording)
MIN_PIECE_SECONDS = 1.0  # a long recording's last piece, when shorter, is left out
PAUSE_SECONDS = (0.2, 1.0)  # silence between two clips of a packed window


@dataclass(frozen=True)
class Clip:
    path: Path
    language: str | None  # the folder's name when it is a Whisper language code; None: the target detects it
    start: float = 0.0  # seconds into the file: a piece of a long recording starts here
    seconds: float | None = None  # the piece's length; None: the whole file


@dataclass(frozen=True)
class Sequence:
    """The target's greedy reading of one window in one mode."""

    window: int  # index into Dataset.encoder_states
    language: str  # the language the target decoded in
    timestamps: bool
    tokens: torch.Tensor  # (length,) forced prompt, generated tokens, end-of-text
    prompt_length: int  # tokens of the forced prompt: the draft is taught what follows them
    target_hidden: torch.Tensor  # (length - 1, d_model) float16: the target's final hidden state before
    # each next token (position i predicts tokens[i + 1])


@dataclass
class Dataset:
    encoder_states: list[torch.Tensor]  # per window, (1500, d_model) float16
    sequences: list[Sequence]

    def extend(self, other: Dataset) -> None:
        offset = len(self.encoder_states)
        self.encoder_states += other.encoder_states
        self.sequences += [_shifted(s, offset) for s in other.sequences]


def find_clips(folder: Path) -> list[Clip]:
    """Every audio file under folder, sorted; a parent folder named by a language code gives its language."""
    clips = []
    for path in sorted(folder.rglob("*")):
        if path.suffix.lower() in AUDIO_SUFFIXES and path.is_file():
            name = path.parent.name.lower()
            clips.append(Clip(path, name if name in TO_LANGUAGE_CODE.values() else None))
    return clips


def plan_windows(
    clips: list[Clip],
    rng: random.Random,
    max_seconds: float = MAX_WINDOW_SECONDS,
    on_skip: Callable[[str], None] = warnings.warn,
) -> list[list[Clip]]:
    """Clips grouped into windows: consecutive clips of one language (in a shuffled order) while their
    length stays under a random limit between one clip and max_seconds. A file that cannot be read is left
    out, on_skip(why) told."""
    by_language: dict[str | None, list[Clip]] = {}
    for clip in clips:
        by_language.setdefault(clip.language, []).append(clip)
    windows = []
    for group in by_language.values():
        lengths = {clip: _seconds(clip.path, on_skip) for clip in group}
        group = [clip for clip in group if lengths[clip] is not None]
        group = [piece for clip in group for piece in _pieces(clip, lengths[clip], rng, max_seconds)]
        lengths.update({piece: piece.seconds for piece in group if piece.seconds is not None})
        rng.shuffle(group)
        window: list[Clip] = []
        seconds, limit = 0.0, rng.uniform(min(MIN_WINDOW_SECONDS, max_seconds), max_seconds)
        for clip in group:
            length = lengths[clip]
            if window and seconds + length + PAUSE_SECONDS[1] > limit:
                windows.append(window)
                window, seconds = [], 0.0
                limit = rng.uniform(min(MIN_WINDOW_SECONDS, max_seconds), max_seconds)
            window.append(clip)
            seconds += length + PAUSE_SECONDS[1]
        if window:
            windows.append(window)
    rng.shuffle(windows)
    return windows


def _pieces(clip: Clip, length: float, rng: random.Random, max_seconds: float) -> list[Clip]:
    """The clip itself when it fits a window; else consecutive pieces of it of random length (between
    MIN_WINDOW_SECONDS and max_seconds), a last one under MIN_PIECE_SECONDS left out."""
    if length <= max_seconds:
        return [clip]
    pieces, start = [], 0.0
    while length - start >= MIN_PIECE_SECONDS:
        seconds = min(rng.uniform(min(MIN_WINDOW_SECONDS, max_seconds), max_seconds), length - start)
        pieces.append(Clip(clip.path, clip.language, start, seconds))
        start += seconds
    return pieces


def window_audio(
    window: list[Clip], rng: random.Random, on_skip: Callable[[str], None] = warnings.warn
) -> np.ndarray:
    """The window's clips one after another with a short pause between them (float32, 16 kHz); a clip that
    cannot be read is left out, on_skip(why) told (AudioError when none can)."""
    parts = []
    for clip in window:
        try:
            audio = load_audio(clip.path) if clip.seconds is None else _piece_audio(clip)
        except AudioError as error:
            on_skip(f"{error}; left out")
            continue
        if parts:
            parts.append(np.zeros(int(rng.uniform(*PAUSE_SECONDS) * SAMPLE_RATE), np.float32))
        parts.append(audio)
    if not parts:
        raise AudioError("no clip of the window could be read")
    return np.concatenate(parts)[: int(MAX_WINDOW_SECONDS * SAMPLE_RATE)]


def _piece_audio(clip: Clip) -> np.ndarray:
    """A piece of a long recording (16 kHz mono float32): only its frames read where soundfile can seek;
    a format only PyAV reads (m4a, webm, ...) is decoded whole and cut."""
    import soundfile

    try:
        with soundfile.SoundFile(str(clip.path)) as file:
            file.seek(round(clip.start * file.samplerate))
            frames = file.read(round(clip.seconds * file.samplerate), dtype="float32", always_2d=True)
            if len(frames):
                return load_audio((file.samplerate, frames), max_seconds=None)
    except (RuntimeError, soundfile.LibsndfileError):
        pass
    first = round(clip.start * SAMPLE_RATE)
    return _decoded(clip.path)[first : first + round(clip.seconds * SAMPLE_RATE)]


@functools.lru_cache(maxsize=2)  # a long m4a is cut into many pieces: decoded once, not once a piece
def _decoded(path: Path) -> np.ndarray:
    return load_audio(path, max_seconds=None)


def read_windows(
    target_only: ModelPair,
    windows: list[list[Clip]],
    rng: random.Random,
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    on_skip: Callable[[str], None] = warnings.warn,
) -> Dataset:
    """The target's reading of every window, a batch of windows of one language at a time (see above).
    on_batch(n) follows each batch of n windows; on_skip(why), each clip left out as unreadable."""
    dataset = Dataset([], [])
    for batch in _batches(windows, batch_size):
        waveforms = []
        for window in batch:
            try:
                waveforms.append(window_audio(window, rng, on_skip))
            except AudioError:
                continue
        if waveforms:
            dataset.extend(_read_batch(target_only, waveforms, batch[0][0].language))
        if on_batch is not None:
            on_batch(len(batch))
    return dataset


def _read_batch(target_only: ModelPair, waveforms: list[np.ndarray], language: str | None) -> Dataset:
    """One encoder call for the batch, then a greedy decoding per mode over the same encoder states."""
    model = target_only.target.model
    clips = [PairFeatures(features(target_only.target, w), None) for w in waveforms]
    encoded: list[torch.Tensor] = []

    def remembered(encoder_model: WhisperForConditionalGeneration, windows: torch.Tensor):
        if encoded and windows.shape[0] == encoded[0].shape[0]:  # the same first windows: read once
            return encoded[0], 0.0
        hidden, seconds = encode(encoder_model, windows)
        encoded.append(hidden)
        return hidden, seconds

    sequences = []
    for timestamps in (False, True):
        options = DecodeOptions(language=language, timestamps=timestamps)
        results = decode_clips(target_only, clips, options, speculative=False, encoder=remembered)
        for index, result in enumerate(results):
            generated = [t.token_id for t in result.tokens if t.window == 0]
            tokens = torch.tensor(list(result.prompt_ids) + generated)
            hidden = _final_hidden(model, tokens, encoded[0][index])
            sequences.append(
                Sequence(index, result.language, timestamps, tokens, len(result.prompt_ids), hidden.half())
            )
    states = [hidden.half() for hidden in encoded[0]]
    return Dataset(states, sequences)


@torch.inference_mode()
def _final_hidden(
    model: WhisperForConditionalGeneration, tokens: torch.Tensor, states: torch.Tensor
) -> torch.Tensor:
    """The target decoder's final hidden states (length - 1, d_model) with teacher forcing on tokens."""
    output = model.model.decoder(input_ids=tokens[None, :-1], encoder_hidden_states=states[None])
    return output.last_hidden_state[0]


def _batches(windows: list[list[Clip]], size: int) -> Iterator[list[list[Clip]]]:
    """Windows in batches of one language each (the forced language token is per decoding)."""
    by_language: dict[str | None, list[list[Clip]]] = {}
    for window in windows:
        by_language.setdefault(window[0].language, []).append(window)
    for group in by_language.values():
        for start in range(0, len(group), size):
            yield group[start : start + size]


def _seconds(path: Path, on_skip: Callable[[str], None]) -> float | None:
    """The file's length as its header records it, else as decoded; None (on_skip told why) for a file
    that cannot be read or holds no audio. (A header that does not know its length, as a recorder writing
    to a pipe leaves it, is not taken at its word.)"""
    seconds = recorded_seconds(path)
    if seconds:
        return seconds
    try:
        return len(load_audio(path, max_seconds=None)) / SAMPLE_RATE
    except AudioError as error:
        on_skip(f"{error}; left out")
    return None


def _shifted(sequence: Sequence, offset: int) -> Sequence:
    return Sequence(
        sequence.window + offset, sequence.language, sequence.timestamps, sequence.tokens,
        sequence.prompt_length, sequence.target_hidden,
    )  # fmt: skip


def split_windows(
    windows: list[list[Clip]], held_out: float, max_per_language: int | None, rng: random.Random
) -> tuple[list[list[Clip]], list[list[Clip]]]:
    """(training, held-out) windows: per language, at most max_per_language, held_out of them kept apart
    (at least one where there are two) to measure the draft on audio it was not trained on."""
    by_language: dict[str | None, list[list[Clip]]] = {}
    for window in windows:
        by_language.setdefault(window[0].language, []).append(window)
    training, evaluation = [], []
    for group in by_language.values():
        group = group[:max_per_language]
        count = max(1, round(len(group) * held_out)) if len(group) > 1 and held_out > 0 else 0
        evaluation += group[:count]
        training += group[count:]
    rng.shuffle(training)
    return training, evaluation


def save_dataset(dataset: Dataset, path: Path) -> None:
    sequences = [vars(sequence) for sequence in dataset.sequences]
    torch.save({"encoder_states": dataset.encoder_states, "sequences": sequences}, path)


def load_dataset(path: Path) -> Dataset:
    saved = torch.load(path, weights_only=True)
    return Dataset(saved["encoder_states"], [Sequence(**fields) for fields in saved["sequences"]])
