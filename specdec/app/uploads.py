"""The page's uploads in Gradio's cache: a refused one deleted at once, and the microphone's chunks read
and deleted as they arrive (the browser uploads ~2 a second)."""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import soundfile as sf

from specdec.app.store import UserError

RECENT_CHUNKS_KEPT = 64  # microphone chunks kept by upload path (take_chunk): ~3 MB at 48 kHz
RECENT_CHUNKS: OrderedDict[str, tuple[int, np.ndarray]] = OrderedDict()
RECENT_CHUNKS_LOCK = threading.Lock()  # the stream's handlers run in several threads
UPLOAD_CACHE = (60, 900)  # every minute, delete uploads older than 15 min (Gradio's delete_cache)
GRADIO_CACHE = Path(os.environ.get("GRADIO_TEMP_DIR", Path(tempfile.gettempdir()) / "gradio")).resolve()


def delete_upload(path: str | None) -> None:
    """Delete a refused upload at once (only a file in Gradio's upload cache, never an example)."""
    if path and Path(path).resolve().is_relative_to(GRADIO_CACHE):
        Path(path).unlink(missing_ok=True)


def take_chunk(path: str | None) -> tuple[int, np.ndarray] | None:
    """A streamed microphone chunk as (rate, samples), its file deleted at once: the browser uploads every
    chunk (~2 a second) as a file, which would otherwise stay in the upload cache for delete_cache's age
    (Gradio's own upload of a chunk, when it is not the file handed over, still waits for that age).

    Gradio names a cached upload by its content's hash and does not write a file it has cached before,
    so a chunk equal to an earlier one (digital silence, a looped clip) arrives under the path of a file
    already deleted here: the last chunks read are kept by path for that case."""
    if path is None:
        return None
    with RECENT_CHUNKS_LOCK:
        seen = RECENT_CHUNKS.get(path)
    if seen is not None:
        delete_upload(path)
        return seen
    try:
        samples, rate = sf.read(path, dtype="int16")
    except (sf.SoundFileError, RuntimeError, OSError) as error:
        reason = str(error).replace(path, Path(path).name)  # no server path in what the page shows
        raise UserError(f"Microphone stream: unreadable chunk ({reason})") from None
    finally:
        delete_upload(path)
    with RECENT_CHUNKS_LOCK:
        RECENT_CHUNKS[path] = rate, samples
        if len(RECENT_CHUNKS) > RECENT_CHUNKS_KEPT:
            RECENT_CHUNKS.popitem(last=False)
    return rate, samples
