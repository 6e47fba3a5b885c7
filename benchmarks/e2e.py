"""`python -m benchmarks e2e`: one request as a user sends it, end to end, per clip.

A file's path in, its transcript out, every option at its default: the target alone, each draft of
`drafts`, and faster-whisper float32 and int8 (in a child process), in rotated rounds after a warm-up on a
clip no round times; every speculative output checked token for token against the target alone's.
docs/benchmarks.md gives the method, the ceilings and the bounds.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import soundfile
import torch

from benchmarks import harness, plots
from benchmarks.harness import ASSETS, Record, audio_paths, record_path
from benchmarks.runners import faster_whisper_models, faster_whisper_transcribe
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.longform import is_long
from specdec.options import DecodeOptions
from specdec.whisper.models import PairError

LONG_CLIPS = (ASSETS / "long" / "en-six-parts.flac",)
TARGET_ALONE = "target alone"
COMPUTE_TYPES = ("float32", "int8")  # faster-whisper's
WARM_UP_SECONDS = 5.0  # taken from each of the first two clips for the warm-up clip
# untimed pause before each call: OpenMP threads left spinning by the call before (the runtime's default
# waiting; in the child process, CTranslate2's) go to sleep and do not steal the next call's cores
SETTLE_SECONDS = 0.3


@dataclass(frozen=True)
class E2eBenchOptions:
    OUT: ClassVar[str] = "docs/bench-e2e-base.json"  # where --out points unless told

    drafts: str = "self,tiny.en"  # comma-separated drafts: "tiny.en", "self" (shipped self-draft), a folder
    clips: str = ""  # only these clips, comma-separated names (en-jfk) or paths; empty: all of them
    extra: str = ""  # more audio files or folders, comma-separated (audio the drafts were never trained on)
    # 5, not 3: the never-slower goal is judged within a percent, closer than fewer rounds of a short
    # request agree with each other
    repeats: int = 5  # rounds: every configuration decodes every clip once per round, order rotated
    target: str = "base"  # the target; faster-whisper runs only beside the bundled base
    faster_whisper: bool = True  # time faster-whisper float32 and int8 too when it is installed


@dataclass(frozen=True)
class Config:
    name: str
    draft: str | None = None  # specdec speculative: the draft's name
    compute_type: str = ""  # faster-whisper: "float32" or "int8"


@dataclass(frozen=True)
class Clip:
    path: Path
    seconds: float  # of audio
    long: bool  # over 30 s: decoded long-form, with timestamps

    @property
    def name(self) -> str:
        """The file's stem; with its folder's name for a file outside the assets (unique in the table: two
        folders of --extra may each hold a 00000.wav)."""
        if self.path.resolve().parent in (ASSETS, ASSETS / "long"):
            return self.path.stem
        return f"{self.path.parent.name}/{self.path.stem}"


@dataclass
class Call:
    """One configuration's call on one clip in one round."""

    seconds: float
    language: str
    text: str
    token_ids: tuple[int, ...] | None = None  # None for faster-whisper (its text is compared)
    stats: dict = field(default_factory=dict)  # specdec: `DecodeResult.stats()`


def split(names: str) -> list[str]:
    return [name.strip() for name in names.split(",") if name.strip()]


def clips(options: E2eBenchOptions) -> list[Clip]:
    """The short assets, the long clip and --extra, or the --clips among them (or given by path); a folder
    given stands for every audio file under it."""
    extra = audio_paths([Path(name) for name in split(options.extra)])
    found = [*sorted([*ASSETS.glob("*.wav"), *ASSETS.glob("*.flac")]), *LONG_CLIPS, *extra]
    if options.clips:
        by_name = {key: path for path in found for key in (path.stem, path.name, str(path))}
        found = audio_paths([by_name.get(name, Path(name)) for name in split(options.clips)])
    missing = [str(path) for path in found if not path.is_file()]
    if missing:
        choices = ", ".join(path.stem for path in [*sorted(ASSETS.glob("*.*")), *LONG_CLIPS])
        raise SystemExit(f"e2e: no audio file {', '.join(missing)} (clip names: {choices})")
    waveforms = {path: load_audio(path, max_seconds=None) for path in found}
    return [Clip(path, len(audio) / SAMPLE_RATE, is_long(audio)) for path, audio in waveforms.items()]


