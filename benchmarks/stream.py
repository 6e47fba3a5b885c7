"""`python -m benchmarks stream`: live transcription timed with and without hypothesis reuse.

The stream: assets/*.wav (then any --audio files) concatenated in name order, 26 s (quick: the first
clip only; with the real pair, whose draft is English-only: the English clips, 22 s), fed in
`chunk_seconds` chunks as fast as possible with English forced (no detection pass).
One long stream rather than five short ones, so that the buffer grows past the 15 s trim and is cut, with
the committed text as the next prompt, as in a live session. Configurations, for each draft of the
preset: the previous hypothesis first and the draft model where it cannot ("+ reuse"), the draft model
alone ("only"); and the target alone (no draft, no reuse) as the reference. Each streams the whole audio
`rounds` times on warm models, the order rotated each round; latencies are pooled over rounds.

Every decoded update of every configuration is checked against the target alone decoding that update's
buffer with that update's prompt (as tests/test_streaming.py does), memoised by buffer: the check costs
one target-only decode per distinct buffer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers

from benchmarks.checkpoints import DEFAULT_CACHE, PRESETS, bench_models
from benchmarks.common import goal, print_goals, report_header, write_json
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.engine import kernels
from specdec.options import DecodeOptions
from specdec.streaming.playback import stream_audio, summarise
from specdec.streaming.session import StreamOptions, Update
from specdec.whisper.models import load_model, make_pair

ASSETS = Path(__file__).resolve().parent.parent / "assets"
LANGUAGE = "en"
GOAL_PASS_RATIO = 2.0  # draft only / with reuse, target passes per decoded update


@dataclass(frozen=True)
class StreamBenchOptions:
    size: str = "small"  # "real": the bundled whisper-base <- whisper-tiny.en; "small": the demo models
    chunk_seconds: float = 1.0  # audio per update
    quick: bool = False  # the first clip only
    audio: tuple[str, ...] = ()  # more clips, appended to the stream
    rounds: int = 1  # times each configuration streams the whole audio
    seed: int = 0  # model weights
    cache_dir: Path = DEFAULT_CACHE


@dataclass(frozen=True)
class StreamConfig:
    name: str
    draft: str | None  # draft folder name; None: the target alone
    reuse: bool  # the previous hypothesis drafts first

    def stream_options(self, chunk_seconds: float) -> StreamOptions:
        return StreamOptions(
            chunk_seconds=chunk_seconds,
            language=LANGUAGE,
            reuse_hypothesis=self.reuse,
            use_draft=self.draft is not None,
        )


def stream_configs(drafts: list[str]) -> list[StreamConfig]:
    """Per draft: with reuse, draft only; then the target alone."""
    configs = []
    for draft in drafts:
        configs += [
            StreamConfig(f"{draft} + reuse", draft, True),
            StreamConfig(f"{draft} only", draft, False),
        ]
    return [*configs, StreamConfig("target alone", None, False)]


def load_whispers(options: StreamBenchOptions) -> dict[str, SpeculativeWhisper]:
    """One SpeculativeWhisper per draft of the preset, all on one target (CPU, float32)."""
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if options.size == "real":
        return {"tiny.en": SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")}
    if options.size != "small":
        raise ValueError(
            "the stream benchmark runs with --size small or real: the large-v3-size random models never end "
            "a transcript (their end-of-text is silenced for the token benchmark), so every update would "
            "decode to the token limit"
        )
    preset = PRESETS[options.size]
    paths = bench_models(options.size, options.cache_dir, options.seed)
    cpu = torch.device("cpu")
    models = {
        name: load_model(str(paths[name]), cpu, torch.float32) for name in [preset.target, *preset.drafts]
    }
    for model in models.values():
        kernels.pack(model.model)  # as SpeculativeWhisper does for the models it loads
    target = models[preset.target]
    return {name: SpeculativeWhisper.from_pair(make_pair(target, models[name])) for name in preset.drafts}


def stream_clips(options: StreamBenchOptions) -> tuple[np.ndarray, list[str]]:
    """The stream's waveform (16 kHz) and the names of its clips, in order."""
    found = sorted(ASSETS.glob("*.wav"))
    if options.size == "real":  # an English-only draft, English forced: the English clips
        found = sorted([*ASSETS.glob("en-*.wav"), *ASSETS.glob("en-*.flac")])
    paths = [*found[: 1 if options.quick else None], *map(Path, options.audio)]
    return np.concatenate([load_audio(path, max_seconds=None) for path in paths]), [p.stem for p in paths]


