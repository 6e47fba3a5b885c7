"""Long audio, chunked mode: overlapping 30 s chunks decoded as one batch, merged as transformers' ASR
pipeline merges them.

The chunks are those of `pipeline("automatic-speech-recognition", chunk_length_s=30)` (`chunk_iter`):
30 s every 20 s, each sharing a 5 s stride with each neighbour (stride_length_s = chunk_length_s / 6).
Each chunk's features are the extractor's own for that chunk (padded to 30 s), so no features of the
whole file ever exist. The chunks are decoded together by `engine.windows.decode_clips` (each row
accepts its own number of draft tokens; every chunk's output is its output decoded alone), then merged
by `merge_chunks`: the tokenizer's `_decode_asr` (without word timestamps or language switching), whose
token-level longest-common-sequence merge on the overlap is `longest_common_merge`. Timestamps become
seconds in the whole file. The merge is checked against transformers' own functions in
tests/test_longform.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from specdec.audio import SAMPLE_RATE
from specdec.engine.state import Clock
from specdec.engine.windows import Encoder, MakeDrafter, decode_clips
from specdec.longform import Progress
from specdec.longform.joined import joined, moved_steps, moved_windows
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult, Segment
from specdec.whisper.features import encode, pair_features
from specdec.whisper.models import ModelPair
from specdec.whisper.tokens import TIMESTAMP_SECONDS, timestamp_begin

CHUNK_SECONDS = 30.0
STRIDE_SECONDS = CHUNK_SECONDS / 6  # the pipeline's default stride_length_s, on each side
CHUNK_BATCH_SIZE = 8  # chunks decoded together by default: 8 chunks cover 2 min 50 s

Tagged = tuple[int, tuple[int, int]]  # (token id, (chunk, index in that chunk's token ids))


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk of the file, in 16 kHz samples."""

    start: int
    stop: int
    stride_left: int  # samples shared with the previous chunk (0 for the first)
    stride_right: int  # samples shared with the next chunk (0 for the last)

    @property
    def start_seconds(self) -> float:
        return self.start / SAMPLE_RATE


@dataclasses.dataclass(frozen=True)
class Piece:
    """A merged stretch of transcript: text tokens between two timestamps (seconds in the whole file)."""

    start_seconds: float | None
    end_seconds: float | None
    tokens: tuple[Tagged, ...]


def plan_chunks(
    num_samples: int, chunk_seconds: float = CHUNK_SECONDS, stride_seconds: float = STRIDE_SECONDS
):
    """The pipeline's chunks (`chunk_iter`) of a file of num_samples at 16 kHz."""
    chunk, stride = round(chunk_seconds * SAMPLE_RATE), round(stride_seconds * SAMPLE_RATE)
    if chunk <= 2 * stride:
        raise ValueError("the chunk must be longer than both strides")
    chunks = []
    for start in range(0, num_samples, chunk - 2 * stride):
        is_last = start + chunk >= num_samples
        stop = min(start + chunk, num_samples)
        left, right = (0 if start == 0 else stride), (0 if is_last else stride)
        if stop - start > left:
            chunks.append(Chunk(start, stop, left, right))
        if is_last:
            break
    return chunks