def load_models(options: E2eBenchOptions) -> tuple[dict[str, object], list[Config]]:
    """Config name -> its SpeculativeWhisper (the target alone and each draft), and the configs."""
    models: dict[str, object] = {}
    configs = [Config(TARGET_ALONE)]
    for draft in split(options.drafts):
        try:
            models[f"draft {draft}"] = SpeculativeWhisper(
                draft_model=draft, final_model=options.target, device="cpu"
            )
        except PairError as error:
            raise SystemExit(f"e2e: the draft {draft!r} cannot draft for {options.target}: {error}") from None
        configs.append(Config(f"draft {draft}", draft=draft))
    models[TARGET_ALONE] = SpeculativeWhisper(draft_model=None, final_model=options.target, device="cpu")
    return models, configs


def measure_faster_whisper(
    wanted: bool, clips: list[Clip], warm_up: Path, repeats: int, threads: int
) -> tuple:
    """faster-whisper float32 and int8 timed as `measure` times ours, in the process that runs this (a
    child of the benchmark's): its configurations, calls and a note on the models."""
    torch.set_num_threads(threads)
    fw_models, note = faster_whisper_models(wanted)
    models = {f"faster-whisper {compute_type}": model for compute_type, model in fw_models.items()}
    configs = [Config(name, compute_type=name.split()[-1]) for name in models]
    return configs, measure(configs, models, clips, repeats, warm_up, lambda _: None) if configs else {}, note


def call(config: Config, model, path: Path, long: bool) -> Call:
    """The timed request: the file's path in, its transcript out."""
    if config.compute_type:
        (text, language), seconds = harness.timed(
            lambda: faster_whisper_transcribe(model, str(path), long=long)
        )
        return Call(seconds, language, text)
    (found,), seconds = harness.timed(
        lambda: model.transcribe(str(path), return_stats=True, speculative=config.draft is not None)
    )
    return Call(seconds, found.language, found.text, found.token_ids, found.result.stats())


def warm_up_clip(clips: list[Clip], folder: Path) -> Path:
    """The first WARM_UP_SECONDS of (up to) two clips, spliced into a WAV that no round times."""
    samples = int(WARM_UP_SECONDS * SAMPLE_RATE)
    parts = [load_audio(clip.path, max_seconds=None)[:samples] for clip in clips[:2]]
    path = folder / "warm-up.wav"
    soundfile.write(path, np.concatenate(parts), SAMPLE_RATE)
    return path


def measure(configs: list[Config], models: dict, clips: list[Clip], repeats: int, warm_up: Path, log) -> dict:
    """(config name, clip path) -> one Call per round, after an untimed call each on the warm-up clip."""
    found = harness.rounds(
        configs, lambda config, clip: call(config, models[config.name], clip.path, clip.long), repeats, clips,
        warm_up=lambda config: call(config, models[config.name], warm_up, long=False),
        settle=SETTLE_SECONDS, log=log,
    )  # fmt: skip
    return {(config.name, clip.path): calls for (config, clip), calls in found.items()}


def rows_of(
    configs: list[Config], clips: list[Clip], calls: dict[tuple[str, Path], list[Call]]
) -> list[dict]:
    """One row per (clip, configuration): medians, ratio to the target alone, acceptance, identity."""
    rows = []
    for clip in clips:
        alone = calls[(TARGET_ALONE, clip.path)]
        alone_median = statistics.median(c.seconds for c in alone)
        for config in configs:
            mine = calls[(config.name, clip.path)]
            median = statistics.median(c.seconds for c in mine)
            stats = mine[0].stats
            # faster-whisper's ids are its own tokenizer's: only its text is compared
            identical = None if config.compute_type else all(c.token_ids == alone[0].token_ids for c in mine)
            rows.append({
                "clip": clip.name, "path": str(clip.path), "language": mine[0].language,
                "clip_language": alone[0].language,  # the target's detection
                "audio_seconds": round(clip.seconds, 2), "long_form": clip.long, "configuration": config.name,
                "kind": "faster-whisper" if config.compute_type else "specdec", "draft": config.draft,
                "median_seconds": median, "all_seconds": [c.seconds for c in mine],
                "ratio": alone_median / median,
                # the decode phase alone (encoders excluded), the draft's and the verify passes' shares
                # (`drafting_costs`): medians over rounds
                **{key: None if config.compute_type else statistics.median(c.stats[key] for c in mine)
                   for key in ("decode_seconds", "draft_seconds", "verify_seconds")},
                "acceptance_rate": stats.get("acceptance_rate"), "accepted": stats.get("num_accepted"),
                "drafted": stats.get("num_drafted"), "target_passes": stats.get("num_target_passes"),
                "identical": identical, "same_text": all(c.text == alone[0].text for c in mine),
                "text": mine[0].text,
            })  # fmt: skip
    return rows


