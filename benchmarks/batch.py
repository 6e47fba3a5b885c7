"""`python -m benchmarks batch`: batched speculative decoding against the batched target alone.

For each batch size (1, 2, 4, 8, 16), the same rows are decoded by the target alone and by each draft at
controlled acceptance α (`benchmarks.controlled`: every row its own plan, drawn from its clip's
target-only tokens with its own seed), all through `engine.windows.decode_clips`. Rows cycle through
assets/*.wav (row i is clip i mod 5), so the rows of batch 8 are the first 8 rows of batch 16.

Encoder time is not the subject: each clip is encoded once per model (`tokens.EncoderMemo`, row by row)
and every batch reuses the outputs. Decode time is the batch's wall clock minus its encoder lookups; the
first target pass (every row's cross-attention keys and values, the same work in every configuration) is
timed apart, as in `benchmarks.tokens`. Configurations run interleaved, `rounds` rounds, medians. Every row's
tokens are compared with the batched target alone and with its clip decoded alone at batch 1.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.common import goal, print_goals, report_header, write_json
from benchmarks.controlled import controlled, planted, row_plans
from benchmarks.tokens import Bench, BenchOptions, Clip, Config, EncoderMemo, warm_up_tokens
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import PairFeatures
from specdec.whisper.models import DraftKind, ModelPair

LANGUAGE = "en"  # forced: no language-detection pass in any timing
GOALS = {8: 1.5, 16: 1.2}  # batch size -> speedup over the batched target alone


@dataclass(frozen=True)
class BatchBenchOptions:
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    quick: bool = False  # the shared-encoder (distil-size) draft only, 24 tokens, 1 round
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    alpha: float = 0.8  # planted agreement rate of every row
    num_draft_tokens: int = 5  # k
    max_new_tokens: int | None = None  # per row; None: 24 quick, 32 otherwise
    repeats: int | None = None  # interleaved rounds; None: 1 quick, 3 otherwise
    seed: int = 0  # model weights; row i's plan is seeded seed + i
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"
    dtype: str = "float32"  # the models' weights and activations: float32, float16 or bfloat16

    @property
    def rounds(self) -> int:
        return self.repeats or (1 if self.quick else 3)

    @property
    def tokens(self) -> int:
        return self.max_new_tokens or (24 if self.quick else 32)


@dataclass(frozen=True)
class BatchConfig:
    name: str
    batch_size: int
    draft: str | None = None  # draft folder name; None: the target alone
    cost_aware: bool = False  # k chosen each step from measured costs (`engine.draft_length`); else k fixed


@dataclass
class BatchMeasurement:
    seconds: list[float] = field(default_factory=list)  # decode phase of each round
    first_pass_seconds: list[float] = field(default_factory=list)
    results: list[DecodeResult] = field(default_factory=list)  # per row, from the last round
    target_passes: int = 0  # batched target forward passes


class RowEncoder:
    """decode_clips' encoder: each row from the memo (one encoding per clip and model)."""

    def __init__(self, memo: EncoderMemo) -> None:
        self.memo = memo

    def __call__(self, model: nn.Module, features: torch.Tensor) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        hidden = torch.cat([self.memo(model, row[None])[0] for row in features])  # (batch, 1500, d_model)
        return hidden, time.perf_counter() - start  # lookups: subtracted from the decode time


def _released(*_: object) -> None:
    raise RuntimeError("the batch benchmark encodes every clip once, before its encoder is released")


