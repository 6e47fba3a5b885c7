"""The read stage of a corpus run, as Ray tasks: a file's key, and its audio unless it is done.

Kept apart from the decoding actors so that a read task's worker imports no torch: only the audio
decoders (soundfile, PyAV) and the resampler.
"""

from __future__ import annotations

import json

import numpy as np

from specdec.audio import MAX_LONG_SECONDS, AudioError, load_audio
from specdec.corpus.inputs import content_hash
from specdec.corpus.rows import DoneIndex, error_row, row_key

READ_TASK_CPUS = 0.5  # a read task's claim: actors leave at least this much of each node to reading


def read_audio(item: dict, done: DoneIndex) -> dict:
    """A read task: the file's key, and its 16 kHz waveform unless it is done (the driver has its row)
    or unreadable (then its error row, as JSON, in "row")."""
    path, digest = item["path"], item["digest"]
    found = {**item, "key": "", "resumed": False, "row": "", "waveform": np.zeros(0, np.float32)}
    try:
        found["key"] = row_key(content_hash(path), digest)
    except OSError as error:
        reason = error.strerror or str(error)
        return {
            **found,
            "row": json.dumps(error_row(path, f"{path}: could not read the file ({reason})", None)),
        }
    if done.is_done(path, found["key"]):
        return {**found, "resumed": True}
    try:
        waveform = load_audio(path, max_seconds=MAX_LONG_SECONDS)
    except Exception as error:  # noqa: BLE001 - an unreadable file is an error row, whatever the decoder raised
        message = str(error) if isinstance(error, AudioError) else f"{path}: {type(error).__name__}: {error}"
        return {**found, "row": json.dumps(error_row(path, message, found["key"]))}
    return {**found, "waveform": waveform}
