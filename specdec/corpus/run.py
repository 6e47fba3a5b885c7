"""A corpus run from the driver's side: the Ray session, the resource plan, the rows as they come back,
the progress bar, the store and the summary."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specdec.corpus import watchdog
from specdec.corpus.inputs import CorpusItem
from specdec.corpus.pipeline import Resources, build_dataset, plan_resources
from specdec.corpus.quiet import RAY_DATA_ACTOR_NOTICE, stderr_without
from specdec.corpus.rows import DoneRows, RunSettings
from specdec.corpus.store import CorpusStore
from specdec.corpus.summary import Summary, summarise
from specdec.options import COMPUTE_TYPES, DEFAULT_COMPUTE_TYPE, DecodeOptions, check_long_form
from specdec.whisper.models import AUTO, default_pair, unavailable


class CorpusError(RuntimeError):
    """The run stopped before every file had its row; the rows written so far are kept."""


@dataclass(frozen=True)
class CorpusOptions:
    target: str = AUTO  # model names as `SpeculativeWhisper` takes them; "auto": by device
    draft: str = AUTO
    device: str = AUTO  # "cpu", "cuda", or "auto": cuda when the cluster has GPUs
    decode: DecodeOptions = DecodeOptions()  # language, timestamps, ... (a manifest's language wins)
    long_form: str = "sequential"  # files over 30 s: "sequential" (generate()'s output) or "chunked"
    batch_size: int = 8  # files per actor call, decoded together (the same output as one at a time)
    workers: int | None = None  # actors; None: one per GPU (gpus_per_worker each), or one on CPUs
    threads_per_worker: int | None = None  # torch threads per actor; None: a node's CPUs shared out
    gpus_per_worker: float = 1.0  # a fraction puts several actors on one GPU
    retry_errors: bool = False  # decode files again whose row in the output folder is an error
    compute_type: str = DEFAULT_COMPUTE_TYPE  # the target's encoder on a CPU (`SpeculativeWhisper`'s)

    def __post_init__(self) -> None:
        check_long_form(self.long_form)
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.device not in ("cpu", "cuda", AUTO):
            raise ValueError(f"device must be cpu, cuda or auto, not {self.device!r}")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(
                f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, not {self.compute_type!r}"
            )


def transcribe_corpus(
    items: Sequence[CorpusItem],
    out_dir: str | Path,
    options: CorpusOptions = CorpusOptions(),
    address: str | None = None,
    progress: bool = True,
) -> Summary:
    """Transcribe every item into out_dir (`store`), one row per item, skipping those already there, on
    the Ray cluster at address (None: RAY_ADDRESS, else a local one started and stopped here; a process
    already connected to Ray uses its session). Raises CorpusError if Ray stops the run."""
    start = time.perf_counter()
    with CorpusStore(out_dir) as store, ray_session(address) as stderr:
        settings, resources = _plan(options, local=not (address or os.environ.get("RAY_ADDRESS")))
        done = DoneRows(store.rows(), retry_errors=options.retry_errors)
        digests = [settings.digest(item.language) for item in items]
        dataset = build_dataset(list(items), digests, done.index(), settings, resources, options.batch_size)
        rows: list[dict | None] = [None] * len(items)
        made_now = [False] * len(items)  # decoded (or failed to read) in this run, not taken from out_dir
        with contextlib.closing(_Progress(len(items), progress, stderr)) as bar:
            try:
                for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                    indices = [int(index) for index in batch["index"]]
                    for i, key, row_json in zip(indices, batch["key"], batch["row"], strict=True):
                        made_now[i] = bool(row_json)
                        rows[i] = json.loads(row_json) if row_json else done.row(items[i].path, str(key))
                    # new to the journal: the rows made now, and transcripts lent from another path
                    store.append([rows[i] for i in indices if not done.holds(rows[i])])
                    bar.advance(len(indices), [rows[i] for i in indices if made_now[i]])
            except Exception as error:  # Ray's own exceptions: an actor that cannot start, a lost node
                raise CorpusError(_stopped(_last_line(error), out_dir)) from error
        if None in rows:  # never expected of Ray Data; refuse to write a summary with files missing
            raise CorpusError(_stopped(f"{rows.count(None)} files came back without a row", out_dir))
        summary = summarise(rows, made_now, time.perf_counter() - start)
        store.finish(rows, summary)
    return summary


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[TextIO]:
    """Ray for the length of a run: joined at address (or RAY_ADDRESS), else started here and stopped
    after (by `watchdog` if this process is killed first); quiet (no dashboard, workers' output kept in
    Ray's logs, no progress bars of Ray Data's, no notice about Ray Data's own actor arguments: `quiet`).
    Yields the real stderr, for the run's bar."""
    import ray
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the run has its own bar, in files
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    started = not ray.is_initialized()
    dog = watchdog.start() if started else None  # Ray's processes end with this one, even if killed
    try:
        if started:  # before the filter: the processes Ray starts keep the real stderr
            quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
            ray.init(address=address, **quiet)
        with stderr_without(RAY_DATA_ACTOR_NOTICE) as stderr:
            yield stderr
    finally:
        if started:
            ray.shutdown()
        if dog is not None:
            dog.kill()
            dog.wait()


def _plan(options: CorpusOptions, local: bool) -> tuple[RunSettings, Resources]:
    """Models, device and actors for the cluster Ray is connected to."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    gpus = sum(node.get("GPU", 0) for node in nodes)
    device = options.device if options.device != AUTO else ("cuda" if gpus else "cpu")
    if device == "cuda" and not gpus:
        raise ValueError("--device cuda: the Ray cluster has no GPU")
    default_target, default_draft = default_pair(device)
    target = default_target if options.target == AUTO else options.target
    draft = default_draft if options.draft == AUTO else options.draft
    if local:  # a local run: a missing model fails here, not in every actor
        for name in (target, draft):
            if (problem := unavailable(name)) is not None:
                raise ValueError(problem)
    settings = RunSettings(target, draft, device, options.long_form, options.decode, options.compute_type)
    resources = plan_resources(
        device,
        options.workers,
        options.threads_per_worker,
        options.gpus_per_worker,
        [node.get("CPU", 0.0) for node in nodes],
        gpus,
    )
    return settings, resources


def _last_line(error: Exception) -> str:
    """The cause of a Ray error in one line: the last line of the traceback it carries."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


def _stopped(reason: str, out_dir: str | Path) -> str:
    return f"the run stopped ({reason}); the rows written so far are kept in {out_dir}: run again to resume"


class _Progress:
    """A tqdm bar in files on stderr (none when stderr is not a terminal, or when not enabled), with the
    hours of audio transcribed in this run and the failures so far."""

    def __init__(self, total: int, enabled: bool, stderr: TextIO) -> None:
        from tqdm import tqdm

        disable = None if enabled else True  # None: shown on a terminal only
        self.bar = tqdm(total=total, unit="file", desc="corpus", file=stderr, disable=disable)
        self.audio_seconds, self.failures = 0.0, 0

    def advance(self, files: int, fresh: list[dict]) -> None:
        self.audio_seconds += sum(row["duration_seconds"] for row in fresh if row["error"] is None)
        self.failures += sum(row["error"] is not None for row in fresh)
        hours = self.audio_seconds / 3600
        audio = f"{hours:.2f} h" if hours >= 1 else f"{self.audio_seconds / 60:.1f} min"
        self.bar.set_postfix_str(f"{audio} of audio, {self.failures} failed", False)
        self.bar.update(files)

    def close(self) -> None:
        self.bar.close()
