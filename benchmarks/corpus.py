"""`python -m benchmarks corpus`: corpus throughput, the Ray Data command against a plain batched loop.

A corpus of `files` clips between seeded silences, transcribed per pair by `transcribe(batch_size=N)` and
by `specdec.corpus.transcribe_corpus` with 1 and 2 actors: hours of audio per hour, start to end, the load
average around each; every corpus row's tokens compared with the loop's.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, Record
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.corpus.inputs import list_inputs
from specdec.corpus.run import CorpusOptions, transcribe_corpus
from specdec.corpus.store import TRANSCRIPTS, read_rows
from specdec.options import DecodeOptions
from specdec.whisper.demo import build_demo_models

REAL_PAIR = ("base", "tiny.en")  # (target, draft): the bundled real checkpoints


@dataclass(frozen=True)
class CorpusBenchOptions:
    pairs: tuple[str, ...] = ("demo", "real")  # "demo": random-weight demo models; "real": base <- tiny.en
    files: int = 100  # corpus size
    batch_size: int = 8  # files decoded together, by each actor and by the loop
    workers: tuple[int, ...] = (1, 2)  # actor pool sizes of the corpus runs
    demo_max_new_tokens: int = 32  # the demo models' random weights never end a text on their own
    seed: int = 0  # the silences around each file
    device: str = "cpu"  # "cpu" or "cuda" (float16), for the loop and the actors alike
    cache_dir: Path = DEFAULT_CACHE  # where the demo models are built


def build_corpus(folder: Path, files: int, seed: int) -> list[Path]:
    """files WAV files: the clips in turn, each between its own two stretches of silence."""
    clips = [load_audio(path) for path in sorted([*ASSETS.glob("*.wav"), ASSETS / "en-jfk.flac"])]
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        before, after = (np.zeros(int(rng.uniform(0, s) * SAMPLE_RATE), np.float32) for s in (3.0, 2.0))
        path = folder / f"file-{i:04d}.wav"
        sf.write(path, np.concatenate([before, clips[i % len(clips)], after]), SAMPLE_RATE)
        paths.append(path)
    return paths


def pair_models(name: str, cache_dir: Path) -> tuple[str, str]:
    """(target, draft) as SpeculativeWhisper and the corpus command take them."""
    if name == "real":
        return REAL_PAIR
    if name != "demo":
        raise ValueError(f"unknown pair {name!r}: demo or real")
    models = build_demo_models(cache_dir / "corpus-demo")
    return str(models["target"]), str(models["draft-separate"])


def run_loop(
    models: tuple[str, str], paths: list[Path], decode: DecodeOptions, options: CorpusBenchOptions
) -> dict:
    """The plain loop: load the pair, transcribe every file in batches; seconds and tokens per file."""
    target, draft = models
    started = time.perf_counter()
    whisper = SpeculativeWhisper(draft_model=draft, final_model=target, device=options.device)
    loaded = time.perf_counter()
    files = [str(path) for path in paths]
    results = whisper.transcribe(
        files, decode, return_stats=True, errors="return", batch_size=options.batch_size
    )
    finished = time.perf_counter()
    del whisper
    gc.collect()
    return {
        "wall_seconds": finished - started,
        "decode_seconds": finished - loaded,
        "tokens": {os.path.abspath(r.audio): list(r.token_ids) for r in results},
    }


def run_corpus(
    models: tuple[str, str],
    folder: Path,
    out: Path,
    decode: DecodeOptions,
    options: CorpusBenchOptions,
    workers: int,
) -> dict:
    """The corpus command's run on a fresh output folder (Ray started and stopped inside)."""
    target, draft = models
    run = CorpusOptions(target, draft, options.device, decode, batch_size=options.batch_size, workers=workers)
    started = time.perf_counter()
    summary = transcribe_corpus(list_inputs(str(folder)), out, run, progress=False)
    wall = time.perf_counter() - started
    rows = read_rows(out / TRANSCRIPTS)
    return {
        "wall_seconds": wall,
        "summary": summary.to_dict(),
        "tokens": {row["audio"]: row["token_ids"] for row in rows},
        "failures": summary.failures,
    }


