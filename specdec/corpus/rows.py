"""A corpus run's output rows, and what tells a rerun a file is done.

A row is `{audio, duration_seconds, language, text, segments, words, token_ids, stats, error, key}`: a
transcript (error None; segments None without timestamps, words without word timestamps) or an error (the
transcript fields None). Rows belong to paths: every input path gets its own row. The key is the file's
content hash and a digest of everything else that decides its transcript (models, device, decoding options
with the file's language, long-form mode): a rerun with the same options keeps a path's row whose key
still matches, lends a transcript of the same bytes made under another path (a copy, or the file before it
moved) to this path without decoding it again, and transcribes anything else. The batch size and the
number of workers are not in the key: they never change a transcript.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec.options import DEFAULT_COMPUTE_TYPE, DecodeOptions

if TYPE_CHECKING:
    from specdec.api import Transcription

ROW_FIELDS = (
    "audio",
    "duration_seconds",
    "language",
    "text",
    "segments",
    "words",
    "token_ids",
    "stats",
    "error",
    "key",
)
KEY_VERSION = 1  # bumped when the same file and options could give another transcript


@dataclass(frozen=True)
class RunSettings:
    """What, besides a file's bytes, decides its transcript."""

    target: str  # model names as resolved ("auto" already replaced)
    draft: str
    device: str  # "cpu" or "cuda"
    long_form: str  # "sequential" or "chunked"
    options: DecodeOptions  # the run's options; a manifest's language replaces options.language
    compute_type: str = DEFAULT_COMPUTE_TYPE  # the target's encoder (`SpeculativeWhisper(compute_type=)`)

    def file_options(self, language: str | None) -> DecodeOptions:
        """The options one file is decoded with: its own language where the manifest gives one."""
        return dataclasses.replace(self.options, language=language or self.options.language)

    def digest(self, language: str | None) -> str:
        """A short digest of the settings one file is decoded with."""
        fields = {
            "version": KEY_VERSION,
            "target": self.target,
            "draft": self.draft,
            "device": self.device,
            "long_form": self.long_form,
            "options": dataclasses.asdict(self.file_options(language)),
        }
        if self.compute_type != DEFAULT_COMPUTE_TYPE:  # the rows of runs before compute types keep their keys
            fields["compute_type"] = self.compute_type
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def row_key(content_sha256: str, settings_digest: str) -> str:
    """`<sha256 of the file>-<settings digest>`: the same recording with the same settings, anywhere."""
    return f"{content_sha256}-{settings_digest}"


def transcription_row(transcription: Transcription, duration_seconds: float, key: str) -> dict:
    """A transcribed file's row: text, timed segments (None without timestamps), token ids, statistics."""
    segments, words = transcription.segments, transcription.words
    return {
        "audio": transcription.audio,
        "duration_seconds": duration_seconds,
        "language": transcription.language,
        "text": transcription.text,
        "segments": None if segments is None else [dataclasses.asdict(cue) for cue in segments],
        "words": None if words is None else [dataclasses.asdict(word) for word in words],
        "token_ids": list(transcription.token_ids),
        "stats": transcription.result.stats(),
        "error": None,
        "key": key,
    }


def error_row(audio: str, error: str, key: str | None, duration_seconds: float | None = None) -> dict:
    """A file that could not be transcribed. key None: its bytes could not be read, so it has no key
    and a rerun tries it again; with a key, the same bytes and options fail the same way and a rerun
    skips it (unless asked to retry errors)."""
    return {
        **dict.fromkeys(ROW_FIELDS),
        "audio": audio,
        "duration_seconds": duration_seconds,
        "error": error,
        "key": key,
    }


@dataclass(frozen=True)
class DoneIndex:
    """What a read task needs to know to skip a file: small, since every read task gets a copy."""

    keys: frozenset[str]  # keys with a transcript: done under any path (same bytes, same settings)
    failed: frozenset[tuple[str, str]]  # (path, key) of error rows: done under that path only

    def is_done(self, path: str, key: str) -> bool:
        return key in self.keys or (path, key) in self.failed


class DoneRows:
    """The rows earlier runs left in the output folder, as a rerun reuses them: a path's own row when its
    key still matches; else a transcript of the same bytes and settings made under another path, given
    this path as its audio. An error row is not lent to another path: its message names its own file."""

    def __init__(self, rows: Iterable[dict], retry_errors: bool = False) -> None:
        self.by_file = {
            (row["audio"], row["key"]): row for row in rows if not (retry_errors and row["error"] is not None)
        }
        self.transcripts = {key: row for (_, key), row in self.by_file.items() if row["error"] is None}

    def index(self) -> DoneIndex:
        failed = frozenset(file for file, row in self.by_file.items() if row["error"] is not None)
        return DoneIndex(frozenset(self.transcripts), failed)

    def row(self, path: str, key: str) -> dict:
        """The row of a file that `index` says is done."""
        own = self.by_file.get((path, key))
        return own if own is not None else {**self.transcripts[key], "audio": path}

    def holds(self, row: dict) -> bool:
        """Whether the output folder already has this row under its own path."""
        return (row["audio"], row["key"]) in self.by_file
