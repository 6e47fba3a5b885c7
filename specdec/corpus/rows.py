"""A corpus run's output rows, and the key that tells a rerun a file is done.

A row is `{audio, duration_seconds, language, text, segments, token_ids, stats, error, key}`: a
transcript (error None) or an error (the transcript fields None). The key is the file's content hash and
a digest of everything else that decides its transcript (models, device, decoding options with the
file's language, long-form mode), so a rerun with the same options skips the file wherever it lies
now, and a rerun with other options transcribes it again. The batch size and the number of workers
are not in it: they never change a transcript.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec.options import DecodeOptions

if TYPE_CHECKING:
    from specdec.api import Transcription

ROW_FIELDS = (
    "audio",
    "duration_seconds",
    "language",
    "text",
    "segments",
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
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def row_key(content_sha256: str, settings_digest: str) -> str:
    """`<sha256 of the file>-<settings digest>`: the same recording with the same settings, anywhere."""
    return f"{content_sha256}-{settings_digest}"


def transcription_row(transcription: Transcription, duration_seconds: float, key: str) -> dict:
    """A transcribed file's row: text, timed segments (None without timestamps), token ids, statistics."""
    segments = transcription.segments
    return {
        "audio": transcription.audio,
        "duration_seconds": duration_seconds,
        "language": transcription.language,
        "text": transcription.text,
        "segments": None if segments is None else [dataclasses.asdict(cue) for cue in segments],
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
