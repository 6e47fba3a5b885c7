"""`python -m benchmarks cpu`: the bundled real pairs on this CPU, every way to decode the same English audio.

generate(), our target alone, each draft variant (`VARIANTS`, one lever added at a time) and the self-draft
at fixed, adaptive and cost-aware k, and faster-whisper (in a child process), in rotated rounds; a batch of
clips; each step kind against its memory floor. docs/benchmarks.md gives the method and the statistics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

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
OUTPUT = ("token_ids", "text")  # a run's output; its other fields are figures (medians kept)


@dataclasses.dataclass(frozen=True)
class CpuBenchOptions:
    repeats: int = 3  # rounds: every configuration decodes every clip once per round, order rotated
    num_draft_tokens: int = 5  # k of the fixed-k rows, and where adaptive k starts
    long_num_draft_tokens: int = 9  # k of one more fixed row of the CPU default: a cheap draft affords more
    audio: tuple[str, ...] = ()  # more English clips besides assets/en-*
    faster_whisper: bool = True  # time faster-whisper too when it is installed
    step_repeats: int = 40  # timed steps per step kind
    batch_size: int = 8  # the batched rows: this many clips (the clips in turn) decoded together


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    engine: str  # "generate()", "specdec", "batch" (specdec on the clips together) or "faster-whisper"
    variant: str | None = None  # specdec: the draft variant (None: the target alone); faster-whisper: dtype
    policy: str = ""  # specdec with a draft: "fixed", "adaptive" or "cost-aware"
    num_draft_tokens: int | None = None  # specdec: k (where adaptive k starts)


def configs(options: CpuBenchOptions) -> list[Config]:
    """Our configurations, in the order every round starts from (faster-whisper's: `faster_whisper_runs`)."""
    k, long_k = options.num_draft_tokens, options.long_num_draft_tokens
    found = [Config("generate()", "generate()"), Config(ALONE, "specdec", num_draft_tokens=k)]
    for variant in [*VARIANTS, SELF_VARIANT]:
        longer = [("fixed", long_k)] if variant in (DEFAULT_VARIANT, SELF_VARIANT) and long_k != k else []
        for policy, each in [("fixed", k), ("adaptive", k), *longer, ("cost-aware", k)]:
            if policy != "cost-aware" or variant == DEFAULT_VARIANT:
                name = f"specdec {variant}, {f'k={each}' if policy == 'fixed' else policy}"
                found.append(Config(name, "specdec", variant, policy, each))
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
    return found | {Path(path).stem: load_audio(path) for path in options.audio}


def load_variants() -> dict[str, SpeculativeWhisper]:
    """Draft variant -> its SpeculativeWhisper, each beside the same packed whisper-base."""
    pair = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu").pair
    pairs = {name: tune_draft(pair, settings) for name, settings in VARIANTS.items()}
    own = make_pair(pair.target, load_self_draft(SELF_DRAFT, pair.target))
    pairs[SELF_VARIANT] = tune_draft(own, CPU_DRAFT)
    return {name: SpeculativeWhisper.from_pair(each) for name, each in pairs.items()}


def decode(models: dict, config: Config, clips: list[np.ndarray]) -> dict:
    """One configuration on clips decoded together (a batch, else one): seconds end to end, the output and
    what the decoding recorded. models: the variants, or faster-whisper's by compute type."""
    if config.engine == "faster-whisper":
        model = models[config.variant]
        (text, _), seconds = harness.timed(lambda: faster_whisper_transcribe(model, clips[0], LANGUAGE))
        return {"end_to_end": seconds, "token_ids": None, "text": text}
    whisper = models[config.variant or DEFAULT_VARIANT]
    if config.engine == "generate()":
        ids, seconds = generate_waveform(whisper, clips[0], LANGUAGE)
        return {"end_to_end": seconds, "token_ids": list(ids), "text": whisper.decode_text(ids)}
    options = TranscribeOptions(language=LANGUAGE, num_draft_tokens=config.num_draft_tokens,
                                speculative=bool(config.variant), adaptive=config.policy == "adaptive",
                                cost_aware=config.policy == "cost-aware", batch_size=len(clips))  # fmt: skip
    found, seconds = harness.timed(lambda: whisper.transcribe_waveforms(clips, options))
    results = [each.result for each in found]
    if config.engine == "batch":  # the rows share the batch's target passes
        return {"end_to_end": seconds, "token_ids": [list(each.token_ids) for each in found],
                "passes": max(r.num_target_passes for r in results),
                "accepted": sum(r.num_accepted for r in results),
                "drafted": sum(r.num_drafted for r in results)}  # fmt: skip
    result, steps, tokens = results[0], results[0].steps, results[0].num_generated
    first, steady = result.passes[0], result.passes[1:]  # batch 1: one row per pass
    return {
        "end_to_end": seconds, "token_ids": list(found[0].token_ids), "text": found[0].text,
        "target_encoder": sum(e.seconds for e in result.encodings if e.model == TARGET_ENCODER),
        "draft_encoder": sum(e.seconds for e in result.encodings if e.model == DRAFT_ENCODER),
        "decode": result.decode_seconds, "first_pass": first.draft_seconds + first.verify_seconds,
        "steady": sum(p.draft_seconds + p.verify_seconds for p in steady),
        "steady_draft": sum(p.draft_seconds for p in steady),
        "steady_verify": sum(p.verify_seconds for p in steady),
        "tokens": tokens, "steady_tokens": tokens - min(steps[0].n_accepted + 1, tokens),
        "passes": result.num_target_passes, "drafted": result.num_drafted, "accepted": result.num_accepted,
        "judged": sum(s.num_judged for s in steps), "drafting_steps": sum(bool(s.drafted) for s in steps),
        "steady_drafted": sum(len(s.drafted) for s in steps[1:]),
    }  # fmt: skip


def measure(configs: list[Config], models: dict, items: dict[str, list], repeats: int, log) -> dict:
    """(config name, item) -> each round's `decode` of the item's clips, after an untimed one of the first."""
    first = next(iter(items.values()))
    runs = harness.rounds(
        configs, lambda config, name: decode(models, config, items[name]), repeats, list(items),
        warm_up=lambda config: decode(models, config, first), log=log,
    )  # fmt: skip
    return {(config.name, name): found for (config, name), found in runs.items()}


def faster_whisper_runs(options: CpuBenchOptions, waveforms: dict, threads: int) -> tuple:
    """faster-whisper float32 and int8 measured as ours are (in a child process): its configurations, their
    runs and a note on the models."""
    torch.set_num_threads(threads)
    models, note = faster_whisper_models(options.faster_whisper)
    found = [Config(f"faster-whisper {t}", "faster-whisper", t) for t in models]
    clips = {name: [waveform] for name, waveform in waveforms.items()}
    return found, measure(found, models, clips, options.repeats, lambda _: None) if found else {}, note


def batch_runs(variants: dict, waveforms: dict, options: CpuBenchOptions, log) -> dict:
    """options.batch_size clips (in turn) decoded together by the default variant, each policy in rotated
    rounds: policy -> the last round's `decode`, the median seconds and the target alone's over them."""
    batch = [list(waveforms.values())[i % len(waveforms)] for i in range(options.batch_size)]
    k = options.num_draft_tokens
    policies = [Config("target alone", "batch", num_draft_tokens=k)]
    policies += [Config(policy, "batch", DEFAULT_VARIANT, policy, k) for policy in ("fixed", "cost-aware")]
    runs = measure(policies, variants, {"batch": batch}, options.repeats, lambda _: None)
    log(f"batch of {len(batch)} done")
    found = {}
    for (policy, _), done in runs.items():
        seconds = [run.pop("end_to_end") for run in done]
        found[policy] = done[-1] | {"seconds": median(seconds), "all_rounds": seconds}
    for each in found.values():
        each["x_target_alone"] = found["target alone"]["seconds"] / each["seconds"]
        each["same"] = each["token_ids"] == found["target alone"]["token_ids"]
    return found


def summarise(configs: list[Config], names: list[str], runs: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """One row per configuration: sums over clips of each clip's medians over rounds, whether every output
    was generate()'s (faster-whisper: its text, spaces aside), and the ratios and statistics of the sums."""
    reference, rows = {clip: runs[("generate()", clip)][0] for clip in names}, []
    for config in configs:
        done = {clip: runs[(config.name, clip)] for clip in names}
        clips = {c: {key: median(r[key] for r in found) for key in found[0] if key not in OUTPUT}
                 for c, found in done.items()}  # fmt: skip
        key = "text" if config.engine == "faster-whisper" else "token_ids"
        same = [_words(r[key]) == _words(reference[c][key]) for c, found in done.items() for r in found]
        rows.append({
            "config": config.name, "engine": config.engine, "variant": config.variant,
            "policy": config.policy,
            "seconds": {key: sum(c[key] for c in clips.values()) for key in clips[names[0]]},
            "clips": clips, "identical": all(same),
            "seconds_all_rounds": {c: [r["end_to_end"] for r in found] for c, found in done.items()},
        })  # fmt: skip
    by_name = {row["config"]: row for row in rows}
    alone, generated = by_name[ALONE]["seconds"], by_name["generate()"]["seconds"]
    generated["decode"] = generated["end_to_end"] - alone["end_to_end"] + alone["decode"]  # the same overhead
    for row in rows:
        for other in ("generate()", ALONE, "faster-whisper float32"):
            if other in by_name:
                row[f"x_{other}_e2e"] = by_name[other]["seconds"]["end_to_end"] / row["seconds"]["end_to_end"]
        row["x_alone_decode"] = ratio(alone["decode"], row["seconds"].get("decode"))
        if row["engine"] == "specdec":
            row |= _speculative(row["seconds"], alone, len(names))
    return rows


def _words(output: str | list[int]) -> list:
    return output.split() if isinstance(output, str) else output


def _speculative(total: dict, alone: dict, clips: int) -> dict:
    """Tokens per second and per pass, α, mean k, c (the draft's step over the target alone's), Leviathan's
    bound, the steady speedup over the target alone and its efficiency (over the bound)."""
    tokens = total["tokens"]
    found = {"tokens_per_second": tokens / total["decode"], "tokens_per_pass": tokens / total["passes"]}
    if not total["drafted"]:
        return found | dict.fromkeys(("alpha", "k", "c", "bound", "efficiency"))
    alone_step = alone["steady"] / max(alone["passes"] - clips, 1)  # seconds per target-only step
    c = total["steady_draft"] / max(total["steady_drafted"], 1) / alone_step
    counts = [total[key] for key in ("accepted", "judged", "drafted", "drafting_steps")]
    stats = harness.draft_statistics(*counts, c)
    per_token = [each["steady"] / max(each["steady_tokens"], 1) for each in (alone, total)]
    speedup = per_token[0] / per_token[1]
    return found | {"alpha": stats["alpha"], "k": stats["mean_k"], "c": c, "bound": stats["bound"],
                    "speedup_steady": speedup, "efficiency": speedup / stats["bound"]}  # fmt: skip


def _seconds(key: str) -> harness.Column:
    return f"{key.replace('_', ' ')} s".replace("end to end", "e2e"), lambda r: r["seconds"].get(key), ".2f"


COLUMNS = [
    ("configuration", "config", ""), *map(_seconds, TIMES), ("tokens/s", "tokens_per_second", ".0f"),
    ("α", "alpha", ".2f"), ("tokens/pass", "tokens_per_pass", ".2f"), ("k", "k", ".1f"), ("c", "c", ".2f"),
    ("bound", "bound", ".2f"), ("x alone steady", "speedup_steady", ".2f"),
    ("efficiency", "efficiency", ".2f"), ("x alone decode", "x_alone_decode", ".2f"),
    ("x alone e2e", f"x_{ALONE}_e2e", ".2f"),
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
    """The configurations; end to end ms per clip; the step kinds and their floors; the batch of `size`."""
    per_clip = [(name, lambda r, name=name: 1000 * r["clips"][name]["end_to_end"], ".0f") for name in names]
    batch_columns = [
        (f"batch of {size}, {DEFAULT_VARIANT}", "policy", ""), ("seconds", "seconds", ".2f"),
        ("x target alone", "x_target_alone", ".2f"), ("target passes", "passes", ""),
        ("α", lambda b: ratio(b["accepted"], b["drafted"]), ".2f"),
        ("same", lambda b: "yes" if b["same"] else "NO", ""),
    ]  # fmt: skip
    return [
        harness.table(rows, COLUMNS, markdown=True),
        harness.table(rows, [("configuration", "config", ""), *per_clip], markdown=True),
        f"memory bandwidth (copy): {steps['bandwidth_bytes_per_second'] / 1e9:.1f} GB/s",
        harness.table([{"kind": n, **k} for n, k in steps["kinds"].items()], STEP_COLUMNS, markdown=True),
        harness.table([{"policy": p, **b} for p, b in batch.items()], batch_columns, markdown=True),
    ]


def goals(rows: list[dict], batch: dict[str, dict], steps: dict, options: CpuBenchOptions) -> list[dict]:
    """The real-pair goals of the default tiny.en variant (k, the longer k, cost-aware k) and the self-draft
    (k, the longer k); the batch goal where the batch ran that configuration's policy and k; the floor."""
    by_name, found = {row["config"]: row for row in rows}, []
    k, long_k = options.num_draft_tokens, options.long_num_draft_tokens
    default, own = f"specdec {DEFAULT_VARIANT}", f"specdec {SELF_VARIANT}"
    batched = {f"{default}, k={k}": "fixed", f"{default}, cost-aware": "cost-aware"}
    for config in dict.fromkeys([f"{default}, k={k}", f"{default}, k={long_k}", f"{default}, cost-aware",
                                 f"{own}, k={k}", f"{own}, k={long_k}"]):  # fmt: skip
        row = by_name[config]
        dense = by_name[ALONE]["clips"][DENSE]["end_to_end"] / row["clips"][DENSE]["end_to_end"]
        found += [
            goal(f"decode vs our target alone, batch 1 ({config})", row["x_alone_decode"], ">=", GOAL_DECODE),
            goal(f"end to end vs our target alone, dense 30 s window ({config})", dense, ">=", GOAL_DENSE),
        ]  # fmt: skip
        for compute_type in ("float32", "int8"):
            other = by_name.get(f"faster-whisper {compute_type}")
            value = ratio(other and other["seconds"]["end_to_end"], row["seconds"]["end_to_end"])
            found.append(goal(f"end to end vs faster-whisper {compute_type} ({config})", value, ">=", 1.0))
        if config in batched:
            label = f"batch vs the batched target alone ({DEFAULT_VARIANT}, {batched[config]} k)"
            found.append(goal(label, batch[batched[config]]["x_target_alone"], ">=", GOAL_BATCH))
    step = steps["kinds"]["target, 1 token"]
    floor = step["seconds"] / step["floor_seconds"]
    return [*found, goal("target step / memory floor", floor, "<", GOAL_FLOOR)]


def figure(rows: list[dict], steps: dict, title: str) -> plots.go.Figure:
    """Each configuration's seconds end to end and decoding (summed over clips); the steps and floors."""
    names, kinds = [row["config"] for row in rows], steps["kinds"]
    seconds = {key: [row["seconds"].get(key) for row in rows] for key in ("end_to_end", "decode")}
    panels = {
        "summed over clips (s)": [plots.bar(x, names, key, orientation="h") for key, x in seconds.items()],
        "step vs floor (ms)": [plots.bar(list(kinds), [1000 * k[key] for k in kinds.values()], key)
                               for key in ("seconds", "floor_seconds")],
    }  # fmt: skip
    axes = [{"y": {"autorange": "reversed"}}, {"x": {"tickangle": 45}}]
    return plots.figure(title, panels, axes, widths=[0.65, 0.35], height=620, width=1400)


def run_and_report(options: CpuBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the CPU benchmark, print the tables and the goals, write cpu.json and cpu.html."""
    record = Record(command, options)
    harness.quiet_transformers()
    variants, waveforms = load_variants(), clips(options)
    names, threads = list(waveforms), torch.get_num_threads()
    steps = step_costs(variants, waveforms.get("en-jfk", waveforms[names[0]]), options, record.log)
    ours = configs(options)
    runs = measure(ours, variants, {name: [w] for name, w in waveforms.items()}, options.repeats, record.log)
    fw_configs, fw_runs, fw_note = harness.in_child(faster_whisper_runs, options, waveforms, threads)
    record.log(f"{fw_note}: timed in a child process")
    rows = summarise([*ours, *fw_configs], names, runs | fw_runs)
    batch = batch_runs(variants, waveforms, options, record.log)
    generated = {name: runs[("generate()", name)][0] for name in names}
    described = [f"{n} ({len(waveforms[n]) / SAMPLE_RATE:.1f} s, {len(generated[n]['token_ids'])} tokens)"
                 for n in names]  # fmt: skip
    print(f"\nclips: {', '.join(described)}; {threads} threads; {options.repeats} rounds\n")
    print("\n\n".join(tables(rows, names, steps, batch, options.batch_size)), "\n")
    mismatched = [row["config"] for row in rows if row["engine"] != "faster-whisper" and not row["identical"]]
    mismatched += [f"batch {policy}" for policy, each in batch.items() if not each["same"]]
    record.verdict(mismatched, "every output of ours equals generate()'s", goals(rows, batch, steps, options))
    target, draft = variants[DEFAULT_VARIANT].pair.target, variants[DEFAULT_VARIANT].pair.draft
    record.update(
        models={"target": f"{target.name} ({target.source})", "draft": f"{draft.name} ({draft.source})",
                "faster_whisper": f"{fw_note}; timed in a child process"},
        clips={name: len(waveform) / SAMPLE_RATE for name, waveform in waveforms.items()},
        rows=rows, steps=steps, batch=batch, texts={name: generated[name]["text"] for name in names},
    )  # fmt: skip
    title = f"specdec on this CPU: {command}"
    record.write(out_dir / "cpu.json", lambda: [figure(rows, steps, title)], command)
    return record


# ---------------------------------------------------------------- step kinds against the memory floor


def step_bytes(model: torch.nn.Module, positions: int, width: int) -> int:
    """Bytes one decoder step of `width` tokens reads: the weights it multiplies by (not the cross-attention
    key/value projections: those run once per window), the cross-attention keys and values over `positions`
    encoder states, and the self-attention cache."""
    weights = 0
    for name, layer in [*model.model.decoder.named_modules(), ("proj_out", model.proj_out)]:
        if name.endswith(("encoder_attn.k_proj", "encoder_attn.v_proj", "._packed_params")):
            continue  # an int8 layer's packed-weights holder is counted with its layer
        if isinstance(layer, torch.nn.Linear):
            weights += sum(p.numel() * p.element_size() for p in (layer.weight, layer.bias) if p is not None)
        elif internals.is_dynamic_int8(layer):  # int8 weights, a float32 bias
            bias = layer.bias()
            weights += layer.weight().numel() + (0 if bias is None else bias.numel() * 4)
    config = model.config
    return weights + 2 * config.decoder_layers * config.d_model * 4 * (positions + PROMPT_TOKENS + width)


def step_costs(variants: dict, waveform: np.ndarray, options: CpuBenchOptions, log) -> dict:
    """Each step kind's median seconds, bytes read and memory floor at the copy bandwidth (a COPY_BYTES tensor
    read and written); the kinds interleaved over rounds, the bandwidth between them (the same load)."""
    target, k = variants[DEFAULT_VARIANT].pair.target, options.num_draft_tokens
    mel = features(target, waveform)
    model, hidden = target.model, encode(target.model, mel)[0]
    kinds = {f"target, {w} token{'s' * (w > 1)}": (model, hidden, w, CachedDecoder) for w in (1, k + 1)}
    for name, whisper in variants.items():
        draft, settings = whisper.pair.draft.model, whisper.pair.draft_settings
        states = encode(draft, mel[..., : draft_frames(settings, mel, WINDOW_FRAMES)])[0]
        decoder = lean_decoder if settings.lean_step else CachedDecoder
        kinds[f"draft {name}, 1 token"] = (draft, pooled_states(states, settings.frame_pooling), 1, decoder)
    source = torch.rand(COPY_BYTES // 4)
    destination, seconds, bandwidths = torch.zeros_like(source), {name: [] for name in kinds}, []
    for _ in range(4):
        copies = [harness.timed(lambda: destination.copy_(source))[1] for _ in range(3)]
        bandwidths.append(2 * COPY_BYTES / median(copies))
        for name, (model, states, width, decoder) in kinds.items():
            seconds[name] += _time_steps(decoder(model, states), width, max(1, options.step_repeats // 4))
    bandwidth = median(bandwidths)
    log(f"memory bandwidth (copy): {bandwidth / 1e9:.1f} GB/s")
    found = {}
    for name, (model, states, width, _) in kinds.items():
        read = step_bytes(model, states.shape[1], width)
        found[name] = {"seconds": median(seconds[name]), "bytes": read, "floor_seconds": read / bandwidth}
    return {"bandwidth_bytes_per_second": bandwidth, "kinds": found}


def _time_steps(decoder: CachedDecoder, width: int, repeats: int) -> list[float]:
    decoder.feed([list(range(50, 50 + PROMPT_TOKENS))])
    seconds = []
    for _ in range(repeats + 1):
        seconds.append(harness.timed(lambda: decoder.feed([list(range(100, 100 + width))]))[1])
        decoder.rollback([PROMPT_TOKENS])
    return seconds[1:]  # the first one grows the cache
