"""`python -m benchmarks long`: a long clip (10 minutes by default) transcribed in chunked mode, by the
target alone and with speculative decoding, on the same chunks, in rotated rounds.

Every chunk is encoded once beforehand; with `alpha` set every chunk's draft follows its own plan. The
merged transcripts and every chunk's tokens are compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.controlled import controlled, planted, row_plans
from benchmarks.harness import ASSETS, LANGUAGE, Record, median, rounds, table
from benchmarks.runners import Models, Run
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, load_audio
from specdec.longform.chunked import CHUNK_BATCH_SIZE, decode_chunks, merge_chunks, plan_chunks
from specdec.options import DecodeOptions
from specdec.whisper.features import features
from specdec.whisper.models import DraftKind
from specdec.whisper.tokens import timestamp_begin

GAP_SECONDS = 1.0  # silence between the cycled asset clips


@dataclass(frozen=True)
class LongBenchOptions:
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    minutes: float = 10.0  # length of the clip made from assets/ (ignored with `audio`)
    audio: str | None = None  # a long file to use instead
    alpha: float | None = 0.8  # planted agreement rate per chunk; None: the draft's own agreement
    draft: str | None = None  # draft folder name; None: the shared-encoder (distil-size) draft
    num_draft_tokens: int = 5  # k (with cost_aware, the k of its exploration steps)
    cost_aware: bool = True  # each step's k from the batch's measured costs, as the app's chunked mode
    max_new_tokens: int = 32  # per chunk
    batch_size: int = CHUNK_BATCH_SIZE  # chunks decoded together
    rounds: int = 2  # each way; ordered target, speculative, speculative, target, ...
    seed: int = 0  # model weights; chunk i's plan is seeded seed + i
    cache_dir: Path = DEFAULT_CACHE


def long_clip(minutes: float, assets: Path = ASSETS) -> np.ndarray:
    """assets/*.wav one after another, a second of silence between them, cut at `minutes` (16 kHz)."""
    clips = [load_audio(path) for path in sorted(assets.glob("*.wav"))]
    gap = np.zeros(round(GAP_SECONDS * SAMPLE_RATE), dtype=np.float32)
    wanted = round(minutes * 60 * SAMPLE_RATE)
    pieces, total = [], 0
    while total < wanted:
        for clip in clips:
            pieces += [clip, gap]
            total += len(clip) + len(gap)
    return np.concatenate(pieces)[:wanted]


@dataclass(frozen=True)
class LongRun:
    """One chunked transcription of the clip: every chunk's run (per batch of chunks), the merged ids."""

    runs: list[Run]
    merged_ids: tuple[int, ...]

    @property
    def results(self) -> list:
        return [result for run in self.runs for result in run.results]

    @property
    def decode_seconds(self) -> float:  # wall clock less encoder lookups (every chunk encoded beforehand)
        return sum(run.seconds for run in self.runs)

    @property
    def target_passes(self) -> int:  # batched target forward passes
        return sum(run.target_passes for run in self.runs)


class LongBench:
    """The preset's models, the clip, its chunks, every chunk encoded once per model, and the plans."""

    def __init__(self, options: LongBenchOptions, log: Callable[[str], None] = print) -> None:
        self.options, self.log = options, log
        self.models = Models(options.size, options.seed, options.cache_dir, log=log, assistants=False)
        self.pair = self.models.pairs[options.draft or self.models.shared_encoder_first()[0]]
        audio = options.audio
        self.waveform = (
            load_audio(audio, max_seconds=MAX_LONG_SECONDS) if audio else long_clip(options.minutes)
        )
        self.chunks = plan_chunks(len(self.waveform))
        self.encoder_seconds = self._encode_every_chunk()
        self.decode_options = DecodeOptions(  # fixed k, or cost-aware
            language=LANGUAGE, max_new_tokens=options.max_new_tokens,
            num_draft_tokens=options.num_draft_tokens, adaptive=False, cost_aware=options.cost_aware,
        )  # fmt: skip
        self.plans = None
        reference = self.run(speculative=False)
        if options.alpha is not None:
            self.plans = row_plans(reference.results, options.alpha, options.seed)

    @property
    def seconds(self) -> float:
        return len(self.waveform) / SAMPLE_RATE

    def _encode_every_chunk(self) -> dict[str, float]:
        """Encode every chunk once per model into the memo; the seconds each model's encoder took."""
        models = {"target": self.models.target}
        if self.pair.kind is not DraftKind.SHARED_ENCODER:
            models["draft"] = self.pair.draft
        seconds = {}
        for name, model in models.items():
            start = time.perf_counter()
            for index, chunk in enumerate(self.chunks):
                self.models.memo(model.model, features(model, self.waveform[chunk.start : chunk.stop]))
                self.log(f"encoded chunk {index + 1} of {len(self.chunks)} with the {name}")
            seconds[name] = time.perf_counter() - start
        return seconds

    def run(self, speculative: bool) -> LongRun:
        """The whole clip in chunked mode, one way: each batch of chunks with its own plans."""
        pair = self.pair if speculative else self.models.pair(None)
        runs, size = [], self.options.batch_size
        for first in range(0, len(self.chunks), size):
            group = self.chunks[first : first + size]
            plans = self.plans[first : first + len(group)] if speculative and self.plans else None
            options = planted(self.decode_options) if plans else self.decode_options
            start = time.perf_counter()
            results = decode_chunks(
                pair, self.waveform, group, options, speculative, len(group),
                encoder=self.models.memo, make_drafter=controlled(pair, plans) if plans else None,
            )  # fmt: skip
            runs.append(self.models.run_of(results, time.perf_counter() - start))
        ids = [result.token_ids for run in runs for result in run.results]
        target = self.models.target
        special = set(target.processor.tokenizer.all_special_ids)
        pieces = merge_chunks(ids, self.chunks, timestamp_begin(target.model.generation_config), special)
        return LongRun(runs, tuple(token for piece in pieces for token, _ in piece.tokens))


def run_and_report(options: LongBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the long-clip benchmark, print its table, write long.json."""
    record = Record(command, options)
    bench = LongBench(options)
    runs = rounds([False, True], lambda speculative, _: bench.run(speculative), options.rounds, log=bench.log)
    record |= summarise(bench, {speculative: runs[(speculative, None)] for speculative in (False, True)})
    print(figures(record))
    record.write(out_dir / "long.json")
    return record


def summarise(bench: LongBench, runs: dict[bool, list[LongRun]]) -> dict:
    """Medians of the rounds, the speedup, acceptance, and whether every chunk and the merge matched."""
    baseline, speculative = runs[False][-1], runs[True][-1]
    base_seconds = median(run.decode_seconds for run in runs[False])
    spec_seconds = median(run.decode_seconds for run in runs[True])
    drafted = sum(result.num_drafted for result in speculative.results)
    accepted = sum(result.num_accepted for result in speculative.results)
    encoder = sum(bench.encoder_seconds.values())
    pairs = zip(speculative.results, baseline.results, strict=True)
    mismatched = [i for i, (mine, theirs) in enumerate(pairs) if mine.token_ids != theirs.token_ids]
    options = bench.options
    return {
        "models": {"target": bench.models.target.name, "draft": bench.pair.draft.name},
        "audio_seconds": bench.seconds,
        "chunks": len(bench.chunks),
        "encoder_seconds": bench.encoder_seconds,  # once per model for every chunk, shared by both runs
        "tokens": sum(result.num_generated for result in speculative.results),
        "target_alone": {"decode_seconds": base_seconds, "target_passes": baseline.target_passes},
        "speculative": {
            "k": "cost-aware" if options.cost_aware else options.num_draft_tokens,
            "decode_seconds": spec_seconds,
            "target_passes": speculative.target_passes,
            "acceptance_rate": accepted / drafted if drafted else None,
            "planned_alpha": [plan.planned_rate for plan in bench.plans] if bench.plans else None,
        },
        "decode_speedup": base_seconds / spec_seconds,
        "total_speedup": (base_seconds + encoder) / (spec_seconds + encoder),
        "real_time_factor": {
            "target_alone": (base_seconds + encoder) / bench.seconds,
            "speculative": (spec_seconds + encoder) / bench.seconds,
        },
        "mismatched_chunks": mismatched,
        "merged_identical": speculative.merged_ids == baseline.merged_ids,
        "identical": speculative.merged_ids == baseline.merged_ids and not mismatched,
        "merged_tokens": len(baseline.merged_ids),
    }


def figures(report: dict) -> str:
    """The long-clip figures as a few aligned lines."""
    spec, encoder = report["speculative"], report["encoder_seconds"]
    alpha = "-" if spec["acceptance_rate"] is None else f"{spec['acceptance_rate']:.2f}"
    same = "yes" if report["identical"] else (
        f"NO: chunks {report['mismatched_chunks']}, merged identical: {report['merged_identical']}"
    )  # fmt: skip
    ways = [
        {"way": key.replace("_", " "), **report[key], "rtf": report["real_time_factor"][key]}
        for key in ("target_alone", "speculative")
    ]
    columns = [("", "way", "<14"), ("decode s", "decode_seconds", ">9.1f"), ("passes", "target_passes", ">8")]
    return "\n".join([
        f"{report['audio_seconds'] / 60:.1f} min of audio, {report['chunks']} chunks (batches of "
        f"{report['options']['batch_size']}), {report['tokens']} tokens; encoder (once, both runs): "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in encoder.items()),
        table(ways, [*columns, ("RTF", "rtf", ">7.3f")]),
        f"decode speedup {report['decode_speedup']:.2f}x (k: {spec['k']}) (with the encoder: "
        f"{report['total_speedup']:.2f}x), acceptance {alpha}; identical (every chunk and the merged "
        f"transcript): {same}",
    ])  # fmt: skip
