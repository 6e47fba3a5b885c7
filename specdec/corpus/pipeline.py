"""The corpus pipeline on Ray Data: list -> read (Ray tasks) -> decode (an actor pool) -> write (the driver).

Read tasks (`reading`) hash each file, skip it if the output folder has a row for it (`rows.DoneRows`),
else decode and resample its audio; an unreadable file becomes an error row there. Each actor loads the
model pair once and decodes batches of files as `SpeculativeWhisper.transcribe` does (clips up to 30 s
together as one batch, longer ones long-form one by one), so every row is that file's transcript decoded
alone. The driver (`run`) writes each batch's rows to the store as they arrive.

An actor that dies is restarted and its batch retried (Ray Data's default for actor pools: without
limit); a file whose decoding raises becomes an error row, never a crash of the run.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE
from specdec.corpus.inputs import CorpusItem
from specdec.corpus.reading import READ_TASK_CPUS, read_audio
from specdec.corpus.rows import DoneIndex, RunSettings, error_row, transcription_row
from specdec.longform import is_long
from specdec.options import TranscribeOptions

MIN_WORKER_CPUS = 0.1
MAX_READ_BLOCKS = 4096  # read tasks: one per file, up to this many


@dataclass(frozen=True)
class Resources:
    """How the actor pool is laid out on the cluster."""

    workers: int  # actors, each with its own copy of the pair
    threads: int  # torch threads per actor
    cpus_per_worker: float  # Ray's logical CPUs each actor claims
    gpus_per_worker: float  # 0 on CPUs


def plan_resources(
    device: str,
    workers: int | None,
    threads: int | None,
    gpus_per_worker: float,
    node_cpus: list[float],
    cluster_gpus: float,
) -> Resources:
    """Actors for a cluster whose nodes have node_cpus CPUs each: one per GPU share on GPUs (up to a CPU
    each), one on CPUs unless told (up to its threads' CPUs). Either way the actors of a node together
    leave READ_TASK_CPUS to the read tasks: a pool that claims every CPU starves them and the pipeline
    stalls."""
    if device == "cuda":
        workers = workers or max(1, int(cluster_gpus // gpus_per_worker))
    workers = workers or 1
    largest = max(node_cpus, default=1.0)
    per_node = math.ceil(workers / max(len(node_cpus), 1))
    threads = threads or max(1, int(largest // per_node))
    share = max(MIN_WORKER_CPUS, (largest - READ_TASK_CPUS) / per_node)
    if device == "cuda":
        return Resources(workers, threads, round(min(1.0, share), 3), gpus_per_worker)
    return Resources(workers, threads, round(min(threads, share), 3), 0.0)


class Transcriber:
    """A Ray Data actor: the model pair, loaded once; each call decodes one batch of read files."""

    def __init__(self, settings: RunSettings, threads: int, batch_size: int) -> None:
        torch.set_num_threads(threads)
        self.settings = settings
        self.batch_size = batch_size
        self.whisper = SpeculativeWhisper(
            draft_model=settings.draft, final_model=settings.target, device=settings.device,
            compute_type=settings.compute_type,
        )  # fmt: skip

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        """Columns in: index, path, language, digest, key, resumed, row, waveform (`reading.read_audio`).
        Out: index, key, row (a file's row as JSON; "" for a resumed file, whose row the driver has)."""
        rows = [str(row) for row in batch["row"]]
        pending = [i for i, row in enumerate(rows) if not row and not batch["resumed"][i]]
        by_language: dict[str, list[int]] = defaultdict(list)
        for i in pending:
            by_language[str(batch["language"][i])].append(i)
        for language, indices in by_language.items():
            waveforms = [np.asarray(batch["waveform"][i], dtype=np.float32) for i in indices]
            paths = [str(batch["path"][i]) for i in indices]
            keys = [str(batch["key"][i]) for i in indices]
            for i, row in zip(indices, self.decode(waveforms, paths, keys, language or None), strict=True):
                rows[i] = json.dumps(row, ensure_ascii=False)
        return {"index": list(batch["index"]), "key": list(batch["key"]), "row": rows}

    def decode(self, waveforms: list[np.ndarray], paths: list[str], keys: list[str], language: str | None):
        """Rows for files of one language: up to 30 s together, longer ones long-form each on its own; if a
        batch raises, each of its files alone, so that only the file at fault becomes an error row."""
        options = self.settings.file_options(language)
        short = [i for i, waveform in enumerate(waveforms) if not is_long(waveform)]
        rows: dict[int, dict] = {}
        try:
            together = self.whisper.transcribe_waveforms(
                [waveforms[i] for i in short],
                TranscribeOptions.of(options, batch_size=max(len(short), 1)),
                [paths[i] for i in short],
            )
            rows.update(
                {i: self._row(t, waveforms[i], keys[i]) for i, t in zip(short, together, strict=True)}
            )
        except Exception:  # noqa: BLE001 - retried file by file below
            pass
        for i, waveform in enumerate(waveforms):
            if i not in rows:
                rows[i] = self._decode_one(waveform, paths[i], keys[i], options)
        return [rows[i] for i in range(len(waveforms))]

    def _decode_one(self, waveform: np.ndarray, path: str, key: str, options) -> dict:
        run = TranscribeOptions.of(options, long_form=self.settings.long_form, batch_size=self.batch_size)
        try:
            (transcription,) = self.whisper.transcribe_waveforms([waveform], run, [path])
        except Exception as error:  # noqa: BLE001 - one file's failure is its error row
            message = f"{path}: decoding failed: {type(error).__name__}: {error}"
            return error_row(path, message, key, len(waveform) / SAMPLE_RATE)
        return self._row(transcription, waveform, key)

    @staticmethod
    def _row(transcription, waveform: np.ndarray, key: str) -> dict:
        return transcription_row(transcription, len(waveform) / SAMPLE_RATE, key)


def build_dataset(
    items: list[CorpusItem],
    digests: list[str],
    done: DoneIndex,
    settings: RunSettings,
    resources: Resources,
    batch_size: int,
):
    """The lazy Ray Dataset of output batches (columns index, key, row)."""
    import ray.data

    records = [
        {"index": i, "path": item.path, "language": item.language or "", "digest": digest}
        for i, (item, digest) in enumerate(zip(items, digests, strict=True))
    ]
    dataset = ray.data.from_items(records, override_num_blocks=min(len(records), MAX_READ_BLOCKS))
    dataset = dataset.map(read_audio, fn_kwargs={"done": done}, num_cpus=READ_TASK_CPUS)
    return dataset.map_batches(
        Transcriber,
        fn_constructor_kwargs={
            "settings": settings,
            "threads": resources.threads,
            "batch_size": batch_size,
        },
        compute=ray.data.ActorPoolStrategy(size=resources.workers),
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=resources.cpus_per_worker,
        num_gpus=resources.gpus_per_worker,
    )
