"""`python -m benchmarks batch`: batched speculative decoding against the batched target alone.

Batch sizes 1-16 of rows cycling through assets/*.wav, each row its own plan at α (`benchmarks.controlled`),
in rotated rounds; every row's tokens compared with the batched target alone and with its clip alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks import plots
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.controlled import row_plans
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal, median, rounds, table
from benchmarks.runners import Clip, Models, Run, warm_up_tokens
from specdec.options import DecodeOptions

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


class BatchBench:
    """The preset's models, the clips, the rows and their plans; runs one configuration once."""

    def __init__(self, options: BatchBenchOptions, log: Callable[[str], None] = print) -> None:
        self.options = options
        self.models = Models(
            options.size,
            options.seed,
            options.cache_dir,
            options.device,
            options.dtype,
            log,
            assistants=False,
        )
        self.clips: list[Clip] = self.models.clips(sorted(ASSETS.glob("*.wav")))
        self.row_clips = [self.clips[i % len(self.clips)] for i in range(max(options.batch_sizes))]
        # batch 1, target alone, each clip: the reference tokens and the plans' target continuations
        alone = {
            clip.name: self.run(BatchConfig("target alone", 1), options.tokens, [clip]) for clip in self.clips
        }
        self.alone = {name: run.results[0] for name, run in alone.items()}
        if all(len({t.window for t in result.tokens}) == 1 for result in self.alone.values()):
            self._release_target_encoder()  # every window the batches need is memoised
        self.plans = row_plans([self.alone[c.name] for c in self.row_clips], options.alpha, options.seed)
        drafts = self.models.shared_encoder_first()
        self.drafts = drafts[:1] if options.quick else drafts
        k = options.num_draft_tokens
        ways = [("target alone", None, False), *((f"{d} k={k}", d, False) for d in self.drafts)]
        ways += [(f"{d} cost-aware", d, True) for d in self.drafts]
        self.configs = [
            BatchConfig(name, size, d, cost) for size in options.batch_sizes for name, d, cost in ways
        ]

    def _release_target_encoder(self) -> None:
        """Free the weights of the target's encoder (2.5 GB for large-v3; the shared-encoder draft's too):
        its outputs are memoised, keyed by the module, which stays and refuses to run."""
        encoder = self.models.target.model.model.encoder
        for parameter in encoder.parameters():
            parameter.data = parameter.data.new_empty(0)
        encoder.register_forward_pre_hook(_released)

    def run(self, config: BatchConfig, max_new_tokens: int, rows: list[Clip] | None = None) -> Run:
        """Decode the first batch_size rows together, one way."""
        rows = rows or self.row_clips[: config.batch_size]
        options = DecodeOptions(  # fixed k, or cost-aware
            language=LANGUAGE, max_new_tokens=max_new_tokens, num_draft_tokens=self.options.num_draft_tokens,
            adaptive=False, cost_aware=config.cost_aware,
        )  # fmt: skip
        plans = self.plans[: config.batch_size] if config.draft else None
        return self.models.decode(config.draft, rows, options, plans)


def _released(*_: object) -> None:
    raise RuntimeError("the batch benchmark encodes every clip once, before its encoder is released")


def run_batch_bench(
    options: BatchBenchOptions, log: Callable[[str], None] = print
) -> tuple[BatchBench, dict]:
    """Every configuration in `options.rounds` interleaved rounds; config -> its runs."""
    bench = BatchBench(options, log)
    on_gpu, warm = torch.device(options.device).type == "cuda", warm_up_tokens(options.device, options.tokens)

    def warm_up(config: BatchConfig) -> None:  # a GPU: every batch shape's first calls
        if on_gpu or config.batch_size == min(options.batch_sizes):
            bench.run(config, warm)

    runs = rounds(
        bench.configs, lambda c, _: bench.run(c, options.tokens), options.rounds, warm_up=warm_up, log=log
    )
    return bench, {config: runs[(config, None)] for config in bench.configs}


def summarise(bench: BatchBench, runs: dict[BatchConfig, list[Run]]) -> list[dict]:
    """One row per (batch size, configuration): times, speedups over the target alone, identity checks."""
    rows = []
    for config in bench.configs:
        mine, alone = runs[config], runs[BatchConfig("target alone", config.batch_size)]
        decode, steady = median(r.seconds for r in mine), median(r.steady_seconds for r in mine)
        results, alone_results = mine[-1].results, alone[-1].results
        tokens = sum(len(result.token_ids) for result in results)
        steps = [step for result in results for step in result.steps]
        judged = sum(s.num_judged for s in steps)
        clips = [clip.name for clip in bench.row_clips[: config.batch_size]]
        pairs = list(zip(results, alone_results, clips, strict=True))
        alone_ids = {name: result.token_ids for name, result in bench.alone.items()}
        rows.append({
            "config": config.name,
            "draft": config.draft,
            "batch_size": config.batch_size,
            "decode_seconds": decode,
            "first_pass_seconds": median(r.first_pass_seconds for r in mine),
            "steady_seconds": steady,
            "round_seconds": [r.seconds for r in mine],
            "speedup_steady": median(r.steady_seconds for r in alone) / steady,
            "speedup_decode": median(r.seconds for r in alone) / decode,
            "alpha": sum(s.n_accepted for s in steps) / judged if config.draft and judged else None,
            "tokens": tokens,
            "tokens_per_pass": tokens / len(steps),  # per row: tokens per target pass over that row
            "mean_k": sum(len(s.drafted) for s in steps) / len(steps),  # drafted per row and pass
            "target_passes": mine[-1].target_passes,  # batched passes
            "rows_per_second": config.batch_size / decode,
            "tokens_per_second": tokens / decode,
            "steady_tokens_per_second": tokens / steady,
            "rows": clips,
            "mismatched_batched": [i for i, (r, a, _) in enumerate(pairs) if r.token_ids != a.token_ids],
            "mismatched_alone": [i for i, (r, _, c) in enumerate(pairs) if r.token_ids != alone_ids[c]],
        })  # fmt: skip
    return rows


