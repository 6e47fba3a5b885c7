"""The CPU benchmark's statistics, tables, goals and report (`python -m benchmarks cpu`).

Per configuration, over every clip (each clip's median over rounds, then summed): end to end (audio in
memory -> token ids or text), the target's and the draft's encoder, the decode phase split into the first
target pass (it builds the cross-attention keys and values: the same work in every configuration) and the
steady token steps after it, tokens per second of decode, α = accepted / judged draft tokens, tokens per
target pass, the mean k of a drafting step, c = the draft's seconds per drafted token over our target
alone's seconds per token step (steady parts), Leviathan et al.'s bound (1 - α^(k+1)) / ((1 - α)(k·c + 1))
and the efficiency: the steady speedup per token over our target alone divided by the bound.
`generate()`'s decode is its end to end less our target alone's features and encoder (the same work).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import plotly.graph_objects as go
import torch
import transformers
from plotly.subplots import make_subplots

from benchmarks.common import cell, goal, leviathan_bound, print_goals, report_header, write_json
from benchmarks.cpu import (
    DEFAULT_VARIANT,
    DENSE,
    SELF_VARIANT,
    CpuBench,
    CpuBenchOptions,
    Run,
    batch_runs,
    clips,
    faster_whisper_runs,
    step_costs,
)

ALONE = "specdec target alone"
GOAL_DECODE, GOAL_DENSE, GOAL_FLOOR, GOAL_BATCH = 2.0, 1.5, 1.3, 1.3
TIMES = ("end_to_end", "target_encoder", "draft_encoder", "decode", "first_pass", "steady")
COUNTS = ("tokens", "steady_tokens", "passes", "drafted", "accepted", "judged", "drafting_steps")


def clip_medians(runs: list[Run]) -> dict:
    """A clip's times (median over rounds) and counts (the same every round: greedy)."""
    found = {"end_to_end": statistics.median(run.end_to_end for run in runs)}
    for key in (*TIMES[1:], "steady_draft", "steady_verify", *COUNTS, "steady_drafted"):
        if key in runs[0].stats:
            found[key] = statistics.median(run.stats[key] for run in runs)
    return found


def summarise(bench: CpuBench, names: list[str], runs: dict[tuple[str, str], list[Run]]) -> list[dict]:
    """One row per configuration: sums over clips of each clip's medians, and the derived statistics."""
    per_clip = {key: clip_medians(value) for key, value in runs.items()}
    reference = {clip: runs[("generate()", clip)][0] for clip in names}
    alone = {key: sum(per_clip[(ALONE, clip)][key] for clip in names) for key in (*TIMES, *COUNTS)}
    overhead = {
        clip: per_clip[(ALONE, clip)]["end_to_end"] - per_clip[(ALONE, clip)]["decode"] for clip in names
    }
    alone_step = alone["steady"] / max(alone["passes"] - len(names), 1)  # seconds per target-only step
    alone_per_token = alone["steady"] / max(alone["steady_tokens"], 1)
    rows = []
    for config in bench.configs:
        clips = {clip: per_clip[(config.name, clip)] for clip in names}
        total = {key: sum(c.get(key, 0.0) for c in clips.values()) for key in clips[names[0]]}
        if config.engine == "generate()":
            total["decode"] = sum(c["end_to_end"] - overhead[name] for name, c in clips.items())
        row = {
            "config": config.name,
            "engine": config.engine,
            "variant": config.variant,
            "policy": config.policy,
        }
        row |= {"seconds": total, "clips": clips, "identical": _identical(config, names, runs, reference)}
        row["seconds_all_rounds"] = {
            clip: [run.end_to_end for run in runs[(config.name, clip)]] for clip in names
        }
        if config.engine == "specdec":
            row |= _speculative(total, alone_step, alone_per_token, alone)
        rows.append(row)
    by_name = {row["config"]: row for row in rows}
    for row in rows:
        for other in ("generate()", ALONE, "faster-whisper float32"):
            if other in by_name:
                row[f"x_{other}_e2e"] = by_name[other]["seconds"]["end_to_end"] / row["seconds"]["end_to_end"]
        row["x_alone_decode"] = (
            by_name[ALONE]["seconds"]["decode"] / row["seconds"]["decode"]
            if "decode" in row["seconds"]
            else None
        )
    return rows