def measure(
    whispers: dict[str, SpeculativeWhisper],
    waveform: np.ndarray,
    chunk_seconds: float,
    rounds: int = 1,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Every configuration streams `waveform` `rounds` times; one row of figures per configuration."""
    configs = stream_configs(list(whispers))
    any_whisper = next(iter(whispers.values()))  # the target alone: any pair, its draft unused
    for whisper in whispers.values():
        whisper.warm_up()
    updates: dict[str, list[Update]] = {config.name: [] for config in configs}
    for round_index in range(rounds):
        shift = round_index % len(configs)  # a different order each round: no configuration always first
        for config in configs[shift:] + configs[:shift]:
            start = time.perf_counter()
            whisper = whispers[config.draft] if config.draft else any_whisper
            updates[config.name] += stream_audio(whisper, waveform, config.stream_options(chunk_seconds))
            log(f"round {round_index + 1}/{rounds} {config.name}: {time.perf_counter() - start:.1f} s")
    references: dict[tuple, tuple[int, ...]] = {}
    rows = []
    for config in configs:
        summary = summarise(updates[config.name], rounds * len(waveform) / SAMPLE_RATE)
        mismatched = target_alone_mismatches(any_whisper, waveform, updates[config.name], references)
        rows.append(
            {
                "config": config.name,
                "draft": config.draft,
                "reuse": config.reuse,
                **summary.to_dict(),
                "identical": not mismatched,
                "mismatched_updates": mismatched,
                "final_text": updates[config.name][-1].committed_text,
            }
        )
    log(f"checked against the target alone: {len(references)} distinct buffers")
    return rows


def target_alone_mismatches(
    whisper: SpeculativeWhisper, waveform: np.ndarray, updates: list[Update], memo: dict
) -> list[int]:
    """Indices of decoded updates whose hypothesis differs from the target alone on their buffer."""
    mismatched = []
    for update in updates:
        if not update.decoded:
            continue
        start = round(update.buffer_start_seconds * SAMPLE_RATE)
        end = round(update.stream_seconds * SAMPLE_RATE)
        key = (start, end, update.prompt_ids, update.language)
        if key not in memo:
            options = DecodeOptions(language=update.language, timestamps=True, prompt_ids=update.prompt_ids)
            memo[key] = whisper.transcribe_waveform(waveform[start:end], options, speculative=False).token_ids
        if update.hypothesis != memo[key]:
            mismatched.append(update.index)
    return mismatched


def goals(rows: list[dict], drafts: list[str], chunk_seconds: float) -> list[dict]:
    """Issue 6's goals per draft: >= 2x fewer passes per update with reuse; median latency < chunk."""
    by_name = {row["config"]: row for row in rows}
    found = []
    for draft in drafts:
        reuse, alone = by_name[f"{draft} + reuse"], by_name[f"{draft} only"]
        ratio = (
            alone["passes_per_update"] / reuse["passes_per_update"] if reuse["passes_per_update"] else None
        )
        found.append(
            goal(f"passes per update, {draft}: draft only / with reuse", ratio, ">=", GOAL_PASS_RATIO)
        )
        latency = reuse["median_latency_seconds"]
        found.append(goal(f"median update latency (s), {draft} + reuse", latency, "<", chunk_seconds))
    return found


def table(rows: list[dict]) -> str:
    """A fixed-width text table: one line per configuration."""
    header = (
        f"{'configuration':<26}{'decoded':>8}{'passes/upd':>11}{'median s':>9}{'p95 s':>7}{'RTF':>6}"
        "  acceptance by source (accepted/drafted)        same"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        acceptance = ", ".join(
            f"{source} {row['acceptance'].get(source, 0.0):.2f} ({counts['accepted']}/{counts['drafted']})"
            for source, counts in sorted(row["proposals"].items(), reverse=True)
        )
        same = "yes" if row["identical"] else f"NO: updates {row['mismatched_updates']}"
        lines.append(
            f"{row['config']:<26}{row['decoded_updates']:>8}{row['passes_per_update']:>11.1f}"
            f"{row['median_latency_seconds']:>9.2f}{row['p95_latency_seconds']:>7.2f}"
            f"{row['real_time_factor']:>6.2f}  {acceptance or '-':<46}  {same}"
        )
    return "\n".join(lines)


def run_and_report(options: StreamBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the stream benchmark, print the table and the goals, write stream.json."""
    started = time.perf_counter()
    whispers = load_whispers(options)
    waveform, clips = stream_clips(options)
    seconds = len(waveform) / SAMPLE_RATE
    print(f"stream: {', '.join(clips)} ({seconds:.1f} s), {options.chunk_seconds:g} s chunks")
    rows = measure(whispers, waveform, options.chunk_seconds, options.rounds)
    found = goals(rows, list(whispers), options.chunk_seconds)
    print(table(rows))
    print()
    print_goals(found, digits=2)
    mismatched = [row["config"] for row in rows if not row["identical"]]
    if mismatched:
        print(f"\n!!! UPDATES DIFFER FROM THE TARGET ALONE in: {', '.join(mismatched)}")
    else:
        print("\nevery decoded update of every configuration equals the target alone on its buffer")
    report = {
        **report_header(command, options),
        "stream": {"clips": clips, "seconds": seconds, "language": LANGUAGE},
        "models": {
            "target": next(iter(whispers.values())).pair.target.name,
            **{name: whisper.pair.draft.name for name, whisper in whispers.items()},
        },
        "rows": rows,
        "identical": all(row["identical"] for row in rows),
        "goals": found,
        "wall_seconds": time.perf_counter() - started,
    }
    path = out_dir / "stream.json"
    write_json(report, path)
    print(f"wrote {path} ({report['wall_seconds']:.0f} s)")
    return report
