"""`python -m benchmarks long`: a long clip (10 minutes by default) transcribed in chunked mode, by the
target alone and with speculative decoding, on the same chunks and device.

The clip is the given file, or assets/*.wav cycled with a second of silence between clips until it is
`minutes` long. Both runs go through `longform.chunked.decode_chunks` (30 s chunks with 5 s strides,
`batch_size` chunks decoded together) and the pipeline's merge (`longform.chunked.merge_chunks`); the
merged transcripts and every chunk's tokens are compared.

Each chunk is encoded once per model before the timed runs (`tokens.EncoderMemo`): the encoder is the same
work in both runs and is reported apart. With `alpha` set, every chunk's draft follows its own
controlled-acceptance plan (`benchmarks.controlled`, drawn from that chunk's target-alone tokens); the real
draft still runs in full. Runs are ordered target, speculative, speculative, target (medians of the
rounds), so that neither is favoured by the machine warming up or slowing down.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.batch import RowEncoder
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.common import report_header, write_json
from benchmarks.controlled import controlled, planted, row_plans
from benchmarks.tokens import ASSETS, Bench, BenchOptions
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, load_audio
from specdec.longform.chunked import (
    CHUNK_BATCH_SIZE,
    Chunk,
    decode_chunks,
    merge_chunks,
    plan_chunks,
)
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import features
from specdec.whisper.models import DraftKind, ModelPair
from specdec.whisper.tokens import timestamp_begin

LANGUAGE = "en"  # forced: no language-detection pass in any timing
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
    """One chunked transcription of the clip: every chunk's result, the merged ids, the decode time."""

    results: list[DecodeResult]
    merged_ids: tuple[int, ...]
    decode_seconds: float  # wall clock minus encoder lookups (every chunk was encoded beforehand)
    target_passes: int  # batched target forward passes