def goals(rows: list[dict]) -> list[dict]:
    """Speedup over the batched target alone at batch 8 and 16, per drafting configuration (steady part;
    whole decode too)."""
    found = []
    for name in dict.fromkeys(r["config"] for r in rows if r["draft"]):
        for batch_size, threshold in GOALS.items():
            row = next((r for r in rows if r["config"] == name and r["batch_size"] == batch_size), None)
            for part, key in (("steady", "speedup_steady"), ("whole decode", "speedup_decode")):
                label = f"speedup over the batched target alone ({part}), {name}, batch {batch_size}"
                found.append(goal(label, row[key] if row else None, ">=", threshold))
    return found


def _same(row: dict) -> str:
    bad = sorted({*row["mismatched_batched"], *row["mismatched_alone"]})
    return "  yes" if not bad else f"  NO: rows {bad}"


COLUMNS = [
    ("batch", "batch_size", ">5"),
    ("  configuration", lambda row: f"  {row['config']}", "<28"),
    ("decode s", "decode_seconds", ">9.2f"),
    ("1st pass", "first_pass_seconds", ">9.2f"),
    ("steady", "steady_seconds", ">8.2f"),
    ("x steady", "speedup_steady", ">9.2f"),
    ("x decode", "speedup_decode", ">9.2f"),
    ("α", "alpha", ">6.2f"),
    ("mean k", "mean_k", ">7.2f"),
    ("tok/pass", "tokens_per_pass", ">9.2f"),
    ("passes", "target_passes", ">7"),
    ("rows/s", "rows_per_second", ">8.2f"),
    ("tok/s", "tokens_per_second", ">7.1f"),
    ("  same", _same, ""),
]


def figure(rows: list[dict], title: str) -> plots.go.Figure:
    """Left: speedup over the batched target alone; right: tokens/s; against batch size."""
    left, right = [], []
    for colour, config in zip(plots.COLOURS, dict.fromkeys(row["config"] for row in rows), strict=False):
        mine = [row for row in rows if row["config"] == config]
        sizes = [row["batch_size"] for row in mine]
        for key, dash, label in (
            ("speedup_steady", "solid", "steady"),
            ("speedup_decode", "dot", "whole decode"),
        ):
            if mine[0]["draft"]:
                y = [row[key] for row in mine]
                left.append(
                    plots.scatter(sizes, y, f"{config} ({label})", line={"color": colour, "dash": dash})
                )
        y = [row["tokens_per_second"] for row in mine]
        right.append(plots.scatter(sizes, y, f"{config} tokens/s", line={"color": colour}))
    panels = {"speedup over the batched target alone": left, "throughput (tokens/s)": right}
    axis = {"x": {"type": "log", "dtick": 0.30103, "title_text": "batch size"}}
    return plots.figure(title, panels, [axis, axis], height=420)


def run_and_report(options: BatchBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the batch benchmark, print the table and the goals, write batch.json and batch.html."""
    record = Record(command, options)
    bench, runs = run_batch_bench(options)
    rows = summarise(bench, runs)
    print(table(rows, COLUMNS), "\n")
    mismatched = [f"{r['config']} batch {r['batch_size']}" for r in rows if _same(r) != "  yes"]
    same = f"every row of {len(rows)} configurations equals the batched target alone and its clip alone"
    record.verdict(mismatched, same, goals(rows))
    models = bench.models
    record.update(
        rounds=options.rounds,
        max_new_tokens=options.tokens,
        models={"target": models.target.name, **{n: models.pairs[n].draft.name for n in bench.drafts}},
        clips=[{"name": c.name, "encoder_seconds": c.encoder_seconds} for c in bench.clips],
        planned_alpha=[plan.planned_rate for plan in bench.plans],
        rows=rows,
    )
    title = (
        f"specdec batch scaling, {options.size} models, α={options.alpha:g}, {options.device} {options.dtype}"
    )
    record.write(out_dir / "batch.json", lambda: [figure(rows, f"{title} ({record['date']})")], title)
    return record