def _identical(config, names: list[str], runs: dict, reference: dict) -> bool:
    """Every run's output equals generate()'s: token ids for ours, the text (spaces aside) for
    faster-whisper."""
    for clip in names:
        for run in runs[(config.name, clip)]:
            if run.token_ids is not None and run.token_ids != reference[clip].token_ids:
                return False
            if run.token_ids is None and run.text.split() != reference[clip].text.split():
                return False
    return True


def _speculative(total: dict, alone_step: float, alone_per_token: float, alone: dict) -> dict:
    """α, tokens per pass, mean k, c, the bound and the efficiency of one specdec configuration."""
    found = {
        "tokens_per_second": total["tokens"] / total["decode"],
        "tokens_per_pass": total["tokens"] / total["passes"],
    }
    if not total.get("drafted"):
        return found | {"alpha": None, "k": None, "c": None, "bound": None, "efficiency": None}
    alpha = total["accepted"] / max(total["judged"], 1)
    mean_k = total["drafted"] / max(total["drafting_steps"], 1)
    draft_token = total["steady_draft"] / max(total["steady_drafted"], 1)
    c = draft_token / alone_step
    speedup = alone_per_token / (total["steady"] / max(total["steady_tokens"], 1))
    bound = leviathan_bound(alpha, mean_k, c)
    return found | {
        "alpha": alpha,
        "k": mean_k,
        "c": c,
        "bound": bound,
        "speedup_steady": speedup,
        "efficiency": speedup / bound,
    }


def table(rows: list[dict]) -> str:
    head = (
        "| configuration | e2e s | target enc s | draft enc s | decode s | 1st pass s | steady s | tokens/s "
        "| α | tokens/pass | k | c | bound | x alone steady | efficiency | x alone decode | x alone e2e "
        "| x generate() e2e | x faster-whisper f32 e2e | same as generate() |"
    )
    lines = [head, "|" + "---|" * 20]
    for row in rows:
        s = row["seconds"]
        cells = [
            f"{s['end_to_end']:.2f}",
            *(
                cell(s.get(key), 0, ".2f")
                for key in ("target_encoder", "draft_encoder", "decode", "first_pass", "steady")
            ),
            cell(row.get("tokens_per_second"), 0, ".0f"),
            cell(row.get("alpha"), 0, ".2f"),
            cell(row.get("tokens_per_pass"), 0, ".2f"),
            cell(row.get("k"), 0, ".1f"),
            cell(row.get("c"), 0, ".2f"),
            cell(row.get("bound"), 0, ".2f"),
            cell(row.get("speedup_steady"), 0, ".2f"),
            cell(row.get("efficiency"), 0, ".2f"),
            cell(row.get("x_alone_decode"), 0, ".2f"),
            cell(row.get(f"x_{ALONE}_e2e"), 0, ".2f"),
            cell(row.get("x_generate()_e2e"), 0, ".2f"),
            cell(row.get("x_faster-whisper float32_e2e"), 0, ".2f"),
            "yes" if row["identical"] else "NO",
        ]
        lines.append(f"| {row['config']} | " + " | ".join(c.strip() for c in cells) + " |")
    return "\n".join(lines)


