"""`python -m benchmarks tokens`: every way to decode the same clips, timed side by side in one run.

generate(), our loop target-only, transformers' assisted generation and ours at fixed and adaptive k, with
the draft's own choices and at planted acceptance α (`benchmarks.controlled`), on the preset's models, in
rotated rounds; speedups on the steps after the first target pass, against Leviathan et al.'s bound
(`harness.leviathan_bound`). Every output is compared with generate()'s.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness, plots
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal, leviathan_bound
from benchmarks.runners import Clip, Models, Run, warm_up_tokens
from specdec.options import DecodeOptions

GOAL_ALPHAS = (0.6, 0.8, 0.95)


@dataclass(frozen=True)
class BenchOptions:
    size: str = "small"  # a checkpoints preset: "small" (demo models) or "large-v3" (real architectures)
    quick: bool = False  # one clip, α in (0.6, 0.8, 0.95), 32 tokens
    audio: tuple[str, ...] = ()  # more clips besides assets/*.wav
    alphas: tuple[float, ...] | None = None  # controlled acceptance rates; None: by quick
    num_draft_tokens: int = 5  # k of the fixed-k configurations (and the start of adaptive)
    max_new_tokens: int | None = None  # per clip; None: 24 quick, 64 otherwise
    repeats: int | None = None  # interleaved rounds; None: 3
    seed: int = 0  # model weights and acceptance plans
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"
    dtype: str = "float32"  # the models' weights and activations: float32, float16 or bfloat16

    @property
    def rounds(self) -> int:
        return self.repeats or 3

    @property
    def tokens(self) -> int:
        return self.max_new_tokens or (32 if self.quick else 64)

    @property
    def rates(self) -> tuple[float, ...]:
        return self.alphas or ((0.6, 0.8, 0.95) if self.quick else (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0))


@dataclass(frozen=True)
class Config:
    """One way of decoding; `name` labels it in tables and plots."""

    name: str
    engine: str  # "generate", "assisted" (transformers) or "specdec"
    draft: str | None = None  # draft folder name; None: the target alone
    alpha: float | None = None  # planted agreement rate; None: the draft's own choices
    adaptive: bool = False
    num_draft_tokens: int = 0


def configs(options: BenchOptions, models: Models) -> list[Config]:
    k = options.num_draft_tokens
    found = [Config("generate()", "generate"), Config("specdec target-only", "specdec")]
    for name in models.pairs:
        assisted = name in models.assistants
        found += [
            Config(f"specdec {name} k={k}", "specdec", name, num_draft_tokens=k),
            Config(f"specdec {name} adaptive", "specdec", name, adaptive=True, num_draft_tokens=k),
            # a useless draft (planted α = 0): what adaptive drafting costs when drafting cannot help
            Config(f"specdec {name} adaptive α=0", "specdec", name, 0.0, True, k),
            *([Config(f"assisted {name} k={k}", "assisted", name, num_draft_tokens=k)] if assisted else []),
        ]
        for alpha in options.rates:
            found.append(Config(f"specdec {name} k={k} α={alpha:g}", "specdec", name, alpha, False, k))
            if assisted:
                found.append(Config(f"assisted {name} k={k} α={alpha:g}", "assisted", name, alpha, False, k))
    return found


def run(models: Models, config: Config, clip: Clip, tokens: int) -> Run:
    """Decode one clip one way, once."""
    if config.engine != "specdec":
        assistant = config.draft if config.engine == "assisted" else None
        return models.generate([clip], tokens, assistant, config.num_draft_tokens, config.alpha)
    options = DecodeOptions(
        language=LANGUAGE,
        max_new_tokens=tokens,
        num_draft_tokens=config.num_draft_tokens or 1,
        adaptive=config.adaptive,
    )
    plans = None if config.alpha is None else [clip.plans[config.alpha]]
    return models.decode(config.draft, [clip], options, plans)


def run_bench(
    options: BenchOptions, log: Callable[[str], None] = print
) -> tuple[Models, list[Clip], list[Config], dict]:
    """Every configuration on every clip in `options.rounds` interleaved rounds; (config, clip) -> runs."""
    models = Models(options.size, options.seed, options.cache_dir, options.device, options.dtype, log)
    files = sorted(ASSETS.glob("*.wav"))[: 1 if options.quick else None]
    clips = models.clips([*files, *map(Path, options.audio)])
    tokens, alone = options.tokens, Config("specdec target-only", "specdec")
    for index, clip in enumerate(clips):  # also warms our loop up
        reference = run(models, alone, clip, tokens).results[0]
        models.make_plans(clip, reference, options.rates, options.seed + index)
    found = configs(options, models)
    warm = warm_up_tokens(options.device, tokens)
    runs = harness.rounds(
        found, lambda config, clip: run(models, config, clip, tokens), options.rounds, clips,
        warm_up=lambda config: run(models, config, clips[0], warm), log=log,
    )  # fmt: skip
    return models, clips, found, runs


def summarise(configs: list[Config], clips: list[Clip], runs: dict) -> list[dict]:
    """One row of statistics per configuration, summed over clips (each clip's median decode time)."""

    def total(config: Config, steady: bool = False) -> float:
        return sum(
            statistics.median(r.steady_seconds if steady else r.seconds for r in runs[(config, c)])
            for c in clips
        )

    generate, alone = configs[0], configs[1]  # generate() and our target-only loop
    reference = {clip.name: runs[(generate, clip)][-1].token_ids for clip in clips}
    generate_steady, loop_steady = total(generate, True), total(alone, True)
    loop_steps = sum(len(runs[(alone, c)][-1].token_ids[0]) - 1 for c in clips)
    rows = []
    for config in configs:
        last = [runs[(config, clip)][-1] for clip in clips]  # greedy: every round's tokens are the same
        decode, steady = total(config), total(config, True)
        tokens = sum(len(run.token_ids[0]) for run in last)
        passes = sum(run.target_passes for run in last)
        mismatched = [
            c.name for run, c in zip(last, clips, strict=True) if run.token_ids != reference[c.name]
        ]
        by_rounds = zip(*(runs[(config, clip)] for clip in clips), strict=True)
        encoders = ["target", *([config.draft] if config.engine == "specdec" else [])]
        row = {
            "config": config.name, "engine": config.engine, "draft": config.draft,
            "planted_alpha": config.alpha,
            "adaptive": config.adaptive, "k": config.num_draft_tokens or None, "decode_seconds": decode,
            "decode_seconds_per_round": [sum(r.seconds for r in by_round) for by_round in by_rounds],
            "first_pass_seconds": decode - steady,
            "steady_seconds": steady,
            "encoder_seconds": sum(sum(c.encoder_seconds.get(name, 0.0) for name in encoders) for c in clips),
            "tokens": tokens, "tokens_per_second": tokens / decode if decode else 0.0,
            "speedup_vs_generate": generate_steady / steady, "speedup_vs_target_loop": loop_steady / steady,
            "decode_speedup_vs_generate": total(generate) / decode,
            "decode_speedup_vs_target_loop": total(alone) / decode,
            "target_passes": passes, "identical": not mismatched, "mismatched_clips": mismatched,
            "tokens_per_pass": tokens / passes if passes else None,
        }  # fmt: skip
        if config.engine == "specdec" and config.draft is not None:
            per_clip, per_token = [runs[(config, clip)] for clip in clips], loop_steady / max(loop_steps, 1)
            row |= _speculative(config, per_clip, per_token, row["speedup_vs_target_loop"])
        rows.append(row)
    return rows


def _speculative(config: Config, per_clip: list[list[Run]], seconds_per_token: float, speedup: float) -> dict:
    results = [runs[-1].results[0] for runs in per_clip]
    drafted = sum(r.num_drafted for r in results)
    draft_seconds, verify_seconds = (
        sum(statistics.median(getattr(run.results[0], key) for run in runs) for runs in per_clip)
        for key in ("draft_seconds", "verify_seconds")
    )
    steps = [s for r in results for s in r.steps]
    cost_ratio = (draft_seconds / drafted) / seconds_per_token if drafted else 0.0
    accepted, judged = sum(r.num_accepted for r in results), sum(s.num_judged for s in steps)
    drafting_passes = sum(1 for s in steps if s.drafted)
    stats = harness.draft_statistics(
        accepted, judged, drafted, drafting_passes, cost_ratio, config.num_draft_tokens
    )
    if config.adaptive:  # the best any fixed k could do, k = 0 (no draft) included
        stats["bound"] = max([1.0] + [leviathan_bound(stats["alpha"], k, cost_ratio) for k in range(1, 13)])
    return {
        "alpha": stats["alpha"], "accepted_over_drafted": accepted / drafted if drafted else None,
        "mean_k": stats["mean_k"], "drafting_passes": drafting_passes, "cost_ratio": cost_ratio,
        "bound": stats["bound"], "efficiency": speedup / stats["bound"],
        "draft_seconds": draft_seconds, "verify_seconds": verify_seconds,
    }  # fmt: skip


def goals(rows: list[dict], drafts: list[str], k: int) -> list[dict]:
    """The goals with the measured figure (None where the run did not include the configuration)."""
    by_name = {row["config"]: row for row in rows}
    found = []
    for draft in drafts:
        for alpha in GOAL_ALPHAS:
            row = by_name.get(f"specdec {draft} k={k} α={alpha:g}")
            found.append(goal(f"efficiency {draft} α={alpha:g}", row and row["efficiency"], ">=", 0.9))
        row = by_name.get(f"specdec {draft} k={k} α=0.8")
        found.append(
            goal(f"speedup over generate() {draft} α=0.8", row and row["speedup_vs_generate"], ">=", 1.5)
        )
        assisted = by_name.get(f"assisted {draft} k={k} α=0.8")
        if assisted is not None and row is not None:
            ratio = assisted["steady_seconds"] / row["steady_seconds"]
            found.append(goal(f"speedup over assisted generation {draft} α=0.8", ratio, ">=", 1.2))
        useless = by_name.get(f"specdec {draft} adaptive α=0")
        if useless is not None:
            slowdown = 1 / useless["speedup_vs_target_loop"] - 1
            found.append(goal(f"adaptive slowdown vs target-only, {draft} α=0", slowdown, "<", 0.1))
    return found


COLUMNS = [
    ("configuration", "config", "<40"),
    ("decode s", "decode_seconds", ">9.2f"),
    ("1st pass", "first_pass_seconds", ">9.2f"),
    ("steady", "steady_seconds", ">8.2f"),
    ("x gen", "speedup_vs_generate", ">7.2f"),
    ("x loop", "speedup_vs_target_loop", ">7.2f"),
    ("α", "alpha", ">6.2f"),
    ("tok/pass", "tokens_per_pass", ">9.2f"),
    ("c", "cost_ratio", ">7.3f"),
    ("bound", "bound", ">7.2f"),
    ("eff", "efficiency", ">6.2f"),
    ("x gen all", "decode_speedup_vs_generate", ">10.2f"),
    ("  same", lambda row: "  yes" if row["identical"] else "  NO: " + ",".join(row["mismatched_clips"]), ""),
]


def speedup_figure(rows: list[dict], title: str) -> plots.go.Figure:
    """Left: speedup over our target-only loop with the bound; right: speedup over generate()."""
    left, right, alphas = [], [], [i / 100 for i in range(101)]
    for colour, draft in zip(plots.COLOURS, sorted({r["draft"] for r in rows if r["draft"]}), strict=False):
        planted = [r for r in rows if r["draft"] == draft and r["planted_alpha"] is not None]
        ours, theirs = ([r for r in planted if r["engine"] == e] for e in ("specdec", "assisted"))
        if not ours:
            continue
        k, cost_ratio = ours[0]["k"], statistics.median(r["cost_ratio"] for r in ours)
        group, x = {"legendgroup": draft, "marker": {"color": colour}}, [r["alpha"] for r in ours]
        bound = [leviathan_bound(a, k, cost_ratio) for a in alphas]
        y = [r["speedup_vs_target_loop"] for r in ours]
        left.append(plots.scatter(x, y, f"specdec {draft} k={k}", mode="markers", **group))
        dashed = {"color": colour, "dash": "dash"}
        name = f"bound {draft} (k={k}, c={cost_ratio:.3f})"
        left.append(plots.scatter(alphas, bound, name, mode="lines", line=dashed, legendgroup=draft))
        y, name = [r["speedup_vs_generate"] for r in ours], f"specdec {draft} k={k} vs generate()"
        right.append(plots.scatter(x, y, name, mode="markers+lines", showlegend=False, **group))
        if theirs:
            x, y = [r["planted_alpha"] for r in theirs], [r["speedup_vs_generate"] for r in theirs]
            group["marker"] = {"color": colour, "symbol": "x"}
            name = f"transformers assisted {draft} k={k}"
            right.append(plots.scatter(x, y, name, mode="markers+lines", line={"dash": "dot"}, **group))
    left_title, right_title = "speedup over specdec target-only, and the bound", "speedup over generate()"
    axis = {"x": {"title_text": "acceptance rate α (controlled)"}, "y": {"title_text": "speedup (decode)"}}
    return plots.figure(title, {left_title: left, right_title: right}, [axis, axis], one_line=[2])


def breakdown_figure(rows: list[dict], title: str) -> plots.go.Figure:
    """Decode seconds per configuration: draft, target passes and the rest (transformers: total only)."""
    names = [row["config"] for row in rows]
    draft = [row.get("draft_seconds", 0.0) for row in rows]
    verify = [row.get("verify_seconds", row["decode_seconds"] * (row["engine"] == "specdec")) for row in rows]
    other = [row["decode_seconds"] - d - v for row, d, v in zip(rows, draft, verify, strict=True)]
    parts = {
        "target passes (specdec)": verify,
        "draft (specdec)": draft,
        "other (transformers: all of it)": other,
    }
    bars = [plots.bar(values, names, name, orientation="h") for name, values in parts.items()]
    axis = {
        "x": {"title_text": "decode seconds (sum over clips, median over rounds)"},
        "y": {"autorange": "reversed"},
    }
    return plots.figure(title, {"": bars}, [axis], barmode="stack", height=max(400, 22 * len(rows) + 150))


def run_and_report(options: BenchOptions, out_dir: Path, command: str) -> dict:
    """Run the benchmark, print the table and the goals, write bench.json and the Plotly report."""
    record = Record(command, options)
    models, clips, found, runs = run_bench(options)
    rows = summarise(found, clips, runs)
    record.update(
        rounds=options.rounds,
        max_new_tokens=options.tokens,
        alphas=options.rates,
        models={"target": models.target.name, **{n: p.draft.name for n, p in models.pairs.items()}},
        clips=[{"name": c.name, "encoder_seconds": c.encoder_seconds} for c in clips],
        rows=rows,
    )
    print(harness.table(rows, COLUMNS), "\n")
    same = f"all {len(rows)} configurations produced generate()'s output token for token"
    found = goals(rows, list(models.pairs), options.num_draft_tokens)
    record.verdict([row["config"] for row in rows if not row["identical"]], same, found, digits=3)
    title = f"specdec benchmark, {options.size} models, {options.device} {options.dtype} ({record['date']})"
    record.write(
        out_dir / "bench.json", lambda: [speedup_figure(rows, title), breakdown_figure(rows, title)], title
    )
    return record
