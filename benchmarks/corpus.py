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

from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, Record, ratio, table
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.corpus.inputs import list_inputs
from specdec.corpus.run import CorpusOptions, transcribe_corpus
from specdec.corpus.store import TRANSCRIPTS, read_rows
from specdec.options import DecodeOptions
from specdec.whisper.demo import build_demo_models


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
    paths = [folder / f"file-{i:04d}.wav" for i in range(files)]
    for i, path in enumerate(paths):
        before, after = (np.zeros(int(rng.uniform(0, s) * SAMPLE_RATE), np.float32) for s in (3.0, 2.0))
        sf.write(path, np.concatenate([before, clips[i % len(clips)], after]), SAMPLE_RATE)
    return paths


def pair_models(name: str, cache_dir: Path) -> tuple[str, str]:
    """(target, draft) as SpeculativeWhisper and the corpus command take them."""
    if name not in ("demo", "real"):
        raise ValueError(f"unknown pair {name!r}: demo or real")
    if name == "real":
        return "base", "tiny.en"  # the bundled real checkpoints
    models = build_demo_models(cache_dir / "corpus-demo")
    return str(models["target"]), str(models["draft-separate"])


COLUMNS = [
    ("pair", "pair", "<7"),
    ("configuration", "config", "<33"),
    ("wall s", "wall_seconds", ">8.0f"),
    ("h/h", "audio_hours_per_hour", ">9.1f"),
    ("h/h no load", "without_loading", ">13.1f"),
    ("same tokens", lambda row: "yes" if row["identical"] else "NO", ">13"),
    ("load", lambda row: "{:.1f}-{:.1f}".format(*row["load_average"]), ">11"),
]


def transcribed(models: tuple[str, str], paths: list[Path], decode: DecodeOptions,
                options: CorpusBenchOptions, workers: int) -> tuple[dict, dict]:  # fmt: skip
    """The plain loop (workers 0) or the corpus command with that many actors: tokens per file, its row."""
    started, size, load_before = time.perf_counter(), options.batch_size, os.getloadavg()[0]
    if workers:
        out = Path(tempfile.mkdtemp(dir=paths[0].parent.parent))  # a fresh folder beside the audio's
        corpus = CorpusOptions(*models, options.device, decode, batch_size=size, workers=workers)
        summary = transcribe_corpus(list_inputs(str(paths[0].parent)), out, corpus, progress=False)
        config, finished = f"corpus, {workers} actor{'s' * (workers > 1)}", time.perf_counter()
        fields = {"acceptance_rate": summary.acceptance_rate, "failures": summary.failures}
        tokens = {row["audio"]: row["token_ids"] for row in read_rows(out / TRANSCRIPTS)}
    else:
        whisper = SpeculativeWhisper(draft_model=models[1], final_model=models[0], device=options.device)
        loaded, files = time.perf_counter(), [str(path) for path in paths]
        found = whisper.transcribe(files, decode, return_stats=True, errors="return", batch_size=size)
        config, finished = f"transcribe(batch_size={size}) loop", time.perf_counter()
        fields = {"decode_seconds": finished - loaded, "failures": 0}
        del whisper  # its memory back before the actors load their own
        gc.collect()
        tokens = {os.path.abspath(result.audio): list(result.token_ids) for result in found}
    fields["load_average"] = (load_before, os.getloadavg()[0])  # the other jobs on the cores
    return tokens, {"config": config, "wall_seconds": finished - started, **fields}


def run_and_report(options: CorpusBenchOptions, out_dir: Path, command: str) -> dict:
    """Build the corpus, run every pair and configuration, print the table, write corpus.json."""
    record, pairs, loop_tokens = Record(command, options), {}, {}
    with tempfile.TemporaryDirectory(prefix="specdec-corpus-bench-") as scratch:
        paths = build_corpus(Path(scratch) / "audio", options.files, options.seed)
        audio_seconds = sum(sf.info(path).duration for path in paths)
        print(f"{len(paths)} files, {audio_seconds / 3600:.3f} h of audio", flush=True)
        for pair in options.pairs:
            models = pair_models(pair, options.cache_dir)
            decode = DecodeOptions(max_new_tokens=options.demo_max_new_tokens if pair == "demo" else None)
            pairs[pair] = {"target": models[0], "draft": models[1], "rows": []}
            for workers in (0, *options.workers):  # the loop first: every corpus run must give its tokens
                tokens, row = transcribed(models, paths, decode, options, workers)
                loop_tokens = loop_tokens if workers else tokens
                row |= {"audio_hours_per_hour": audio_seconds / row["wall_seconds"],
                        "without_loading": ratio(audio_seconds, row.pop("decode_seconds", None)),
                        "identical": tokens == loop_tokens and not row.pop("failures")}  # fmt: skip
                pairs[pair]["rows"].append(row)
                print(f"{pair} {row['config']}: {row['wall_seconds']:.0f} s", flush=True)
    record.update(files=options.files, audio_hours=audio_seconds / 3600, pairs=pairs)
    rows = [{"pair": pair, **row} for pair, found in pairs.items() for row in found["rows"]]
    hours = f"{options.files} files, {record['audio_hours']:.3f} h of audio; h/h: hours of audio per hour"
    print(f"{hours}\n{table(rows, COLUMNS)}")
    record.verdict([f"{r['pair']} {r['config']}" for r in rows if not r["identical"]], "identical tokens")
    record.write(out_dir / "corpus.json")
    return record