def measured(run, *args) -> dict:
    """A configuration's figures, with the load average (1 min) before and after it: the other jobs on the
    cores."""
    load_before = os.getloadavg()[0]
    figures = run(*args)
    return {**figures, "load_average": (load_before, os.getloadavg()[0])}


def run_and_report(options: CorpusBenchOptions, out_dir: Path, command: str) -> dict:
    """Build the corpus, run every pair and configuration, print the table, write corpus.json."""
    record = Record(command, options)
    with tempfile.TemporaryDirectory(prefix="specdec-corpus-bench-") as scratch:
        folder = Path(scratch) / "audio"
        paths = build_corpus(folder, options.files, options.seed)
        audio_seconds = sum(sf.info(path).duration for path in paths)
        print(f"{len(paths)} files, {audio_seconds / 3600:.3f} h of audio", flush=True)
        pairs = {}
        for pair in options.pairs:
            target, draft = pair_models(pair, options.cache_dir)
            decode = DecodeOptions(max_new_tokens=options.demo_max_new_tokens if pair == "demo" else None)
            loop = measured(run_loop, (target, draft), paths, decode, options)
            print(f"{pair} loop: {loop['wall_seconds']:.0f} s", flush=True)
            runs = {}
            for workers in options.workers:
                out = Path(scratch) / f"out-{pair}-{workers}"
                runs[workers] = measured(run_corpus, (target, draft), folder, out, decode, options, workers)
                print(f"{pair} corpus, {workers} actor(s): {runs[workers]['wall_seconds']:.0f} s", flush=True)
            pairs[pair] = {"target": target, "draft": draft, "loop": loop, "corpus": runs}
    record |= summarise(pairs, audio_seconds, options)
    print(table(record))
    record.write(out_dir / "corpus.json")
    return record


def summarise(pairs: dict, audio_seconds: float, options: CorpusBenchOptions) -> dict:
    """Throughput per configuration (hours of audio per hour), and whether every row matched the loop."""
    hours = audio_seconds / 3600

    def throughput(seconds: float) -> float:
        return hours / (seconds / 3600)

    results, identical = {}, True
    for pair, found in pairs.items():
        loop = found["loop"]
        rows = [{
            "config": f"transcribe(batch_size={options.batch_size}) loop",
            "wall_seconds": loop["wall_seconds"], "audio_hours_per_hour": throughput(loop["wall_seconds"]),
            "without_loading": throughput(loop["decode_seconds"]), "identical": True,
            "load_average": loop["load_average"],
        }]  # fmt: skip
        for workers, run in found["corpus"].items():
            same = run["tokens"] == loop["tokens"] and not run["failures"]
            identical &= same
            rows.append({
                "config": f"corpus, {workers} actor{'s' if workers > 1 else ''}",
                "wall_seconds": run["wall_seconds"], "audio_hours_per_hour": throughput(run["wall_seconds"]),
                "without_loading": None, "identical": same,
                "acceptance_rate": run["summary"]["acceptance_rate"], "load_average": run["load_average"],
            })  # fmt: skip
        results[pair] = {"target": found["target"], "draft": found["draft"], "rows": rows}
    return {"files": options.files, "audio_hours": hours, "pairs": results, "identical": identical}


COLUMNS = [
    ("pair", "pair", "<7"),
    ("configuration", "config", "<33"),
    ("wall s", "wall_seconds", ">8.0f"),
    ("h/h", "audio_hours_per_hour", ">9.1f"),
    ("h/h no load", "without_loading", ">13.1f"),
    ("same tokens", lambda row: "yes" if row["identical"] else "NO", ">13"),
    ("load", lambda row: "{:.1f}-{:.1f}".format(*row["load_average"]), ">11"),
]


def table(report: dict) -> str:
    """One line per pair and configuration."""
    rows = [{"pair": pair, **row} for pair, found in report["pairs"].items() for row in found["rows"]]
    head = f"{report['files']} files, {report['audio_hours']:.3f} h of audio; h/h: hours of audio per hour"
    return f"{head}\n{harness.table(rows, COLUMNS)}"