class BatchBench:
    """Models (`bench.Bench`), clips, rows and their plans; runs one configuration once."""

    def __init__(self, options: BatchBenchOptions, log: Callable[[str], None] = print) -> None:
        self.options, self.log = options, log
        self.bench = Bench(
            BenchOptions(
                size=options.size,
                seed=options.seed,
                cache_dir=options.cache_dir,
                device=options.device,
                dtype=options.dtype,
            ),
            log,
        )
        self.bench.assistants.clear()  # transformers' assisted generation is not run here
        self.clips: list[Clip] = self.bench.clips()
        self.encoder = RowEncoder(self.bench.memo)
        rows = max(options.batch_sizes)
        self.row_clips = [self.clips[i % len(self.clips)] for i in range(rows)]
        # batch 1, target alone, each clip: the reference tokens and the plans' target continuations
        alone = Config("specdec target-only", "specdec")
        self.alone = {clip.name: self.bench.run(alone, clip, options.tokens).result for clip in self.clips}
        if all(len({t.window for t in result.tokens}) == 1 for result in self.alone.values()):
            self._release_target_encoder()  # every window the batches need is memoised
        self.plans = row_plans([self.alone[c.name] for c in self.row_clips], options.alpha, options.seed)
        drafts = sorted(
            self.bench.pairs, key=lambda n: self.bench.pairs[n].kind is not DraftKind.SHARED_ENCODER
        )
        self.drafts = drafts[:1] if options.quick else drafts  # the shared-encoder (distil-size) one first
        self.configs = [
            BatchConfig(name, size, draft, cost_aware)
            for size in options.batch_sizes
            for name, draft, cost_aware in [
                ("target alone", None, False),
                *((f"{d} k={options.num_draft_tokens}", d, False) for d in self.drafts),
                *((f"{d} cost-aware", d, True) for d in self.drafts),
            ]
        ]

    def _release_target_encoder(self) -> None:
        """Free the weights of the target's encoder (2.5 GB for large-v3; the shared-encoder draft's too):
        its outputs are memoised, keyed by the module, which stays and refuses to run."""
        encoder = self.bench.target.model.model.encoder
        for parameter in encoder.parameters():
            parameter.data = parameter.data.new_empty(0)
        encoder.register_forward_pre_hook(_released)

    def run(self, config: BatchConfig, max_new_tokens: int) -> BatchMeasurement:
        """Decode the first batch_size rows together, one way."""
        rows = self.row_clips[: config.batch_size]
        pair = self.bench.pairs.get(config.draft) or ModelPair(self.bench.target, None, None, None)
        options = DecodeOptions(
            language=LANGUAGE,
            max_new_tokens=max_new_tokens,
            num_draft_tokens=self.options.num_draft_tokens,
            adaptive=False,  # fixed k, or cost-aware
            cost_aware=config.cost_aware,
        )
        make_drafter = None
        if config.draft:
            make_drafter, options = controlled(pair, self.plans[: config.batch_size]), planted(options)
        features = [PairFeatures(clip.features["target"], clip.features.get(config.draft)) for clip in rows]
        start = time.perf_counter()
        results = decode_clips(
            pair, features, options, config.draft is not None, make_drafter, encoder=self.encoder
        )
        encodings = {e.index: e for result in results for e in result.encodings}  # shared by the rows
        seconds = time.perf_counter() - start - sum(e.seconds for e in encodings.values())
        passes = {p.index: p for result in results for p in result.passes}
        return BatchMeasurement([seconds], [passes[min(passes)].verify_seconds], results, len(passes))


def run_batch_bench(
    options: BatchBenchOptions, log: Callable[[str], None] = print
) -> tuple[BatchBench, dict]:
    """Every configuration in `options.rounds` interleaved rounds; measurements by configuration name."""
    bench = BatchBench(options, log)
    on_gpu = torch.device(options.device).type == "cuda"
    for config in bench.configs:  # first calls (allocations, lazy packing) are not timed
        if on_gpu or config.batch_size == min(options.batch_sizes):  # a GPU: every batch shape's
            bench.run(config, warm_up_tokens(options.device, options.tokens))
    measurements = {(c.name, c.batch_size): BatchMeasurement() for c in bench.configs}
    for round_index in range(options.rounds):
        start = time.perf_counter()
        shift = round_index % len(bench.configs)  # a different order each round
        for config in bench.configs[shift:] + bench.configs[:shift]:
            measurement = bench.run(config, options.tokens)
            kept = measurements[(config.name, config.batch_size)]
            kept.seconds += measurement.seconds
            kept.first_pass_seconds += measurement.first_pass_seconds
            kept.results, kept.target_passes = measurement.results, measurement.target_passes
        log(f"round {round_index + 1}/{options.rounds}: {time.perf_counter() - start:.0f} s")
    return bench, measurements


def summarise(bench: BatchBench, measurements: dict) -> list[dict]:
    """One row per (batch size, configuration): times, speedups over the target alone, identity checks."""
    rows = []
    for config in bench.configs:
        kept = measurements[(config.name, config.batch_size)]
        alone = measurements[("target alone", config.batch_size)]
        steady = [t - p for t, p in zip(kept.seconds, kept.first_pass_seconds, strict=True)]
        alone_steady = [t - p for t, p in zip(alone.seconds, alone.first_pass_seconds, strict=True)]
        decode, steady_median = statistics.median(kept.seconds), statistics.median(steady)
        tokens = sum(len(result.token_ids) for result in kept.results)
        steps = [step for result in kept.results for step in result.steps]
        judged = sum(s.num_judged for s in steps)
        clips = [clip.name for clip in bench.row_clips[: config.batch_size]]
        rows.append(
            {
                "config": config.name,
                "draft": config.draft,
                "batch_size": config.batch_size,
                "decode_seconds": decode,
                "first_pass_seconds": statistics.median(kept.first_pass_seconds),
                "steady_seconds": steady_median,
                "round_seconds": kept.seconds,
                "speedup_steady": statistics.median(alone_steady) / steady_median,
                "speedup_decode": statistics.median(alone.seconds) / decode,
                "alpha": sum(s.n_accepted for s in steps) / judged if config.draft and judged else None,
                "tokens": tokens,
                "tokens_per_pass": tokens / len(steps),  # per row: tokens per target pass over that row
                "mean_k": sum(len(s.drafted) for s in steps) / len(steps),  # drafted per row and pass
                "target_passes": kept.target_passes,  # batched passes
                "rows_per_second": config.batch_size / decode,
                "tokens_per_second": tokens / decode,
                "steady_tokens_per_second": tokens / steady_median,
                "rows": clips,
                "mismatched_batched": [
                    i
                    for i, (mine, theirs) in enumerate(zip(kept.results, alone.results, strict=True))
                    if mine.token_ids != theirs.token_ids
                ],  # fmt: skip
                "mismatched_alone": [
                    i
                    for i, (result, clip) in enumerate(zip(kept.results, clips, strict=True))
                    if result.token_ids != bench.alone[clip].token_ids
                ],  # fmt: skip
            }
        )
    return rows