class LongBench:
    """Models (`bench.Bench`), the clip, its chunks, every chunk encoded once per model, and the plans."""

    def __init__(self, options: LongBenchOptions, log: Callable[[str], None] = print) -> None:
        self.options, self.log = options, log
        self.bench = Bench(
            BenchOptions(size=options.size, seed=options.seed, cache_dir=options.cache_dir), log
        )
        self.bench.assistants.clear()  # transformers' assisted generation has no chunked batch mode
        self.pair = self.bench.pairs[options.draft or self._shared_encoder_draft()]
        self.waveform = (
            load_audio(options.audio, max_seconds=MAX_LONG_SECONDS)
            if options.audio
            else long_clip(options.minutes)
        )
        self.chunks = plan_chunks(len(self.waveform))
        self.encoder = RowEncoder(self.bench.memo)
        self.encoder_seconds = self._encode_every_chunk()
        self.decode_options = DecodeOptions(
            language=LANGUAGE,
            max_new_tokens=options.max_new_tokens,
            num_draft_tokens=options.num_draft_tokens,
            adaptive=False,  # fixed k, or cost-aware
            cost_aware=options.cost_aware,
        )
        self.target_only = ModelPair(self.bench.target, None, None, None)
        reference = self.run(speculative=False)
        self.plans = (
            row_plans(reference.results, options.alpha, options.seed) if options.alpha is not None else None
        )

    @property
    def seconds(self) -> float:
        return len(self.waveform) / SAMPLE_RATE

    def _shared_encoder_draft(self) -> str:
        shared = [n for n, p in self.bench.pairs.items() if p.kind is DraftKind.SHARED_ENCODER]
        return (shared or list(self.bench.pairs))[0]

    def _encode_every_chunk(self) -> dict[str, float]:
        """Encode every chunk once per model into the memo; the seconds each model's encoder took."""
        models = {"target": self.bench.target}
        if self.pair.kind is not DraftKind.SHARED_ENCODER:
            models["draft"] = self.pair.draft
        seconds = {}
        for name, model in models.items():
            start = time.perf_counter()
            for index, chunk in enumerate(self.chunks):
                self.encoder(model.model, features(model, self.waveform[chunk.start : chunk.stop]))
                self.log(f"encoded chunk {index + 1} of {len(self.chunks)} with the {name}")
            seconds[name] = time.perf_counter() - start
        return seconds

    def run(self, speculative: bool) -> LongRun:
        """The whole clip in chunked mode, one way."""
        pair = self.pair if speculative else self.target_only
        size = self.options.batch_size
        results, seconds, passes = [], 0.0, 0
        for first in range(0, len(self.chunks), size):  # its own plans for each batch of chunks
            group = self.chunks[first : first + size]
            group_results, group_seconds = self._decode_group(pair, group, speculative, first)
            results, seconds = results + group_results, seconds + group_seconds
            passes += len({p.index for result in group_results for p in result.passes})  # shared by rows
        ids = [result.token_ids for result in results]
        config = self.bench.target.model.generation_config
        special = set(self.bench.target.processor.tokenizer.all_special_ids)
        pieces = merge_chunks(ids, self.chunks, timestamp_begin(config), special)
        merged = tuple(token for piece in pieces for token, _ in piece.tokens)
        return LongRun(results, merged, seconds, passes)

    def _decode_group(
        self, pair: ModelPair, group: list[Chunk], speculative: bool, first: int
    ) -> tuple[list[DecodeResult], float]:
        """One batch of chunks (chunks[first:] of it): their results and decode seconds."""
        plans = self.plans[first : first + len(group)] if speculative and self.plans else None
        make_drafter = controlled(pair, plans) if plans else None
        options = planted(self.decode_options) if plans else self.decode_options
        start = time.perf_counter()
        results = decode_chunks(
            pair, self.waveform, group, options, speculative, len(group),
            encoder=self.encoder, make_drafter=make_drafter,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        # the batch's encoder calls (shared by its rows) are memo lookups: not decoding
        encodings = {e.index: e for result in results for e in result.encodings}
        return results, seconds - sum(e.seconds for e in encodings.values())


def run_and_report(options: LongBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the long-clip benchmark, print its table, write long.json."""
    started = time.perf_counter()
    bench = LongBench(options)
    runs: dict[bool, list[LongRun]] = {False: [], True: []}
    for speculative in [False, True, True, False] * ((options.rounds + 1) // 2):
        if len(runs[speculative]) < options.rounds:
            runs[speculative].append(bench.run(speculative))
            name = "speculative" if speculative else "target alone"
            bench.log(f"{name}: decode {runs[speculative][-1].decode_seconds:.1f} s")
    report = summarise(bench, runs, command)
    report["wall_seconds"] = time.perf_counter() - started
    print(table(report))
    write_json(report, out_dir / "long.json")
    print(f"wrote {out_dir / 'long.json'} ({report['wall_seconds']:.0f} s)")
    return report


def summarise(bench: LongBench, runs: dict[bool, list[LongRun]], command: str) -> dict:
    """Medians of the rounds, the speedup, acceptance, and whether every chunk and the merge matched."""
    baseline, speculative = runs[False][-1], runs[True][-1]
    base_seconds = statistics.median(run.decode_seconds for run in runs[False])
    spec_seconds = statistics.median(run.decode_seconds for run in runs[True])
    drafted = sum(result.num_drafted for result in speculative.results)
    accepted = sum(result.num_accepted for result in speculative.results)
    tokens = sum(result.num_generated for result in speculative.results)
    encoder = sum(bench.encoder_seconds.values())
    mismatched = [
        i
        for i, (mine, theirs) in enumerate(zip(speculative.results, baseline.results, strict=True))
        if mine.token_ids != theirs.token_ids
    ]
    options = bench.options
    return {
        **report_header(command, options),
        "models": {"target": bench.bench.target.name, "draft": bench.pair.draft.name},
        "audio_seconds": bench.seconds,
        "chunks": len(bench.chunks),
        "encoder_seconds": bench.encoder_seconds,  # once per model for every chunk, shared by both runs
        "tokens": tokens,
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


def table(report: dict) -> str:
    """The long-clip figures as a few aligned lines."""
    base, spec = report["target_alone"], report["speculative"]
    alpha = "-" if spec["acceptance_rate"] is None else f"{spec['acceptance_rate']:.2f}"
    same = (
        "yes"
        if report["merged_identical"] and not report["mismatched_chunks"]
        else f"NO: chunks {report['mismatched_chunks']}, merged identical: {report['merged_identical']}"
    )
    encoder = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report["encoder_seconds"].items())
    return "\n".join(
        [
            f"{report['audio_seconds'] / 60:.1f} min of audio, {report['chunks']} chunks "
            f"(batches of {report['options']['batch_size']}), {report['tokens']} tokens; "
            f"encoder (once, both runs): {encoder}",
            f"{'':<14}{'decode s':>9}{'passes':>8}{'RTF':>7}",
            f"{'target alone':<14}{base['decode_seconds']:>9.1f}{base['target_passes']:>8}"
            f"{report['real_time_factor']['target_alone']:>7.3f}",
            f"{'speculative':<14}{spec['decode_seconds']:>9.1f}{spec['target_passes']:>8}"
            f"{report['real_time_factor']['speculative']:>7.3f}",
            f"decode speedup {report['decode_speedup']:.2f}x (k: {spec['k']}) "
            f"(with the encoder: {report['total_speedup']:.2f}x), acceptance {alpha}; "
            f"identical (every chunk and the merged transcript): {same}",
        ]
    )