def summary(rows: list[dict], drafts: list[str]) -> dict[str, dict]:
    """Per draft: the short-English median ratio, the non-English minimum, long-form against the target
    alone and against faster-whisper, acceptance per language (accepted / drafted over its clips), what a
    drafted token costs and the ratios no acceptance could pass at those costs."""
    found = {}
    for draft in drafts:
        mine = [row for row in rows if row["draft"] == draft]
        short_english = [r for r in mine if r["clip_language"] == "en" and not r["long_form"]]
        english = [r["ratio"] for r in short_english]
        other = [r["ratio"] for r in mine if r["clip_language"] != "en"]
        long = {r["clip"]: r for r in mine if r["long_form"]}
        against = {}
        for compute_type in COMPUTE_TYPES:
            theirs = [
                r for r in rows if r["configuration"] == f"faster-whisper {compute_type}" and r["long_form"]
            ]
            if theirs and long:
                against[compute_type] = statistics.median(
                    r["median_seconds"] / long[r["clip"]]["median_seconds"] for r in theirs
                )
        acceptance = {}
        for language in dict.fromkeys(r["clip_language"] for r in mine):
            of = [r for r in mine if r["clip_language"] == language]
            drafted = sum(r["drafted"] for r in of)
            acceptance[language] = sum(r["accepted"] for r in of) / drafted if drafted else None
        alone = {r["clip"]: r for r in rows if r["configuration"] == TARGET_ALONE}
        decode_alone = sum(alone[r["clip"]]["decode_seconds"] for r in short_english)
        decode_mine = sum(r["decode_seconds"] for r in short_english)
        costs = {
            kind: drafting_costs([r for r in mine if r["long_form"] == long_form], alone)
            for kind, long_form in (("short", False), ("long_form", True))
        }
        # where the draft did not run, the request is the target alone's: 1.0
        chosen = {"short": short_english, "long_form": list(long.values())}
        ceilings = {
            kind: [
                request_ceiling(alone[r["clip"]], costs[kind]["decode_ceiling"]) if r["drafted"] else 1.0
                for r in chosen[kind]
            ]
            for kind in costs
            if costs[kind]
        }
        found[draft] = {
            "short_english_median_ratio": median_or_none(english),
            # the decode phase alone, summed over the short English clips (the warm decode-only figure)
            "short_english_decode_ratio": decode_alone / decode_mine if decode_mine else None,
            "non_english_min_ratio": min(other) if other else None,
            "long_form_ratio": median_or_none([r["ratio"] for r in long.values()]),
            "long_form_vs_faster_whisper": against,
            "acceptance_by_language": acceptance,
            "drafting_costs": {kind: figures for kind, figures in costs.items() if figures},
            # whole requests with every token accepted, at these costs (the short clips' pooled over every
            # language drafted): the median over the short English clips and over the long-form ones
            # (`request_ceiling`); None where no clip of that length was drafted
            "ceiling_ratio": {
                "short_english": median_or_none(ceilings.get("short")),
                "long_form": median_or_none(ceilings.get("long_form")),
            },
        }
    return found


def free_decode_bound(rows: list[dict]) -> dict[str, float | None]:
    """What no draft can pass, whatever it costs and however often it is right: whole requests with a decode
    taking no time (audio, features and encoder as the target alone's), the median over the short clips
    heard as English and over the long-form ones; None where there were none."""
    alone = [r for r in rows if r["configuration"] == TARGET_ALONE]
    short = [request_ceiling(r, math.inf) for r in alone if r["clip_language"] == "en" and not r["long_form"]]
    long = [request_ceiling(r, math.inf) for r in alone if r["long_form"]]
    return {"short_english": median_or_none(short), "long_form": median_or_none(long)}


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def request_ceiling(alone: dict, decode_ceiling: float) -> float:
    """How many times faster than the target alone a whole request could be with every drafted token
    accepted: its audio, features and encoder as they are (the same both ways), its decode `decode_ceiling`
    times as fast; alone: the target alone's row for the clip."""
    total, decode = alone["median_seconds"], alone["decode_seconds"]
    return total / (total - decode + decode / decode_ceiling)