def goals(rows: list[dict]) -> list[dict]:
    """Speedup over the batched target alone at batch 8 and 16, per drafting configuration (steady part;
    whole decode too)."""
    found = []
    for name in dict.fromkeys(r["config"] for r in rows if r["draft"]):
        for batch_size, threshold in GOALS.items():
            row = next((r for r in rows if r["config"] == name and r["batch_size"] == batch_size), None)
            name_b = f"speedup over the batched target alone (steady), {name}, batch {batch_size}"
            found.append(goal(name_b, row["speedup_steady"] if row else None, ">=", threshold))
            name_b = f"speedup over the batched target alone (whole decode), {name}, batch {batch_size}"
            found.append(goal(name_b, row["speedup_decode"] if row else None, ">=", threshold))
    return found


def table(rows: list[dict]) -> str:
    """A fixed-width text table: one line per (batch size, configuration)."""
    header = (
        f"{'batch':>5}  {'configuration':<26}{'decode s':>9}{'1st pass':>9}{'steady':>8}{'x steady':>9}"
        f"{'x decode':>9}{'α':>6}{'mean k':>7}{'tok/pass':>9}{'passes':>7}{'rows/s':>8}{'tok/s':>7}  same"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        alpha = "-" if row["alpha"] is None else f"{row['alpha']:.2f}"
        bad = row["mismatched_batched"] or row["mismatched_alone"]
        same = (
            "yes"
            if not bad
            else f"NO: rows {sorted(set(row['mismatched_batched'] + row['mismatched_alone']))}"
        )
        lines.append(
            f"{row['batch_size']:>5}  {row['config']:<26}{row['decode_seconds']:>9.2f}"
            f"{row['first_pass_seconds']:>9.2f}{row['steady_seconds']:>8.2f}{row['speedup_steady']:>9.2f}"
            f"{row['speedup_decode']:>9.2f}{alpha:>6}{row['mean_k']:>7.2f}{row['tokens_per_pass']:>9.2f}{row['target_passes']:>7}"
            f"{row['rows_per_second']:>8.2f}{row['tokens_per_second']:>7.1f}  {same}"
        )
    return "\n".join(lines)


def run_and_report(options: BatchBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the batch benchmark, print the table and the goals, write batch.json and batch.html."""
    started = time.perf_counter()
    bench, measurements = run_batch_bench(options)
    rows = summarise(bench, measurements)
    found = goals(rows)
    print(table(rows))
    print()
    print_goals(found)
    mismatched = [
        f"{r['config']} batch {r['batch_size']}"
        for r in rows
        if r["mismatched_batched"] or r["mismatched_alone"]
    ]
    if mismatched:
        print(f"\n!!! OUTPUT DIFFERS in: {', '.join(mismatched)}")
    else:
        print(f"\nevery row of {len(rows)} configurations equals the batched target alone and its clip alone")
    report = {
        **report_header(command, options),
        "rounds": options.rounds,
        "max_new_tokens": options.tokens,
        "models": {
            "target": bench.bench.target.name,
            **{n: bench.bench.pairs[n].draft.name for n in bench.drafts},
        },
        "clips": [{"name": c.name, "encoder_seconds": c.encoder_seconds} for c in bench.clips],
        "planned_alpha": [plan.planned_rate for plan in bench.plans],
        "rows": rows,
        "identical": not mismatched,
        "goals": found,
        "wall_seconds": time.perf_counter() - started,
    }
    write_json(report, out_dir / "batch.json")
    from benchmarks.plots import write_batch_report  # plotly only here

    title = (
        f"specdec batch scaling, {options.size} models, α={options.alpha:g}, "
        f"{options.device} {options.dtype} ({report['date']})"
    )
    written = [out_dir / "batch.json", write_batch_report(rows, out_dir, title)]
    print(f"wrote {', '.join(map(str, written))} ({report['wall_seconds']:.0f} s)")
    return report
