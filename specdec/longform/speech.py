"""Long audio with its long silences skipped (an option, off by default): Silero VAD (`specdec.vad`) finds
the speech, and only the speech is decoded.

The target then hears the speech pieces, not the whole file, so the output is no longer generate()'s on
the whole file: it is generate()'s on each piece (sequential; the language detected once, on the first
piece, as generate() detects it once for a file), or the ASR pipeline's chunks planned within each piece
(chunked). The speculative output is still the target's own on the same pieces, token for token.

A silence shorter than 2 s never splits speech, and speech within one 30 s window of the piece before is
decoded with it (the silence between included), so skipping never costs an extra window. Times stay in
seconds of the whole file: each piece's windows start where the piece lies in it, so its timestamps and
segments are the file's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from specdec import vad
from specdec.audio import MAX_SECONDS, SAMPLE_RATE
from specdec.engine.clip_decoding import ClipDecoding
from specdec.engine.state import Clock
from specdec.engine.windows import decode_clips
from specdec.longform import Progress, is_long
from specdec.longform.chunked import decode_chunked
from specdec.longform.joined import joined, moved_steps, moved_windows
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import pair_features
from specdec.whisper.models import ModelPair
from specdec.whisper.tokens import language_code, language_token_id

MIN_SILENCE_SECONDS = 2.0  # a shorter silence never splits speech
PAD_SECONDS = 0.4  # audio kept on each side of the speech

Span = tuple[int, int]  # (start, stop) in 16 kHz samples of the file


def speech_pieces(waveform: np.ndarray) -> list[Span]:
    """The stretches of the file to decode: its speech, each region joined to the piece before while
    both fit in one 30 s window."""
    window = round(MAX_SECONDS * SAMPLE_RATE)
    pieces: list[Span] = []
    for start, stop in vad.speech_regions(waveform, MIN_SILENCE_SECONDS, PAD_SECONDS):
        if pieces and stop - pieces[-1][0] <= window:
            pieces[-1] = (pieces[-1][0], stop)
        else:
            pieces.append((start, stop))
    return pieces


def decode_speech(
    pair: ModelPair,
    waveform: np.ndarray,
    options: DecodeOptions,
    speculative: bool = True,
    long_form: str = "sequential",
    batch_size: int = 1,
    progress: Progress | None = None,
) -> DecodeResult:
    """The speech of a long 16 kHz waveform, piece by piece (`speech_pieces`), as one result in the whole
    file's time; timestamps on, as for any long audio. batch_size: pieces (sequential) or chunks
    (chunked) decoded together; each one's output is the same as decoded alone."""
    options = dataclasses.replace(options, timestamps=True)
    pieces = speech_pieces(waveform)
    if not pieces:
        return _nothing_heard(pair, options)
    if long_form == "chunked":
        return decode_chunked(pair, waveform, options, speculative, batch_size, progress, spans=pieces)
    return decode_pieces(pair, waveform, pieces, options, speculative, batch_size, progress)


def decode_pieces(
    pair: ModelPair,
    waveform: np.ndarray,
    pieces: Sequence[Span],
    options: DecodeOptions,
    speculative: bool = True,
    batch_size: int = 1,
    progress: Progress | None = None,
) -> DecodeResult:
    """Each piece decoded as generate() decodes a clip of its length (long-form over 30 s), batch_size at
    a time; without a language, the first piece alone first, and its language for the others."""
    clock = Clock()
    total = sum(stop - start for start, stop in pieces) / SAMPLE_RATE
    first = 1 if options.language is None else batch_size
    groups = [pieces[:first]] + [pieces[i : i + batch_size] for i in range(first, len(pieces), batch_size)]
    results: list[DecodeResult] = []
    done = 0.0  # seconds of speech in the groups decoded so far
    for group in groups:
        audio = [waveform[start:stop] for start, stop in group]
        clips = [pair_features(pair, piece, speculative, long=is_long(piece)) for piece in audio]
        lengths = {id(clip): len(piece) / SAMPLE_RATE for clip, piece in zip(clips, audio, strict=True)}
        on_window = _window_progress(progress, total, done, lengths)
        results += decode_clips(pair, clips, options, speculative, on_window=on_window, clock=clock)
        options = dataclasses.replace(options, language=options.language or results[0].language)
        done += sum(lengths.values())
    moved = concatenate(results, [(start / SAMPLE_RATE, stop / SAMPLE_RATE) for start, stop in pieces])
    return dataclasses.replace(moved, total_seconds=clock.seconds())


def concatenate(results: Sequence[DecodeResult], spans: Sequence[tuple[float, float]]) -> DecodeResult:
    """The pieces' results as one: piece p's windows moved to where it lies in the file ((start, stop)
    seconds; the padding past its end left out), its windows and steps numbered after piece p-1's; every
    pass and encoding once (one clock numbers them)."""
    tokens, steps, windows = [], [], []
    for result, (start, stop) in zip(results, spans, strict=True):
        first_window, first_step = len(windows), len(steps)
        tokens += [
            dataclasses.replace(record, window=first_window + record.window, step=first_step + record.step)
            for record in result.tokens
        ]
        steps += moved_steps(result, first_step, first_window)
        windows += moved_windows(result, first_window, start, stop - start)
    token_ids = tuple(token for result in results for token in result.token_ids)
    return joined(results, token_ids, tokens, steps, windows)


def _window_progress(
    progress: Progress | None, total: float, done: float, lengths: dict[int, float]
) -> Callable[[ClipDecoding], None] | None:
    """on_window for one batch of pieces: progress over the file's speech (total seconds), `done` seconds
    before the batch; lengths: seconds of each piece, by the id of its features."""
    if progress is None:
        return None
    heard: dict[int, float] = {}

    def on_window(clip: ClipDecoding) -> None:
        fraction = 1.0 if clip.done else min(clip.seek / clip.num_frames, 1.0)
        heard[id(clip.features)] = lengths[id(clip.features)] * fraction
        seconds = done + sum(heard.values())
        progress(seconds / total, f"{seconds:.0f} of {total:.0f} s of speech")

    return on_window


def _nothing_heard(pair: ModelPair, options: DecodeOptions) -> DecodeResult:
    """The result of a file without speech: nothing decoded (the language asked for, else "en")."""
    config = pair.target.model.generation_config
    asked = options.language is not None and getattr(config, "is_multilingual", False)
    language = language_code(config, language_token_id(config, options.language) if asked else None)
    return DecodeResult((), (), language, (), (), (), (), 0.0)
