"""The token benchmark's statistics, table, goals and report (`python -m benchmarks tokens`).

Leviathan et al. (2023): with per-token acceptance α, k drafted tokens per target pass and cost ratio
c = (one draft step) / (one target step), the expected speedup over the target alone is
(1 - α^(k+1)) / ((1 - α)(k·c + 1)). α is measured as accepted / judged draft tokens (a rejected token
ends a draft; the tokens after it are never judged), c as the draft's seconds per drafted token over
our target-only loop's seconds per token step, and efficiency as the measured speedup over our
target-only loop (same kernels, same loop) divided by the bound.

Decode time (after the encoder) is split into the first target pass, which builds the cross-attention
keys and values once per window and costs the same in every configuration, and the token steps after
it ("steady"). The bound is a per-token model, so speedups and efficiency are computed on the steady
part; the whole decode time and its speedups are reported too.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.common import cell, goal, leviathan_bound, print_goals, report_header, write_json
from benchmarks.tokens import Bench, BenchOptions, Clip, Config, Measurement, run_bench

GOAL_ALPHAS = (0.6, 0.8, 0.95)


def summarise(
    bench: Bench, clips: list[Clip], measurements: dict[tuple[str, str], Measurement]
) -> list[dict]:
    """One row of statistics per configuration, summed over clips (each clip's median decode time)."""

    def total(name: str) -> float:
        return sum(measurements[(name, clip.name)].median_seconds for clip in clips)

    def steady(name: str) -> float:
        return sum(measurements[(name, clip.name)].median_steady_seconds for clip in clips)

    reference = {clip.name: measurements[("generate()", clip.name)].token_ids for clip in clips}
    generate_seconds, loop_seconds = steady("generate()"), steady("specdec target-only")
    generate_total, loop_total = total("generate()"), total("specdec target-only")
    loop_steps = sum(len(measurements[("specdec target-only", c.name)].token_ids) - 1 for c in clips)
    seconds_per_token = loop_seconds / max(loop_steps, 1)
    rows = []
    for config in bench.configs:
        runs = [measurements[(config.name, clip.name)] for clip in clips]
        decode, steady_seconds = total(config.name), steady(config.name)
        tokens = sum(len(run.token_ids) for run in runs)
        row = {
            "config": config.name,
            "engine": config.engine,
            "draft": config.draft,
            "planted_alpha": config.alpha,
            "adaptive": config.adaptive,
            "k": config.num_draft_tokens or None,
            "decode_seconds": decode,
            "decode_seconds_per_round": [sum(r) for r in zip(*(run.seconds for run in runs), strict=True)],
            "first_pass_seconds": decode - steady_seconds,
            "steady_seconds": steady_seconds,
            "encoder_seconds": sum(_encoder_seconds(config, clip) for clip in clips),
            "tokens": tokens,
            "tokens_per_second": tokens / decode if decode else 0.0,
            "speedup_vs_generate": generate_seconds / steady_seconds,
            "speedup_vs_target_loop": loop_seconds / steady_seconds,
            "decode_speedup_vs_generate": generate_total / decode,
            "decode_speedup_vs_target_loop": loop_total / decode,
            "target_passes": sum(run.target_passes for run in runs),
            "identical": all(
                run.token_ids == reference[clip.name] for run, clip in zip(runs, clips, strict=True)
            ),
            "mismatched_clips": [
                c.name for run, c in zip(runs, clips, strict=True) if run.token_ids != reference[c.name]
            ],
        }
        row["tokens_per_pass"] = tokens / row["target_passes"] if row["target_passes"] else None
        if config.engine == "specdec" and config.draft is not None:
            row.update(_speculative_stats(config, runs, seconds_per_token, row["speedup_vs_target_loop"]))
        rows.append(row)
    return rows


def _encoder_seconds(config: Config, clip: Clip) -> float:
    own_draft_encoder = clip.encoder_seconds.get(config.draft, 0.0) if config.engine == "specdec" else 0.0
    return clip.encoder_seconds["target"] + own_draft_encoder


def _speculative_stats(
    config: Config, runs: list[Measurement], seconds_per_token: float, speedup: float
) -> dict:
    results = [run.result for run in runs]
    drafted = sum(r.num_drafted for r in results)
    accepted = sum(r.num_accepted for r in results)
    rejected = sum(1 for r in results for s in r.steps if s.n_accepted < len(s.drafted))
    drafting_passes = sum(1 for r in results for s in r.steps if s.drafted)
    draft_seconds = sum(statistics.median(run.draft_seconds) for run in runs)
    verify_seconds = sum(statistics.median(run.verify_seconds) for run in runs)
    alpha = accepted / (accepted + rejected) if accepted + rejected else 0.0
    cost_ratio = (draft_seconds / drafted) / seconds_per_token if drafted else 0.0
    if config.adaptive:  # the best any fixed k could do, k = 0 (no draft) included
        bound = max([1.0] + [leviathan_bound(alpha, k, cost_ratio) for k in range(1, 13)])
    else:
        bound = leviathan_bound(alpha, config.num_draft_tokens, cost_ratio)
    return {
        "alpha": alpha,
        "accepted_over_drafted": accepted / drafted if drafted else None,
        "mean_k": drafted / drafting_passes if drafting_passes else 0.0,
        "drafting_passes": drafting_passes,
        "cost_ratio": cost_ratio,
        "bound": bound,
        "efficiency": speedup / bound,
        "draft_seconds": draft_seconds,
        "verify_seconds": verify_seconds,
    }


def goals(rows: list[dict], drafts: list[str], k: int) -> list[dict]:
    """The issue's goals with the measured figure (None where the run did not include the configuration)."""
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


def table(rows: list[dict]) -> str:
    """A fixed-width text table of the rows."""
    header = (
        f"{'configuration':<40}{'decode s':>9}{'1st pass':>9}{'steady':>8}{'x gen':>7}{'x loop':>7}"
        f"{'α':>6}{'tok/pass':>9}{'c':>7}{'bound':>7}{'eff':>6}{'x gen all':>10}  same"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = [
            f"{row['config']:<40}",
            f"{row['decode_seconds']:>9.2f}",
            f"{row['first_pass_seconds']:>9.2f}",
            f"{row['steady_seconds']:>8.2f}",
            f"{row['speedup_vs_generate']:>7.2f}",
            f"{row['speedup_vs_target_loop']:>7.2f}",
            cell(row.get("alpha"), 6, ".2f"),
            cell(row.get("tokens_per_pass"), 9, ".2f"),
            cell(row.get("cost_ratio"), 7, ".3f"),
            cell(row.get("bound"), 7, ".2f"),
            cell(row.get("efficiency"), 6, ".2f"),
            f"{row['decode_speedup_vs_generate']:>10.2f}",
            "  yes" if row["identical"] else "  NO: " + ",".join(row["mismatched_clips"]),
        ]
        lines.append("".join(cells))
    return "\n".join(lines)


def run_and_report(options: BenchOptions, out_dir: Path, command: str) -> dict:
    """Run the benchmark, print the table and the goals, write bench.json and the Plotly report."""
    started = time.perf_counter()
    bench, clips, measurements = run_bench(options)
    rows = summarise(bench, clips, measurements)
    found = goals(rows, list(bench.pairs), options.num_draft_tokens)
    report = {
        **report_header(command, options),
        "rounds": options.rounds,
        "max_new_tokens": options.tokens,
        "alphas": options.rates,
        "models": {"target": bench.target.name, **{n: p.draft.name for n, p in bench.pairs.items()}},
        "clips": [{"name": c.name, "encoder_seconds": c.encoder_seconds} for c in clips],
        "rows": rows,
        "identical": all(row["identical"] for row in rows),
        "goals": found,
    }
    print(table(rows))
    print()
    print_goals(found, digits=3)
    mismatched = [row["config"] for row in rows if not row["identical"]]
    if mismatched:
        print(
            f"\n!!! OUTPUT DIFFERS FROM generate() in {len(mismatched)} configurations: "
            + ", ".join(mismatched)
        )
    else:
        print(f"\nall {len(rows)} configurations produced generate()'s output token for token")
    report["wall_seconds"] = time.perf_counter() - started
    write_json(report, out_dir / "bench.json")
    title = f"specdec benchmark, {options.size} models, {options.device} {options.dtype} ({report['date']})"
    from benchmarks.plots import write_report  # plotly only here

    written = [out_dir / "bench.json", *write_report(rows, out_dir, title)]

    print(f"wrote {', '.join(map(str, written))} ({report['wall_seconds']:.0f} s)")
    return report