def drafting_costs(mine: list[dict], alone: dict[str, dict]) -> dict | None:
    """What a drafted token costs, in passes of the target alone (its verify seconds per pass on the same
    clips), over the clips where the draft ran: `draft`, the draft's seconds per drafted token; `verify`,
    what each drafted token adds to a verify pass. A token drafted alone pays when it is accepted more
    often than draft + verify (`break_even_acceptance`); with every token accepted, k tokens a pass decode
    at most (k + 1) / (1 + k (draft + verify)) times as fast as the target alone (`decode_ceiling`, k =
    DecodeOptions' max_draft_tokens): the bound on decode speed-up that no acceptance can pass."""
    drafted = [r for r in mine if r["drafted"]]
    if not drafted:
        return None
    theirs = [alone[r["clip"]] for r in drafted]
    pass_alone = sum(r["verify_seconds"] for r in theirs) / sum(r["target_passes"] for r in theirs)
    tokens, passes = sum(r["drafted"] for r in drafted), sum(r["target_passes"] for r in drafted)
    draft = sum(r["draft_seconds"] for r in drafted) / tokens / pass_alone
    verify_pass = sum(r["verify_seconds"] for r in drafted) / passes
    verify = (verify_pass - pass_alone) / (tokens / passes) / pass_alone
    k = DecodeOptions().max_draft_tokens
    return {
        "target_pass_seconds": pass_alone, "draft": draft, "verify": verify,
        "break_even_acceptance": draft + verify,
        "decode_ceiling": (k + 1) / (1 + k * (draft + verify)),
    }  # fmt: skip


