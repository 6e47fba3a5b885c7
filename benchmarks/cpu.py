"""`python -m benchmarks cpu`: the bundled real pairs on this CPU, every way to decode the same English audio.

generate(), our target alone, each draft variant (`VARIANTS`, one lever added at a time) and the self-draft
at fixed, adaptive and cost-aware k, and faster-whisper (in a child process), in rotated rounds; a batch of
clips; each step kind against its memory floor. docs/benchmarks.md gives the method and the statistics.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks import harness, plots
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal, median, ratio
from benchmarks.runners import faster_whisper_models, faster_whisper_transcribe, generate_waveform
from specdec import internals
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.engine.cache import CachedDecoder
from specdec.engine.fast_draft import CPU_DRAFT, draft_frames, pooled_states, tune_draft
from specdec.engine.lean_decoder import lean_decoder
from specdec.options import TranscribeOptions
from specdec.trace import DRAFT_ENCODER, TARGET_ENCODER
from specdec.whisper.features import encode, features
from specdec.whisper.models import SELF_DRAFT, DraftSettings, load_self_draft, make_pair
from specdec.whisper.tokens import WINDOW_FRAMES

DENSE = "en-dense-30s"  # English speech filling one whole 30 s window (see `clips`)
DENSE_PARTS = ("en-weather", "en-fellow-americans")
VARIANTS = {  # the draft variants, each adding one lever to the one before
    "float32": DraftSettings(),
    "int8": DraftSettings(int8=True),
    "int8+vocab": DraftSettings(int8=True, vocabulary=CPU_DRAFT.vocabulary),
    "int8+vocab+audio": DraftSettings(int8=True, vocabulary=CPU_DRAFT.vocabulary, audio_context=True),
    "int8+vocab+audio+lean": dataclasses.replace(CPU_DRAFT, frame_pooling=1),
    "int8+vocab+audio+lean+pool": CPU_DRAFT,
}
DEFAULT_VARIANT = "int8+vocab+audio+lean+pool"  # what SpeculativeWhisper runs on a CPU without being told
SELF_VARIANT = "self-draft"  # the default CPU pair's draft: whisper-base's own, with the same CPU settings
ALONE = "specdec target alone"
PROMPT_TOKENS = 20  # cached tokens before a timed step
COPY_BYTES = 256 * 2**20  # the bandwidth benchmark's tensor
GOAL_DECODE, GOAL_DENSE, GOAL_FLOOR, GOAL_BATCH = 2.0, 1.5, 1.3, 1.3
TIMES = ("end_to_end", "target_encoder", "draft_encoder", "decode", "first_pass", "steady")
COUNTS = ("tokens", "steady_tokens", "passes", "drafted", "accepted", "judged", "drafting_steps")
BATCH_POLICIES = {
    "target alone": None,
    "fixed": {"adaptive": False},
    "cost-aware": {"adaptive": False, "cost_aware": True},
}


@dataclass(frozen=True)
class CpuBenchOptions:
    repeats: int = 3  # rounds: every configuration decodes every clip once per round, order rotated
    num_draft_tokens: int = 5  # k of the fixed-k rows, and where adaptive k starts
    long_num_draft_tokens: int = 9  # k of one more fixed row of the CPU default: a cheap draft affords more
    audio: tuple[str, ...] = ()  # more English clips besides assets/en-*
    faster_whisper: bool = True  # time faster-whisper too when it is installed
    step_repeats: int = 40  # timed steps per step kind
    batch_size: int = 8  # the batched rows: this many clips (the clips in turn) decoded together


@dataclass(frozen=True)
class Config:
    name: str
    engine: str  # "generate()", "specdec" or "faster-whisper"
    variant: str | None = None  # specdec: the draft variant (None: the target alone)
    policy: str = ""  # specdec with a draft: "fixed", "adaptive" or "cost-aware"
    compute_type: str = ""  # faster-whisper: "float32" or "int8"
    num_draft_tokens: int | None = None  # specdec fixed: k when not the options' num_draft_tokens


@dataclass
class Run:
    """One configuration on one clip in one round."""

    end_to_end: float
    token_ids: list[int] | None = None  # None for faster-whisper (its text is compared)
    text: str = ""
    stats: dict = field(default_factory=dict)  # specdec: what the decoding recorded


def configs(options: CpuBenchOptions) -> list[Config]:
    """Our configurations, in the order every round starts from (faster-whisper's: `faster_whisper_runs`)."""
    k, long_k = options.num_draft_tokens, options.long_num_draft_tokens
    found = [Config("generate()", "generate()"), Config(ALONE, "specdec")]
    for variant in [*VARIANTS, SELF_VARIANT]:
        found.append(Config(f"specdec {variant}, k={k}", "specdec", variant, "fixed"))
        found.append(Config(f"specdec {variant}, adaptive", "specdec", variant, "adaptive"))
        if variant in (DEFAULT_VARIANT, SELF_VARIANT) and long_k != k:
            found.append(
                Config(f"specdec {variant}, k={long_k}", "specdec", variant, "fixed", num_draft_tokens=long_k)
            )
        if variant == DEFAULT_VARIANT:
            found.append(Config(f"specdec {variant}, cost-aware", "specdec", variant, "cost-aware"))
    return found


def clips(options: CpuBenchOptions) -> dict[str, np.ndarray]:
    """name -> 16 kHz waveform: the English assets, the dense 30 s window, the --audio files."""
    paths = sorted([*ASSETS.glob("en-*.wav"), *ASSETS.glob("en-*.flac")])
    found = {path.stem: load_audio(path) for path in paths}
    # two spoken clips with half a second of silence after each, repeated: whisper-base transcribes all
    # of it; in the other order, or with jfk's recording among them, it stops after a sentence
    pause = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    speech = np.concatenate([part for name in DENSE_PARTS for part in (found[name], pause)])
    window = WINDOW_FRAMES * SAMPLE_RATE // 100
    found[DENSE] = np.tile(speech, -(-window // len(speech)))[:window]
    found.update({Path(path).stem: load_audio(path) for path in options.audio})
    return found


class CpuBench:
    """The models, the configurations and how each decodes a clip."""

    def __init__(self, options: CpuBenchOptions) -> None:
        self.options = options
        self.whisper = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")
        self.variants = {
            name: SpeculativeWhisper.from_pair(tune_draft(self.whisper.pair, settings))
            for name, settings in VARIANTS.items()
        }
        target = self.whisper.pair.target  # the self-draft beside the same (packed) target
        self_pair = make_pair(target, load_self_draft(SELF_DRAFT, target))
        self.variants[SELF_VARIANT] = SpeculativeWhisper.from_pair(tune_draft(self_pair, CPU_DRAFT))
        self.configs = configs(options)

    def decode(self, config: Config, waveform: np.ndarray) -> Run:
        if config.engine == "generate()":
            token_ids, seconds = generate_waveform(self.whisper, waveform, LANGUAGE)
            return Run(seconds, list(token_ids), self.whisper.decode_text(token_ids))
        k = config.num_draft_tokens or self.options.num_draft_tokens
        policy = {"adaptive": config.policy == "adaptive", "cost_aware": config.policy == "cost-aware"}
        options = TranscribeOptions(
            language=LANGUAGE, num_draft_tokens=k, speculative=bool(config.variant), **policy
        )
        whisper = self.variants[config.variant or DEFAULT_VARIANT]
        (found,), seconds = harness.timed(lambda: whisper.transcribe_waveforms([waveform], options))
        return Run(seconds, list(found.token_ids), found.text, _stats(found.result))


def measure(configs: list[Config], decode, waveforms: dict[str, np.ndarray], repeats: int, log) -> dict:
    """(config name, clip) -> one Run per round of decode(config, waveform), rotated rounds after a first
    untimed decode of the first clip by each."""
    first = next(iter(waveforms.values()))
    runs = harness.rounds(
        configs, lambda config, name: decode(config, waveforms[name]), repeats, list(waveforms),
        warm_up=lambda config: decode(config, first), log=log,
    )  # fmt: skip
    return {(config.name, name): found for (config, name), found in runs.items()}


def faster_whisper_runs(options: CpuBenchOptions, waveforms: dict[str, np.ndarray], threads: int) -> tuple:
    """faster-whisper float32 and int8 measured as `measure` measures ours (run in a child process): its
    configurations, their runs and a note on the models."""
    torch.set_num_threads(threads)
    models, note = faster_whisper_models(options.faster_whisper)
    found = [Config(f"faster-whisper {t}", "faster-whisper", compute_type=t) for t in models]

    def decode(config: Config, waveform: np.ndarray) -> Run:
        model = models[config.compute_type]
        (text, _), seconds = harness.timed(lambda: faster_whisper_transcribe(model, waveform, LANGUAGE))
        return Run(seconds, None, text)

    return found, measure(found, decode, waveforms, options.repeats, lambda _: None) if found else {}, note


def batch_runs(bench: CpuBench, waveforms: dict[str, np.ndarray], log) -> dict[str, dict]:
    """options.batch_size clips (in turn) decoded together by the default variant, each policy in rotated
    rounds: policy -> the batch's median seconds, token ids and target passes."""
    names = list(waveforms)
    batch = [waveforms[names[i % len(names)]] for i in range(bench.options.batch_size)]
    whisper, k = bench.variants[DEFAULT_VARIANT], bench.options.num_draft_tokens

    def run(policy: str, _: object = None) -> tuple:
        extra = BATCH_POLICIES[policy]
        options = TranscribeOptions(language=LANGUAGE, num_draft_tokens=k, speculative=extra is not None,
                                    batch_size=len(batch), **(extra or {}))  # fmt: skip
        return harness.timed(lambda: whisper.transcribe_waveforms(batch, options))

    runs = harness.rounds(list(BATCH_POLICIES), run, bench.options.repeats, warm_up=run, log=lambda _: None)
    log(f"batch of {len(batch)} done")
    found = {}
    for (policy, _), timed in runs.items():
        transcriptions = timed[-1][0]
        found[policy] = {
            "token_ids": [list(t.token_ids) for t in transcriptions],
            "passes": max(t.result.num_target_passes for t in transcriptions),  # the batch's passes
            "accepted": sum(t.result.num_accepted for t in transcriptions),
            "drafted": sum(t.result.num_drafted for t in transcriptions),
            "seconds": median(seconds for _, seconds in timed),
            "all_rounds": [seconds for _, seconds in timed],
        }
    return found


def _stats(result) -> dict:
    """What a specdec decoding recorded, for the statistics (batch 1: one row per pass)."""
    first, steady, steady_steps = result.passes[0], result.passes[1:], result.steps[1:]
    return {
        "target_encoder": sum(e.seconds for e in result.encodings if e.model == TARGET_ENCODER),
        "draft_encoder": sum(e.seconds for e in result.encodings if e.model == DRAFT_ENCODER),
        "decode": result.decode_seconds,
        "first_pass": first.draft_seconds + first.verify_seconds,
        "steady": sum(p.draft_seconds + p.verify_seconds for p in steady),
        "steady_draft": sum(p.draft_seconds for p in steady),
        "steady_verify": sum(p.verify_seconds for p in steady),
        "tokens": result.num_generated,
        "steady_tokens": result.num_generated - min(result.steps[0].n_accepted + 1, result.num_generated),
        "passes": result.num_target_passes,
        "drafted": result.num_drafted,
        "accepted": result.num_accepted,
        "judged": sum(step.num_judged for step in result.steps),
        "drafting_steps": sum(bool(step.drafted) for step in result.steps),
        "steady_drafted": sum(len(step.drafted) for step in steady_steps),
    }


def clip_medians(runs: list[Run]) -> dict:
    """A clip's times (median over rounds) and counts (the same every round: greedy)."""
    found = {"end_to_end": median(run.end_to_end for run in runs)}
    for key in (*TIMES[1:], "steady_draft", "steady_verify", *COUNTS, "steady_drafted"):
        if key in runs[0].stats:
            found[key] = median(run.stats[key] for run in runs)
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
            row |= _speculative(total, alone_step, alone_per_token)
        rows.append(row)
    by_name = {row["config"]: row for row in rows}
    for row in rows:
        for other in ("generate()", ALONE, "faster-whisper float32"):
            if other in by_name:
                row[f"x_{other}_e2e"] = by_name[other]["seconds"]["end_to_end"] / row["seconds"]["end_to_end"]
        row["x_alone_decode"] = ratio(by_name[ALONE]["seconds"]["decode"], row["seconds"].get("decode"))
    return rows


def _identical(config: Config, names: list[str], runs: dict, reference: dict) -> bool:
    """Every run's output equals generate()'s: token ids for ours, the text (spaces aside) for
    faster-whisper."""
    return all(
        run.token_ids == reference[clip].token_ids if run.token_ids is not None
        else run.text.split() == reference[clip].text.split()
        for clip in names for run in runs[(config.name, clip)]
    )  # fmt: skip


def _speculative(total: dict, alone_step: float, alone_per_token: float) -> dict:
    """α, tokens per pass, mean k, c, the bound and the efficiency of one specdec configuration."""
    found = {
        "tokens_per_second": total["tokens"] / total["decode"],
        "tokens_per_pass": total["tokens"] / total["passes"],
    }
    if not total.get("drafted"):
        return found | dict.fromkeys(("alpha", "k", "c", "bound", "efficiency"))
    c = total["steady_draft"] / max(total["steady_drafted"], 1) / alone_step
    counts = (total[key] for key in ("accepted", "judged", "drafted", "drafting_steps"))
    stats = harness.draft_statistics(*counts, c)
    speedup = alone_per_token / (total["steady"] / max(total["steady_tokens"], 1))
    return found | {"alpha": stats["alpha"], "k": stats["mean_k"], "c": c, "bound": stats["bound"],
                    "speedup_steady": speedup, "efficiency": speedup / stats["bound"]}  # fmt: skip


def _seconds(key: str) -> harness.Column:
    return (
        f"{key.replace('_', ' ')} s".replace("end to end", "e2e"),
        lambda row: row["seconds"].get(key),
        ".2f",
    )


COLUMNS = [
    ("configuration", "config", ""), *(_seconds(key) for key in TIMES),
    ("tokens/s", "tokens_per_second", ".0f"), ("α", "alpha", ".2f"),
    ("tokens/pass", "tokens_per_pass", ".2f"), ("k", "k", ".1f"), ("c", "c", ".2f"),
    ("bound", "bound", ".2f"), ("x alone steady", "speedup_steady", ".2f"),
    ("efficiency", "efficiency", ".2f"),
    ("x alone decode", "x_alone_decode", ".2f"), ("x alone e2e", f"x_{ALONE}_e2e", ".2f"),
    ("x generate() e2e", "x_generate()_e2e", ".2f"),
    ("x faster-whisper f32 e2e", "x_faster-whisper float32_e2e", ".2f"),
    ("same as generate()", lambda row: "yes" if row["identical"] else "NO", ""),
]  # fmt: skip


STEP_COLUMNS = [
    ("step kind", "kind", ""), ("ms", lambda k: 1000 * k["seconds"], ".2f"),
    ("MB read", lambda k: k["bytes"] / 1e6, ".0f"), ("floor ms", lambda k: 1000 * k["floor_seconds"], ".2f"),
    ("x floor", lambda k: k["seconds"] / k["floor_seconds"], ".1f"),
]  # fmt: skip


def tables(rows: list[dict], names: list[str], steps: dict, batch: dict[str, dict], size: int) -> list[str]:
    """The configurations; end to end ms per clip (median over rounds); the step kinds against their floors;
    the batch of `size` clips against the batched target alone."""
    per_clip = [
        (name, lambda row, name=name: 1000 * row["clips"][name]["end_to_end"], ".0f") for name in names
    ]
    alone = batch["target alone"]
    batched = [
        {"policy": policy, **found, "ratio": alone["seconds"] / found["seconds"],
         "same": "yes" if found["token_ids"] == alone["token_ids"] else "NO"}
        for policy, found in batch.items()
    ]  # fmt: skip
    batch_columns = [
        (f"batch of {size}, {DEFAULT_VARIANT}", "policy", ""), ("seconds", "seconds", ".2f"),
        ("x target alone", "ratio", ".2f"), ("target passes", "passes", ""),
        ("α", lambda b: ratio(b["accepted"], b["drafted"]), ".2f"), ("same", "same", ""),
    ]  # fmt: skip
    return [
        harness.table(rows, COLUMNS, markdown=True),
        harness.table(rows, [("configuration", "config", ""), *per_clip], markdown=True),
        f"memory bandwidth (copy): {steps['bandwidth_bytes_per_second'] / 1e9:.1f} GB/s",
        harness.table([{"kind": n, **k} for n, k in steps["kinds"].items()], STEP_COLUMNS, markdown=True),
        harness.table(batched, batch_columns, markdown=True),
    ]


def goals(rows: list[dict], batch: dict[str, dict], config: str, with_batch: bool = True) -> list[dict]:
    """The real-pair goals this benchmark measures for one configuration (of the default tiny.en variant or
    the self-draft); the batch goal where the batch ran that configuration's policy and k."""
    by_name = {row["config"]: row for row in rows}
    best = by_name[config]
    dense = by_name[ALONE]["clips"][DENSE]["end_to_end"] / best["clips"][DENSE]["end_to_end"]
    found = [
        goal(f"decode vs our target alone, batch 1 ({config})", best["x_alone_decode"], ">=", GOAL_DECODE),
        goal(f"end to end vs our target alone, dense 30 s window ({config})", dense, ">=", GOAL_DENSE),
    ]
    for compute_type in ("float32", "int8"):
        other = by_name.get(f"faster-whisper {compute_type}")
        value = ratio(other and other["seconds"]["end_to_end"], best["seconds"]["end_to_end"])
        found.append(goal(f"end to end vs faster-whisper {compute_type} ({config})", value, ">=", 1.0))
    if not with_batch:
        return found
    policy = "cost-aware" if "cost-aware" in config else "fixed"
    value = batch["target alone"]["seconds"] / batch[policy]["seconds"]
    label = f"batch vs the batched target alone ({DEFAULT_VARIANT}, {policy} k)"
    return [*found, goal(label, value, ">=", GOAL_BATCH)]


PARTS = ("features + target encoder", "draft encoder", "first pass", "steady steps")


def figure(rows: list[dict], steps: dict, title: str) -> plots.go.Figure:
    """Left: where each configuration's time goes; middle: speedup and bound; right: steps and floors."""
    names, parts = [row["config"] for row in rows], {}
    for row in rows:
        s = row["seconds"]
        split = "decode" in s and row["engine"] == "specdec"
        encoders = s["end_to_end"] - s["decode"] - s.get("draft_encoder", 0) if split else 0.0
        values = (encoders, s.get("draft_encoder", 0), s.get("first_pass", 0), s.get("steady", 0))
        for part, value in zip(PARTS, values, strict=True):
            parts.setdefault(part, []).append(value if split else 0.0)
        parts.setdefault("end to end (not split)", []).append(0.0 if split else s["end_to_end"])
    speculative = [row for row in rows if row.get("bound")]
    labels, kinds = [row["config"] for row in speculative], list(steps["kinds"])
    bars = [plots.bar(x, names, part, orientation="h") for part, x in parts.items()]
    panels = {
        "end to end, summed over clips (s)": bars,
        "steady speedup over the target alone": [
            plots.bar(labels, [row["speedup_steady"] for row in speculative], "measured"),
            plots.bar(labels, [row["bound"] for row in speculative], "Leviathan bound"),
        ],
        "step vs floor (ms)": [
            plots.bar(kinds, [1000 * k["seconds"] for k in steps["kinds"].values()], "step"),
            plots.bar(kinds, [1000 * k["floor_seconds"] for k in steps["kinds"].values()], "floor"),
        ],
    }  # fmt: skip
    axes = [{"y": {"autorange": "reversed"}}, {"x": {"tickangle": 45}}, {"x": {"tickangle": 45}}]
    return plots.figure(
        title, panels, axes, widths=[0.45, 0.3, 0.25], barmode="stack", height=620, width=1500
    )


def run_and_report(options: CpuBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the CPU benchmark, print the tables and the goals, write cpu.json and cpu.html."""
    record = Record(command, options)
    harness.quiet_transformers()
    bench = CpuBench(options)
    waveforms = clips(options)
    names = list(waveforms)
    log = record.log
    steps = step_costs(bench, waveforms.get("en-jfk", waveforms[names[0]]), log)
    runs = measure(bench.configs, bench.decode, waveforms, options.repeats, log)
    fw_configs, fw_runs, fw_note = harness.in_child(
        faster_whisper_runs, options, waveforms, torch.get_num_threads()
    )
    log(f"{fw_note}: timed in a child process")
    bench.configs += fw_configs
    rows = summarise(bench, names, runs | fw_runs)
    batch = batch_runs(bench, waveforms, log)
    k, long_k = options.num_draft_tokens, options.long_num_draft_tokens
    found = goals(rows, batch, f"specdec {DEFAULT_VARIANT}, k={k}")
    if long_k != k:  # the batch decodes at the default k only
        found += goals(rows, batch, f"specdec {DEFAULT_VARIANT}, k={long_k}", with_batch=False)
    found += goals(rows, batch, f"specdec {DEFAULT_VARIANT}, cost-aware")
    for each in dict.fromkeys((k, long_k)):  # the default pair's
        found += goals(rows, batch, f"specdec {SELF_VARIANT}, k={each}", with_batch=False)
    step = steps["kinds"]["target, 1 token"]
    found.append(goal("target step / memory floor", step["seconds"] / step["floor_seconds"], "<", GOAL_FLOOR))
    tokens = {name: len(runs[("generate()", name)][0].token_ids) for name in names}
    described = [
        f"{name} ({len(waveforms[name]) / SAMPLE_RATE:.1f} s, {tokens[name]} tokens)" for name in names
    ]
    print(f"\nclips: {', '.join(described)}; {torch.get_num_threads()} threads; {options.repeats} rounds\n")
    print("\n\n".join(tables(rows, names, steps, batch, options.batch_size)), "\n")
    alone_ids = batch["target alone"]["token_ids"]
    mismatched = [row["config"] for row in rows if row["engine"] != "faster-whisper" and not row["identical"]]
    mismatched += [f"batch {policy}" for policy, each in batch.items() if each["token_ids"] != alone_ids]
    record.verdict(mismatched, "every output of ours equals generate()'s", found)
    target, draft = bench.whisper.pair.target, bench.whisper.pair.draft
    record.update(
        models={"target": f"{target.name} ({target.source})", "draft": f"{draft.name} ({draft.source})",
                "faster_whisper": f"{fw_note}; timed in a child process"},
        clips={name: len(waveform) / SAMPLE_RATE for name, waveform in waveforms.items()},
        rows=rows, steps=steps, batch=batch,
        texts={name: runs[("generate()", name)][0].text for name in names},
    )  # fmt: skip
    record.write(
        out_dir / "cpu.json", lambda: [figure(rows, steps, f"specdec on this CPU: {command}")], command
    )
    return record


# ---------------------------------------------------------------- step kinds against the memory floor


def copy_bandwidth(repeats: int = 10) -> float:
    """Bytes per second moved by copying a COPY_BYTES float32 tensor (read + write), median of repeats."""
    source = torch.rand(COPY_BYTES // 4)
    destination = torch.zeros_like(source)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        destination.copy_(source)
        seconds.append(time.perf_counter() - start)
    return 2 * COPY_BYTES / statistics.median(seconds)


def step_bytes(model: nn.Module, positions: int, width: int) -> int:
    """Bytes one decoder step of `width` tokens reads: the weights it multiplies by (not the
    cross-attention key/value projections: those run once per window), the cross-attention keys and
    values over `positions` encoder states, and the self-attention cache."""
    weights = 0
    for name, module in [*model.model.decoder.named_modules(), ("proj_out", model.proj_out)]:
        # an int8 layer's packed-weights holder is counted with its layer
        if name.endswith(("encoder_attn.k_proj", "encoder_attn.v_proj", "._packed_params")):
            continue
        weights += _own_weight_bytes(module)
    config = model.config
    cache = 2 * config.decoder_layers * config.d_model * 4 * (positions + PROMPT_TOKENS + width)
    return weights + cache


def _own_weight_bytes(module: nn.Module) -> int:
    if isinstance(module, nn.Linear):
        return sum(p.numel() * p.element_size() for p in (module.weight, module.bias) if p is not None)
    if internals.is_dynamic_int8(module):  # int8 weights, a float32 bias
        bias = module.bias()
        return module.weight().numel() + (bias.numel() * 4 if bias is not None else 0)
    return 0


def step_costs(bench: CpuBench, waveform: np.ndarray, log) -> dict:
    """Each step kind's median seconds, bytes read and memory floor; kinds interleaved over rounds."""
    target = bench.whisper.pair.target
    clip_features = features(target, waveform)
    k = bench.options.num_draft_tokens
    hidden = encode(target.model, clip_features)[0]
    kinds = {
        "target, 1 token": (target.model, hidden, 1, CachedDecoder),
        f"target, {k + 1} tokens": (target.model, hidden, k + 1, CachedDecoder),
    }
    for name, whisper in bench.variants.items():
        draft, settings = whisper.pair.draft.model, whisper.pair.draft_settings
        frames = draft_frames(settings, clip_features, WINDOW_FRAMES)
        decoder = lean_decoder if settings.lean_step else CachedDecoder
        hidden = pooled_states(encode(draft, clip_features[..., :frames])[0], settings.frame_pooling)
        kinds[f"draft {name}, 1 token"] = (draft, hidden, 1, decoder)
    seconds: dict[str, list[float]] = {name: [] for name in kinds}
    bandwidths = []
    rounds = 4
    for _ in range(rounds):  # the bandwidth between the steps, so that both see the same load
        bandwidths.append(copy_bandwidth(repeats=3))
        for name, (model, hidden, width, decoder) in kinds.items():
            repeats = max(1, bench.options.step_repeats // rounds)
            seconds[name] += _time_steps(decoder(model, hidden), width, repeats)
    bandwidth = statistics.median(bandwidths)
    log(f"memory bandwidth (copy): {bandwidth / 1e9:.1f} GB/s")
    found = {}
    for name, (model, hidden, width, _) in kinds.items():
        read = step_bytes(model, hidden.shape[1], width)
        median = statistics.median(seconds[name])
        found[name] = {"seconds": median, "bytes": read, "floor_seconds": read / bandwidth}
    return {"bandwidth_bytes_per_second": bandwidth, "kinds": found}


def _time_steps(decoder: CachedDecoder, width: int, repeats: int) -> list[float]:
    decoder.feed([list(range(50, 50 + PROMPT_TOKENS))])
    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        decoder.feed([list(range(100, 100 + width))])
        seconds.append(time.perf_counter() - start)
        decoder.rollback([PROMPT_TOKENS])
    return seconds[1:]  # the first one grows the cache