def clip_table(rows: list[dict], names: list[str]) -> str:
    """End to end ms per clip (median over rounds)."""
    lines = ["| configuration | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for row in rows:
        lines.append(
            f"| {row['config']} | "
            + " | ".join(f"{1000 * row['clips'][n]['end_to_end']:.0f}" for n in names)
            + " |"
        )
    return "\n".join(lines)


def step_table(steps: dict) -> str:
    lines = ["| step kind | ms | MB read | floor ms | x floor |", "|---|---|---|---|---|"]
    for name, kind in steps["kinds"].items():
        ratio = kind["seconds"] / kind["floor_seconds"]
        lines.append(
            f"| {name} | {1000 * kind['seconds']:.2f} | {kind['bytes'] / 1e6:.0f} "
            f"| {1000 * kind['floor_seconds']:.2f} | {ratio:.1f} |"
        )
    return "\n".join(lines)


def batch_table(batch: dict[str, dict], size: int) -> str:
    """The batch of `size` clips: seconds, speedup over the batched target alone, passes, acceptance."""
    alone = batch["target alone"]
    lines = [
        f"| batch of {size}, {DEFAULT_VARIANT} | seconds | x target alone | target passes | α | same |",
        "|---|---|---|---|---|---|",
    ]
    for policy, found in batch.items():
        alpha = found["accepted"] / found["drafted"] if found["drafted"] else None
        same = "yes" if found["token_ids"] == alone["token_ids"] else "NO"
        ratio = alone["seconds"] / found["seconds"]
        lines.append(
            f"| {policy} | {found['seconds']:.2f} | {ratio:.2f} | {found['passes']} "
            f"| {cell(alpha, 4, '.2f')} | {same} |"
        )
    return "\n".join(lines)


def goals(
    rows: list[dict], steps: dict, batch: dict[str, dict], config: str, with_batch: bool = True
) -> list[dict]:
    """The real-pair goals this benchmark measures for one configuration (of the default tiny.en variant or
    the self-draft); the batch goal where the batch ran that configuration's policy and k."""
    by_name = {row["config"]: row for row in rows}
    best = by_name[config]
    dense = by_name[ALONE]["clips"][DENSE]["end_to_end"] / best["clips"][DENSE]["end_to_end"]
    found = [
        goal(
            f"decode vs our target alone, batch 1 ({best['config']})",
            best["x_alone_decode"],
            ">=",
            GOAL_DECODE,
        ),
        goal(
            f"end to end vs our target alone, dense 30 s window ({best['config']})", dense, ">=", GOAL_DENSE
        ),
    ]
    for compute_type in ("float32", "int8"):
        other = by_name.get(f"faster-whisper {compute_type}")
        ratio = other["seconds"]["end_to_end"] / best["seconds"]["end_to_end"] if other else None
        found.append(
            goal(f"end to end vs faster-whisper {compute_type} ({best['config']})", ratio, ">=", 1.0)
        )
    if not with_batch:
        return found
    policy = "cost-aware" if "cost-aware" in config else "fixed"
    ratio = batch["target alone"]["seconds"] / batch[policy]["seconds"]
    found.append(
        goal(f"batch vs the batched target alone ({DEFAULT_VARIANT}, {policy} k)", ratio, ">=", GOAL_BATCH)
    )
    return found


def floor_goal(steps: dict) -> dict:
    step = steps["kinds"]["target, 1 token"]
    return goal("target step / memory floor", step["seconds"] / step["floor_seconds"], "<", GOAL_FLOOR)


def figure(rows: list[dict], steps: dict, title: str) -> go.Figure:
    """Left: where each configuration's time goes; middle: speedup and bound; right: steps and floors."""
    titles = (
        "end to end, summed over clips (s)",
        "steady speedup over the target alone",
        "step vs floor (ms)",
    )
    figure = make_subplots(rows=1, cols=3, column_widths=[0.45, 0.3, 0.25], subplot_titles=titles)
    names = [row["config"] for row in rows]
    parts = {
        "features + target encoder": [],
        "draft encoder": [],
        "first pass": [],
        "steady steps": [],
        "end to end (not split)": [],
    }
    for row in rows:
        s = row["seconds"]
        split = "decode" in s and row["engine"] == "specdec"
        encoders = s["end_to_end"] - s["decode"] - s.get("draft_encoder", 0) if split else 0.0
        values = (encoders, s.get("draft_encoder", 0), s.get("first_pass", 0), s.get("steady", 0))
        for part, value in zip(list(parts)[:4], values, strict=True):
            parts[part].append(value if split else 0.0)
        parts["end to end (not split)"].append(0.0 if split else s["end_to_end"])
    for part, values in parts.items():
        figure.add_bar(y=names, x=values, name=part, orientation="h", row=1, col=1)
    speculative = [row for row in rows if row.get("bound")]
    labels = [row["config"] for row in speculative]
    figure.add_bar(x=labels, y=[row["speedup_steady"] for row in speculative], name="measured", row=1, col=2)
    figure.add_bar(x=labels, y=[row["bound"] for row in speculative], name="Leviathan bound", row=1, col=2)
    kinds = list(steps["kinds"])
    figure.add_bar(
        x=kinds, y=[1000 * k["seconds"] for k in steps["kinds"].values()], name="step", row=1, col=3
    )
    figure.add_bar(
        x=kinds, y=[1000 * k["floor_seconds"] for k in steps["kinds"].values()], name="floor", row=1, col=3
    )
    figure.update_layout(title=title, barmode="stack", height=620, width=1500, template="plotly_white")
    figure.update_yaxes(autorange="reversed", row=1, col=1)
    for col in (2, 3):
        figure.update_xaxes(tickangle=45, row=1, col=col)
    return figure


def run_and_report(options: CpuBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the CPU benchmark, print the tables and the goals, write cpu.json and cpu.html."""
    started = time.perf_counter()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    bench = CpuBench(options)
    waveforms = clips(options)
    names = list(waveforms)
    log = lambda message: print(f"[{time.perf_counter() - started:5.0f} s] {message}", flush=True)  # noqa: E731
    steps = step_costs(bench, waveforms["en-jfk"] if "en-jfk" in waveforms else waveforms[names[0]], log)
    runs = bench.measure(waveforms, log)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        fw_configs, fw_runs, fw_note = child.submit(
            faster_whisper_runs, options, waveforms, torch.get_num_threads()
        ).result()
    log(f"{fw_note}: timed in a child process")
    bench.configs += fw_configs
    runs |= fw_runs
    rows = summarise(bench, names, runs)
    batch = batch_runs(bench, waveforms, log)
    default, long, cost_aware = (
        f"specdec {DEFAULT_VARIANT}, k={options.num_draft_tokens}",
        f"specdec {DEFAULT_VARIANT}, k={options.long_num_draft_tokens}",
        f"specdec {DEFAULT_VARIANT}, cost-aware",
    )
    found = goals(rows, steps, batch, default)
    if long != default:  # the batch decodes at the default k only
        found += goals(rows, steps, batch, long, with_batch=False)
    found += goals(rows, steps, batch, cost_aware)
    for k in dict.fromkeys((options.num_draft_tokens, options.long_num_draft_tokens)):  # the default pair's
        found += goals(rows, steps, batch, f"specdec {SELF_VARIANT}, k={k}", with_batch=False)
    found.append(floor_goal(steps))
    tokens = {name: len(runs[("generate()", name)][0].token_ids) for name in names}
    described = [f"{name} ({len(waveforms[name]) / 16_000:.1f} s, {tokens[name]} tokens)" for name in names]
    print(f"\nclips: {', '.join(described)}; {torch.get_num_threads()} threads; {options.repeats} rounds\n")
    print(table(rows), "\n")
    print(clip_table(rows, names), "\n")
    print(f"memory bandwidth (copy): {steps['bandwidth_bytes_per_second'] / 1e9:.1f} GB/s\n")
    print(step_table(steps), "\n")
    print(batch_table(batch, options.batch_size), "\n")
    print_goals(found)
    identical = all(row["identical"] for row in rows if row["engine"] != "faster-whisper")
    identical &= all(
        found_batch["token_ids"] == batch["target alone"]["token_ids"] for found_batch in batch.values()
    )
    print(
        "\nevery output of ours equals generate()'s"
        if identical
        else "\n!!! SOME OUTPUTS DIFFER FROM generate()"
    )
    report = {
        **report_header(command, options),
        "models": {
            "target": f"{bench.whisper.pair.target.name} ({bench.whisper.pair.target.source})",
            "draft": f"{bench.whisper.pair.draft.name} ({bench.whisper.pair.draft.source})",
            "faster_whisper": f"{fw_note}; timed in a child process",
        },
        "clips": {name: len(waveform) / 16_000 for name, waveform in waveforms.items()},
        "rows": rows,
        "steps": steps,
        "batch": batch,
        "goals": found,
        "identical": identical,
        "texts": {name: runs[("generate()", name)][0].text for name in names},
        "wall_seconds": time.perf_counter() - started,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(report, out_dir / "cpu.json")
    html = out_dir / "cpu.html"
    html.write_text(figure(rows, steps, f"specdec on this CPU: {command}").to_html(include_plotlyjs="cdn"))
    print(f"wrote {out_dir / 'cpu.json'} and {html} ({report['wall_seconds']:.0f} s)")
    return report