def table(rows: list[dict], configs: list[Config]) -> str:
    """Clips down, configurations across: median seconds and ratio to the target alone."""
    names = [config.name for config in configs]
    lines = [
        f"| clip | lang | audio s | {' | '.join(names)} | speculative = target alone |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for clip in dict.fromkeys(row["clip"] for row in rows):
        mine = {row["configuration"]: row for row in rows if row["clip"] == clip}
        first = mine[TARGET_ALONE]
        cells = []
        for name in names:
            row = mine[name]
            ratio = "" if name == TARGET_ALONE else f" {row['ratio']:.2f}x"
            alpha = "" if row["acceptance_rate"] is None else f" α {row['acceptance_rate']:.2f}"
            alpha = " no drafts" if row["draft"] and row["drafted"] == 0 else alpha
            other = "" if row["same_text"] else " *"
            cells.append(f"{row['median_seconds']:.2f} s{ratio}{alpha}{other}")
        differ = [name for name, row in mine.items() if row["identical"] is False]
        verdict = "NO: " + ", ".join(differ) if differ else "yes"
        long = " (long)" if first["long_form"] else ""
        lines.append(
            f"| {clip}{long} | {first['clip_language']} | {first['audio_seconds']:.1f} | {' | '.join(cells)} "
            f"| {verdict} |"
        )
    notes = "* text other than the target alone's; α: acceptance rate; no drafts: the draft did not run"
    return "\n".join(lines) + f"\n({notes})"


def _times(value: float | None) -> str:
    """A ratio as the summary prints it ("-": none)."""
    return "-" if value is None else f"{value:.2f}x"


def free_decode_line(bound: dict[str, float | None]) -> str:
    """`free_decode_bound`'s figures, as the summary prints them."""
    return (
        f"any draft, even a free one always right: a whole request at most short English median "
        f"{_times(bound['short_english'])} / long-form {_times(bound['long_form'])} (a decode taking no "
        "time; the encoder as it is)"
    )


def summary_lines(found: dict[str, dict]) -> list[str]:
    lines = []
    for draft, figures in found.items():
        against = ", ".join(f"{t} {_times(v)}" for t, v in figures["long_form_vs_faster_whisper"].items())
        acceptance = ", ".join(
            f"{language} {'(no drafts)' if rate is None else f'{rate:.2f}'}"
            for language, rate in figures["acceptance_by_language"].items()
        )
        lines.append(
            f"{draft}: short English median {_times(figures['short_english_median_ratio'])} (decode only "
            f"{_times(figures['short_english_decode_ratio'])}), non-English min "
            f"{_times(figures['non_english_min_ratio'])}, long-form {_times(figures['long_form_ratio'])}"
            f"{f' (faster-whisper s / ours: {against})' if against else ''}; acceptance {acceptance}"
        )
        ceiling = figures["ceiling_ratio"]
        if ceiling["short_english"] or ceiling["long_form"]:
            lines.append(
                f"  with every token accepted, at the costs below, a whole request would be at most: short "
                f"English median {_times(ceiling['short_english'])}, long-form {_times(ceiling['long_form'])}"
            )
        for kind, costs in figures["drafting_costs"].items():
            lines.append(
                f"  {kind.replace('_', '-')} clips: a drafted token costs {costs['draft']:.2f} (draft) + "
                f"{costs['verify']:.2f} (verify) of a target pass ({1e3 * costs['target_pass_seconds']:.1f} "
                f"ms): pays above acceptance {costs['break_even_acceptance']:.2f}; decode at most "
                f"{_times(costs['decode_ceiling'])} with every token accepted"
            )
    return lines


def figure(rows: list[dict], configs: list[Config], title: str) -> plots.go.Figure:
    """Ratio to the target alone per clip: a bar per draft, faster-whisper as markers, a line at 1.0."""
    traces = []
    for colour, config in zip(plots.COLOURS, [c for c in configs if c.name != TARGET_ALONE], strict=False):
        mine = [row for row in rows if row["configuration"] == config.name]
        x, y = [row["clip"] for row in mine], [row["ratio"] for row in mine]
        traces.append(
            plots.bar(x, y, f"speculative, draft {config.draft}", marker={"color": colour}) if config.draft
            else plots.scatter(x, y, config.name, mode="markers", marker={"size": 11})
        )  # fmt: skip
    axes = [{"y": {"title_text": "x the target alone, end to end (median)"}}]
    return plots.figure(title, {"": traces}, axes, one_line=[1], barmode="group")


def describe(model) -> str:
    """What a configuration runs: the pair's names and sources, or faster-whisper's model."""
    if not isinstance(model, SpeculativeWhisper):
        return f"faster-whisper {type(model).__name__}"
    target, draft = model.pair.target, model.pair.draft
    found = f"{target.name} ({target.source})"
    return found if draft is None else f"{found} <- {draft.name} ({draft.source})"


def run_and_report(options: E2eBenchOptions, out: Path, command: str) -> dict:
    """Run the benchmark, print the table and the summary, write the JSON (and the HTML beside it)."""
    record = Record(command, options)
    log = record.log
    harness.quiet_transformers()
    chosen = clips(options)
    models, configs = load_models(options)
    note = "faster-whisper: left out (its weights are the bundled base's)"
    with tempfile.TemporaryDirectory() as folder:
        warm_up = warm_up_clip(chosen, Path(folder))
        calls = measure(configs, models, chosen, options.repeats, warm_up, log)
        if options.target == "base":
            wanted, threads = options.faster_whisper, torch.get_num_threads()
            fw_configs, fw_calls, note = harness.in_child(
                measure_faster_whisper, wanted, chosen, warm_up, options.repeats, threads
            )
            configs, calls = configs + fw_configs, {**calls, **fw_calls}
            log(f"{note}: timed in a child process")
    rows = rows_of(configs, chosen, calls)
    found = summary(rows, [config.draft for config in configs if config.draft])
    print(f"\n{torch.get_num_threads()} threads, {options.repeats} rounds, medians\n")
    print(table(rows, configs), "\n")
    print("\n".join(summary_lines(found)))
    bound = free_decode_bound(rows)
    print(free_decode_line(bound))
    differ = [f"{row['clip']} {row['configuration']}" for row in rows if row["identical"] is False]
    record.verdict(differ, "every speculative output equals the target alone's")
    record.update(
        models={name: describe(model) for name, model in models.items()},  # ours; faster-whisper: note
        faster_whisper=note, rows=rows, summary=found,
        free_decode_bound=bound,  # read off the target alone's rows: one for every draft
    )  # fmt: skip
    title = f"end to end, per clip, x the target alone ({options.target}): {command}"
    record.write(record_path(out, "e2e.json"), lambda: [figure(rows, configs, title)], title)
    return record
