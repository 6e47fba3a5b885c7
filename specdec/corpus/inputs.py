"""What a corpus run transcribes: a folder (recursive), a glob, a single file, or a manifest (CSV or JSONL
with a path column and an optional language column)."""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

# what a folder listing keeps: the formats audio.load_audio reads (soundfile, or ffmpeg through PyAV)
AUDIO_EXTENSIONS = frozenset(
    (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac", ".wma", ".aif", ".aiff", ".au")
    + (".caf", ".webm", ".mp4", ".mkv", ".mov", ".avi")
)
MANIFEST_EXTENSIONS = (".csv", ".jsonl")
PATH_COLUMNS = ("path", "audio", "file")  # the first one a manifest has names its files
LANGUAGE_COLUMN = "language"
HASH_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class CorpusItem:
    """One file to transcribe."""

    path: str  # absolute, so that every Ray worker finds it
    language: str | None = None  # a manifest's per-file language; None: the run's own (or detected)


def list_inputs(spec: str) -> list[CorpusItem]:
    """The files a command-line INPUT names, in a stable order (sorted; a manifest's own order).

    Raises ValueError when it names nothing. A manifest may list files that do not exist: they become
    error rows, as any unreadable file does."""
    path = Path(spec).expanduser()
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file()]
        items = [CorpusItem(os.path.abspath(p)) for p in sorted(found)]
        where = f"no audio files ({', '.join(sorted(AUDIO_EXTENSIONS))}) under {spec}"
    elif path.is_file() and path.suffix.lower() in MANIFEST_EXTENSIONS:
        items, where = read_manifest(path), f"the manifest {spec} lists no files"
    elif path.is_file():
        items, where = [CorpusItem(os.path.abspath(path))], ""
    else:
        matches = sorted(glob.glob(os.path.expanduser(spec), recursive=True))
        items = [CorpusItem(os.path.abspath(match)) for match in matches if os.path.isfile(match)]
        where = f"{spec}: no such folder or file, and no file matches it as a glob"
    if not items:
        raise ValueError(where)
    return list(dict.fromkeys(items))  # a file listed twice (same language) is transcribed once


def read_manifest(path: Path) -> list[CorpusItem]:
    """A CSV (with a header) or JSONL manifest; relative paths are relative to the manifest's folder."""
    with path.open(encoding="utf-8", newline="") as file:
        if path.suffix.lower() == ".csv":
            records = list(csv.DictReader(file))
        else:
            records = [json.loads(line) for line in file if line.strip()]
    if not records:
        return []
    column = next((name for name in PATH_COLUMNS if name in records[0]), None)
    if column is None:
        raise ValueError(f"{path}: a manifest needs a column named one of {', '.join(PATH_COLUMNS)}")
    items = []
    for number, record in enumerate(records, start=1):
        if not record.get(column):
            raise ValueError(f"{path}: entry {number} has no {column}")
        language = record.get(LANGUAGE_COLUMN) or None
        items.append(CorpusItem(os.path.abspath(path.parent / record[column]), language))
    return items


def content_hash(path: str) -> str:
    """SHA-256 of a file's bytes (hex): the same recording under another name or folder is the same file."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()