def longest_common_merge(sequences: Sequence[Sequence[Tagged]]) -> list[Tagged]:
    """Join overlapping token sequences: `tokenization_whisper._find_longest_common_sequence`, with each
    token carrying where it came from. Where two sequences overlap best (most equal ids, ties to the
    longer overlap), the left one is kept for the first half of the overlap and the right one after."""
    left = list(sequences[0])
    total: list[Tagged] = []
    for right in sequences[1:]:
        best, best_span = 0.0, (len(left), len(left), 0, 0)
        for i in range(1, len(left) + len(right)):
            left_start, left_stop = max(0, len(left) - i), min(len(left), len(left) + len(right) - i)
            right_start, right_stop = max(0, i - len(left)), min(len(right), i)
            left_ids = np.array([token for token, _ in left[left_start:left_stop]])
            right_ids = np.array([token for token, _ in right[right_start:right_stop]])
            matches = int(np.sum(left_ids == right_ids))
            matching = matches / i + i / 10000.0  # the epsilon favours long perfect matches
            if matches > 1 and matching > best:
                best, best_span = matching, (left_start, left_stop, right_start, right_stop)
        left_start, left_stop, right_start, right_stop = best_span
        total += left[: (left_start + left_stop) // 2]
        left = list(right[(right_start + right_stop) // 2 :])
    return total + left


def merge_chunks(
    token_ids: Sequence[Sequence[int]],
    chunks: Sequence[Chunk],
    timestamp_begin: int,
    special_ids: set[int],
    segment_size: int = 1500,
) -> list[Piece]:
    """The chunks' output ids -> merged pieces, as the tokenizer's `_decode_asr` builds the pipeline's
    text and `chunks` (return_timestamps as the ids have them; without timestamps, one piece)."""
    pieces: list[Piece] = []
    previous: list[list[Tagged]] = []  # text between timestamps, one list per chunk, to be merged
    start, skip, time_offset = None, False, 0.0
    for index, (ids, chunk) in enumerate(zip(token_ids, chunks, strict=True)):
        chunk_seconds = (chunk.stop - chunk.start) / SAMPLE_RATE
        left, right = chunk.stride_left / SAMPLE_RATE, chunk.stride_right / SAMPLE_RATE
        time_offset -= left
        first_timestamp = left / TIMESTAMP_SECONDS + timestamp_begin if left else timestamp_begin
        last_timestamp = _last_timestamp(ids, timestamp_begin, chunk_seconds - right) if right else None
        current: list[Tagged] = []
        max_time = previous_segments = penultimate = 0.0
        for i, token in enumerate(ids):
            if token in special_ids:
                continue
            if token < timestamp_begin:
                current.append((token, (index, i)))
                continue
            seconds = float((token - timestamp_begin) * TIMESTAMP_SECONDS)
            if seconds < max_time:  # a new segment of generate()'s own seek loop began
                if i >= 2 and not (ids[i - 1] >= timestamp_begin and ids[i - 2] >= timestamp_begin):
                    previous_segments += TIMESTAMP_SECONDS * segment_size
                else:
                    max_time = penultimate
                    previous_segments += penultimate
            penultimate, max_time = max_time, seconds
            at = round(seconds + time_offset + previous_segments, 2)
            if last_timestamp and token >= last_timestamp:
                skip = True  # inside the right stride: resolved by the next chunk
            elif skip or (previous and token < first_timestamp):
                skip = False
            elif start is None:
                start = at
            elif at != start:
                pieces.append(Piece(start, at, tuple(longest_common_merge([*previous, current]))))
                previous, current, start = [], [], None
        time_offset += chunk_seconds - right
        if current:
            previous.append(current)
        elif not any(previous):
            previous, start = [], None
    if previous:
        pieces.append(Piece(start, None, tuple(longest_common_merge(previous))))
    return pieces


def _moved(piece: Piece, seconds: float, chunks: int) -> Piece:
    """A piece `seconds` later in the file, its tokens' chunks numbered `chunks` later."""
    if not seconds and not chunks:
        return piece
    start, end = (
        None if t is None else round(t + seconds, 2) for t in (piece.start_seconds, piece.end_seconds)
    )
    tokens = tuple((token, (chunk + chunks, index)) for token, (chunk, index) in piece.tokens)
    return Piece(start, end, tokens)


def _last_timestamp(ids: Sequence[int], timestamp_begin: int, right_stride_start: float) -> int | None:
    """The first timestamp token (from the end) that `_decode_asr` skips as lying in the right stride."""
    last = None
    for token in reversed(ids):
        if token >= timestamp_begin:
            if last is not None and (token - timestamp_begin) * TIMESTAMP_SECONDS < right_stride_start:
                break
            last = token
    return last


def decode_chunked(
    pair: ModelPair,
    waveform: np.ndarray,
    options: DecodeOptions,
    speculative: bool = True,
    batch_size: int = CHUNK_BATCH_SIZE,
    progress: Progress | None = None,
    spans: Sequence[tuple[int, int]] | None = None,
) -> DecodeResult:
    """A long 16 kHz waveform in overlapping chunks, batch_size of them decoded together, merged into one
    result: token_ids are the merged text tokens; with timestamps, segments carry file-relative times.

    The trace holds every chunk's windows (Window.chunk, start_seconds in the file), tokens and steps;
    a token's `kept` says whether it is in the merged transcript. spans: (start, stop) samples to
    decode, each chunked and merged on its own (default: the whole file); the rest is not decoded.
    """
    clock = Clock()
    planned = [
        [
            dataclasses.replace(chunk, start=start + chunk.start, stop=start + chunk.stop)
            for chunk in plan_chunks(stop - start)
        ]
        for start, stop in ([(0, len(waveform))] if spans is None else spans)
    ]
    chunks = [chunk for span_chunks in planned for chunk in span_chunks]
    results = decode_chunks(pair, waveform, chunks, options, speculative, batch_size, progress, clock)
    tokenizer = pair.target.processor.tokenizer
    config = pair.target.model.generation_config
    pieces, done = [], 0
    for span_chunks in planned:  # a span's chunks merge alone; its times move to where it lies in the file
        ids = [result.token_ids for result in results[done : done + len(span_chunks)]]
        offset = span_chunks[0].start_seconds if span_chunks else 0.0
        found = merge_chunks(ids, span_chunks, timestamp_begin(config), set(tokenizer.all_special_ids))
        pieces += [_moved(piece, offset, done) for piece in found]
        done += len(span_chunks)
    merged = _combine(results, chunks, pieces, options.timestamps)
    return dataclasses.replace(merged, total_seconds=clock.seconds())


def decode_chunks(
    pair: ModelPair,
    waveform: np.ndarray,
    chunks: Sequence[Chunk],
    options: DecodeOptions,
    speculative: bool = True,
    batch_size: int = CHUNK_BATCH_SIZE,
    progress: Progress | None = None,
    clock: Clock | None = None,
    encoder: Encoder = encode,
    make_drafter: MakeDrafter | None = None,
) -> list[DecodeResult]:
    """Every chunk's own DecodeResult, batch_size chunks decoded together at a time (features made per
    batch); each the same as that chunk decoded alone. The batches share the clock (one decoding), so
    their passes and encodings are numbered once for the file; encoder, make_drafter: see `decode_clips`."""
    clock = clock or Clock()
    seconds = len(waveform) / SAMPLE_RATE
    results: list[DecodeResult] = []
    for first in range(0, len(chunks), batch_size):
        batch = chunks[first : first + batch_size]
        features = [pair_features(pair, waveform[chunk.start : chunk.stop], speculative) for chunk in batch]
        results += decode_clips(
            pair, features, options, speculative, make_drafter, encoder=encoder, clock=clock
        )
        if progress is not None:
            done = min(batch[-1].stop / SAMPLE_RATE, seconds)
            progress(
                len(results) / len(chunks),
                f"chunk {len(results)} of {len(chunks)}, {done:.0f} of {seconds:.0f} s",
            )
    return results


def _combine(
    results: Sequence[DecodeResult], chunks: Sequence[Chunk], pieces: Sequence[Piece], timestamps: bool
) -> DecodeResult:
    """One trace for the file: chunk c's windows and steps renumbered after chunk c-1's; the passes and
    encodings of every chunk, each once (the chunks of a batch share theirs)."""
    in_transcript = {origin for piece in pieces for _, origin in piece.tokens}
    tokens, steps, windows = [], [], []
    for c, (result, chunk) in enumerate(zip(results, chunks, strict=True)):
        first_window, first_step = len(windows), len(steps)
        output_index = -1  # index of the record in the chunk's token_ids (kept records, in order)
        for record in result.tokens:
            output_index += record.kept
            kept = record.kept and (c, output_index) in in_transcript
            tokens.append(
                dataclasses.replace(
                    record, window=first_window + record.window, step=first_step + record.step, kept=kept
                )
            )
        steps += moved_steps(result, first_step, first_window)
        audio_seconds = (chunk.stop - chunk.start) / SAMPLE_RATE  # the rest of the chunk is padding
        windows += moved_windows(result, first_window, chunk.start_seconds, audio_seconds, c)
    segments = tuple(
        Segment(piece.start_seconds, piece.end_seconds, tuple(token for token, _ in piece.tokens))
        for piece in pieces
    )
    token_ids = tuple(token for segment in segments for token in segment.token_ids)
    return joined(results, token_ids, tokens, steps, windows, segments if timestamps else ())
