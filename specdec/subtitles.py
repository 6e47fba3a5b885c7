"""Transcripts as files: timed segments as SRT, WebVTT and plain text (the formats openai-whisper writes).

A decoding with timestamps gives its text in segments between timestamp tokens; `segments_of` reads
them from the trace in seconds of the whole file (each window's timestamps plus the window's start; a
chunked long-form result carries its merged segments already), and `cues` decodes their text and gives
every one a start and an end within the audio. A decoding without timestamps has no segment times:
SRT and WebVTT refuse it with `NoTimestamps` rather than invent them (one cue over the whole clip is
not a subtitle), while plain text and JSON work either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec.trace import DecodeResult, Segment

FORMATS = ("txt", "srt", "vtt", "json")
VTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}  # `&` first; `>` also escapes a stray `-->`


class NoTimestamps(ValueError):
    """Subtitles asked of a transcript decoded without timestamps."""

    def __init__(self, name: str, kind: str = "segment") -> None:
        if kind == "word":
            how = "word_timestamps=True; command line: --word-timestamps; app: the Word timestamps box"
        else:
            how = "timestamps=True; command line: --timestamps; app: the Timestamps box"
        super().__init__(f"{name} needs {kind} times: decode with {kind} timestamps on (Python: {how})")


@dataclass(frozen=True)
class Cue:
    """One timed segment of a transcript, in seconds from the start of the whole file: one subtitle."""

    start_seconds: float
    end_seconds: float
    text: str  # as decoded, leading space included: the cues' texts joined are the transcript
    token_ids: tuple[int, ...]  # its text tokens (target vocabulary)


def segments_of(result: DecodeResult, timestamp_begin: int, timestamp_seconds: float) -> tuple[Segment, ...]:
    """The stretches of text between timestamp tokens, in seconds of the whole file (None where the model
    gave no timestamp: text cut off at the end of its window).

    Each kept token belongs to a window; a timestamp's time is its window's start in the file plus
    (id - timestamp_begin) * timestamp_seconds. A chunked result's merged segments are returned as they are.
    """
    if result.segments or any(window.chunk is not None for window in result.windows):
        return result.segments
    window_starts = {window.index: window.start_seconds for window in result.windows}
    segments: list[Segment] = []
    start, text_ids, window = None, [], None
    for record in result.tokens:
        if not record.kept:
            continue
        if record.window != window:  # a window's text with no closing timestamp ends with the window
            if text_ids:
                segments.append(Segment(start, None, tuple(text_ids)))
            start, text_ids, window = None, [], record.window
        if record.token_id < timestamp_begin:
            text_ids.append(record.token_id)
            continue
        offset = (record.token_id - timestamp_begin) * timestamp_seconds
        seconds = round(window_starts.get(record.window, 0.0) + offset, 2)
        if text_ids:  # the timestamp that closes a segment
            segments.append(Segment(start, seconds, tuple(text_ids)))
            start, text_ids = None, []
        else:  # one that opens the next (the second of a pair, or a window's first token)
            start = seconds
    if text_ids:
        segments.append(Segment(start, None, tuple(text_ids)))
    return tuple(segments)


def cues(
    segments: Sequence[Segment], decode: Callable[[Sequence[int]], str], audio_seconds: float
) -> tuple[Cue, ...]:
    """Each segment's text (decode: token ids -> text) and times that a player can show.

    A missing start is the previous segment's end (0 for the first); a missing end the next start, or
    the end of the audio. Times never go back and never pass the audio's end (a timestamp the model put in
    a window's padding).
    """
    found: list[Cue] = []
    previous_start = previous_end = 0.0
    for i, segment in enumerate(segments):
        start = previous_end if segment.start_seconds is None else segment.start_seconds
        end = segment.end_seconds
        if end is None:
            later = (s.start_seconds for s in segments[i + 1 :] if s.start_seconds is not None)
            end = next(later, audio_seconds)
        start = min(max(start, previous_start), audio_seconds)
        end = min(max(end, start), audio_seconds)
        found.append(Cue(round(start, 3), round(end, 3), decode(segment.token_ids), segment.token_ids))
        previous_start, previous_end = start, end
    return tuple(found)


def srt(segments: Sequence[Cue] | None) -> str:
    """SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, a blank line after each."""
    if segments is None:
        raise NoTimestamps("SRT")
    blocks = [
        f"{number}\n{srt_time(cue.start_seconds)} --> {srt_time(cue.end_seconds)}\n{text}\n"
        for number, (cue, text) in enumerate(_shown(segments, {"-->": "->"}), start=1)
    ]
    return "\n".join(blocks) + ("\n" if blocks else "")


def vtt(segments: Sequence[Cue] | None) -> str:
    """WebVTT: the header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm` with their text escaped."""
    if segments is None:
        raise NoTimestamps("WebVTT")
    blocks = [
        f"{vtt_time(cue.start_seconds)} --> {vtt_time(cue.end_seconds)}\n{text}\n"
        for cue, text in _shown(segments, VTT_ESCAPES)
    ]
    return "\n".join(["WEBVTT\n", *blocks]) + "\n"


def plain_text(text: str, segments: Sequence[Cue] | None) -> str:
    """One segment per line (as openai-whisper's .txt), or the whole text on one line without segments."""
    if segments is None:
        return f"{text}\n" if text else ""
    return "".join(f"{line}\n" for _, line in _shown(segments))


def srt_time(seconds: float) -> str:
    return _clock(seconds, ",")


def vtt_time(seconds: float) -> str:
    return _clock(seconds, ".")


def write(texts: Mapping[str, str], directory: str | Path, stem: str) -> list[Path]:
    """Write each format's text as `directory/stem.format` (directory made if missing); the paths written."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for output_format, text in texts.items():
        path = folder / f"{stem}.{output_format}"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def _shown(segments: Sequence[Cue], escapes: Mapping[str, str] | None = None) -> list[tuple[Cue, str]]:
    """The cues with text to show, each text on one line (a blank line would end a cue early) and
    escaped (escapes: replaced in order)."""
    shown = []
    for cue in segments:
        text = " ".join(cue.text.split())
        for old, new in (escapes or {}).items():
            text = text.replace(old, new)
        if text:
            shown.append((cue, text))
    return shown


def _clock(seconds: float, decimal_mark: str) -> str:
    milliseconds = round(seconds * 1000)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    whole, milliseconds = divmod(milliseconds, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{decimal_mark}{milliseconds:03d}"
