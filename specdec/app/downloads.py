"""The Compare view's downloads: the speculative transcript as SRT and WebVTT subtitles and as JSON (text,
segments and the full trace), written into the browser session's own folder under the app's file cache.

The folder holds one run's files: it is emptied before each run and when the page closes, and Gradio's
`delete_cache` removes files it served once they are old.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from specdec.api import Transcription

DOWNLOADS = {"srt": "SRT subtitles", "vtt": "WebVTT subtitles", "json": "JSON (full trace)"}
FOLDER = "specdec-downloads"  # under the app's file cache


def session_folder(cache: Path, session: str | None) -> Path:
    """A browser session's folder under the cache, named by a hash (the session id comes from the client)."""
    return cache / FOLDER / hashlib.sha256((session or "").encode()).hexdigest()[:32]


def write(transcription: Transcription | None, folder: Path) -> list[str | None]:
    """Empty the folder, then write the transcript's downloads named after its audio: one path per entry
    of DOWNLOADS, None where there is nothing to offer (subtitles of a run without timestamps)."""
    clear(folder)
    if transcription is None:
        return [None] * len(DOWNLOADS)
    timed = transcription.segments is not None
    formats = [name for name in DOWNLOADS if timed or name == "json"]
    written = {path.suffix.lstrip("."): str(path) for path in transcription.save(folder, formats)}
    return [written.get(name) for name in DOWNLOADS]


def clear(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
