"""`python -m benchmarks e2e`: one request as a user sends it, end to end, per clip.

A file's path in, its transcript out, every option at its default: the target alone, each draft of
`drafts`, faster-whisper float32 and int8 (in a child process), in rotated rounds after an untimed warm-up.
Each speculative output is checked token for token against the target alone's, which on the short clips is
checked against generate()'s; each text's WER against `CLIP.txt`. docs/benchmarks.md gives the method.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import soundfile
import torch

from benchmarks import harness, plots
from benchmarks.harness import ASSETS, Record, audio_paths, median, record_path
from benchmarks.runners import faster_whisper_models, faster_whisper_transcribe, generate_waveform
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.longform import is_long
from specdec.options import DecodeOptions
from specdec.wer import word_errors
from specdec.whisper.models import PairError

LONG_CLIPS = (ASSETS / "long" / "en-six-parts.flac",)
TARGET_ALONE = "target alone"
COMPUTE_TYPES = ("float32", "int8")  # faster-whisper's
WARM_UP_SAMPLES = 5 * SAMPLE_RATE  # taken from each of the first two clips for the warm-up clip
# untimed pause before each call: threads left spinning by the call before sleep, sparing its cores
SETTLE_SECONDS = 0.3


@dataclass(frozen=True)
class E2eBenchOptions:
    OUT: ClassVar[str] = "docs/bench-e2e-base.json"  # where --out points unless told
    drafts: str = "self,tiny.en"  # comma-separated drafts: "tiny.en", "self" (shipped self-draft), a folder
    clips: str = ""  # only these clips, comma-separated names (en-jfk) or paths; empty: all of them
    extra: str = ""  # more audio files or folders, comma-separated (audio the drafts were never trained on)
    # 5, not 3: the never-slower goal is judged within a percent, closer than fewer rounds agree
    repeats: int = 5  # rounds: every configuration decodes every clip once per round, order rotated
    target: str = "base"  # the target; faster-whisper runs only beside the bundled base
    faster_whisper: bool = True  # time faster-whisper float32 and int8 too when it is installed
    # ours in each of these compute types (comma-separated; `SpeculativeWhisper(compute_type=)`): the first
    # is the reference every ratio is to; each speculative output is checked against its own type's
    compute_types: str = "default"


@dataclass(frozen=True)
class Config:
    name: str
    draft: str | None = None  # specdec speculative: the draft's name
    compute_type: str = "default"  # ours: `SpeculativeWhisper(compute_type=)`; faster-whisper: its own
    faster_whisper: bool = False


@dataclass(frozen=True)
class Clip:
    path: Path
    name: str  # the stem; outside the assets with its folder's (two folders of --extra may hold a 00000)
    seconds: float  # of audio
    long: bool  # over 30 s: decoded long-form, with timestamps


def split(names: str) -> list[str]:
    return [name.strip() for name in names.split(",") if name.strip()]


def clips(options: E2eBenchOptions) -> list[Clip]:
    """The assets, the long clip and --extra, or the --clips (names or paths); a folder: its audio files."""
    extra = audio_paths([Path(name) for name in split(options.extra)])
    found = [*sorted([*ASSETS.glob("*.wav"), *ASSETS.glob("*.flac")]), *LONG_CLIPS, *extra]
    if options.clips:
        by_name = {key: path for path in found for key in (path.stem, path.name, str(path))}
        found = audio_paths([by_name.get(name, Path(name)) for name in split(options.clips)])
    if missing := [str(path) for path in found if not path.is_file()]:
        choices = ", ".join(path.stem for path in [*sorted(ASSETS.glob("*.*")), *LONG_CLIPS])
        raise SystemExit(f"e2e: no audio file {', '.join(missing)} (clip names: {choices})")
    return [Clip(path, path.stem if path.resolve().parent in (ASSETS, ASSETS / "long") else
                 f"{path.parent.name}/{path.stem}", len(audio) / SAMPLE_RATE, is_long(audio))
            for path in found for audio in [load_audio(path, max_seconds=None)]]  # fmt: skip


def load_models(options: E2eBenchOptions) -> dict[Config, SpeculativeWhisper]:
    """Each configuration of ours (per compute type: the target alone, then each draft) and its
    SpeculativeWhisper; a compute type after the first names its own ("draft self bfloat16")."""
    models, types = {}, split(options.compute_types)
    for compute_type in types:
        suffix = "" if compute_type == types[0] else f" {compute_type}"
        loaded = {TARGET_ALONE + suffix: None, **{f"draft {d}{suffix}": d for d in split(options.drafts)}}
        for name, draft in loaded.items():
            try:
                whisper = SpeculativeWhisper(draft, options.target, device="cpu", compute_type=compute_type)
            except PairError as error:
                message = f"e2e: the draft {draft!r} cannot draft for {options.target}: {error}"
                raise SystemExit(message) from None
            models[Config(name, draft, compute_type)] = whisper
    return models


def alone_of(config: Config, configs: list[Config]) -> Config:
    """The target alone in the configuration's compute type (faster-whisper's: ours first)."""
    if config.faster_whisper:
        return configs[0]
    return next(
        c
        for c in configs
        if c.draft is None and not c.faster_whisper and c.compute_type == config.compute_type
    )


def measure_faster_whisper(wanted: bool, clips: list[Clip], warm_up: Path, repeats: int, threads: int):
    """faster-whisper timed as `measure` times ours, in a child process: its configs, calls and a note."""
    torch.set_num_threads(threads)
    fw_models, note = faster_whisper_models(wanted)
    models = {Config(f"faster-whisper {kind}", None, kind, True): model for kind, model in fw_models.items()}
    return list(models), measure(models, clips, repeats, warm_up, lambda _: None) if models else {}, note


def measure(models: dict, clips: list[Clip], repeats: int, warm_up: Path, log) -> dict:
    """(config, clip) -> a call a round (seconds, language, text; ours: ids, stats), after a warm-up call."""

    def call(config: Config, path: Path, long: bool) -> dict:  # the file's path in, its transcript out
        model, speculative = models[config], config.draft is not None
        if config.faster_whisper:
            found, seconds = harness.timed(lambda: faster_whisper_transcribe(model, str(path), long=long))
            return {"seconds": seconds, "text": found[0], "language": found[1], "token_ids": None}
        (found,), seconds = harness.timed(lambda: model.transcribe(str(path), return_stats=True,
                                                                   speculative=speculative))  # fmt: skip
        return {"seconds": seconds, "language": found.language, "text": found.text,
                "token_ids": found.token_ids, **found.result.stats()}  # fmt: skip

    return harness.rounds(list(models), lambda config, clip: call(config, clip.path, clip.long), repeats,
                          clips, warm_up=lambda config: call(config, warm_up, False), settle=SETTLE_SECONDS,
                          log=log)  # fmt: skip


def rows_of(configs: list[Config], clips: list[Clip], calls: dict, models: dict) -> list[dict]:
    """One row per (clip, configuration): medians, ratios to the target alone (the first compute type's,
    and its own type's), acceptance, WER, identity with its type's target alone and, on the short clips,
    with generate()'s on that model (called once, untimed; faster-whisper's text only: its ids differ)."""
    rows = []
    for clip in clips:
        first, reference = calls[(configs[0], clip)], clip.path.with_suffix(".txt")
        waveform = None if clip.long else load_audio(clip.path, max_seconds=None)
        targets = [c for c in configs if c.draft is None and not c.faster_whisper]
        generated = {} if clip.long else {c: generate_waveform(models[c], waveform, None)[0] for c in targets}
        for config in configs:
            mine, ours, own = calls[(config, clip)], not config.faster_whisper, alone_of(config, configs)
            alone, seconds = calls[(own, clip)], median(c["seconds"] for c in mine)
            rows.append({
                "clip": clip.name, "path": str(clip.path), "language": mine[0]["language"],
                "clip_language": first[0]["language"],  # the target's detection
                "audio_seconds": round(clip.seconds, 2), "long_form": clip.long, "configuration": config.name,
                "kind": "specdec" if ours else "faster-whisper", "draft": config.draft,
                "compute_type": config.compute_type, "median_seconds": seconds,
                "all_seconds": [c["seconds"] for c in mine],
                "ratio": median(c["seconds"] for c in first) / seconds,
                "ratio_own_type": median(c["seconds"] for c in alone) / seconds,
                # the decode phase alone (encoders excluded), the draft's and the verify passes' shares
                **{key: median(c[key] for c in mine) if ours else None
                   for key in ("decode_seconds", "draft_seconds", "verify_seconds")},
                "acceptance_rate": mine[0].get("acceptance_rate"), "accepted": mine[0].get("num_accepted"),
                "drafted": mine[0].get("num_drafted"), "target_passes": mine[0].get("num_target_passes"),
                "tokens_per_pass": mine[0].get("tokens_per_pass"),
                "identical": all(c["token_ids"] == alone[0]["token_ids"] for c in mine) if ours else None,
                "same_as_generate": all(c["token_ids"] == generated[own] for c in mine)
                if ours and generated else None,
                "same_text": all(c["text"] == first[0]["text"] for c in mine), "text": mine[0]["text"],
                "wer": word_errors(reference.read_text(encoding="utf-8"), mine[0]["text"],
                                   first[0]["language"]).wer if reference.exists() else None,
            })  # fmt: skip
    return rows


def kinds(rows: list[dict]) -> dict[str, list[dict]]:
    """The rows the summary's medians are over: the short clips heard as English, the long-form ones."""
    return {"short_english": [r for r in rows if r["clip_language"] == "en" and not r["long_form"]],
            "long_form": [r for r in rows if r["long_form"]]}  # fmt: skip


def summary(rows: list[dict], configs: list[Config]) -> dict[str, dict]:
    """Per draft (and compute type after the first): `kinds`' ratios (to the first type's target alone and
    its own type's), the slowest other language, faster-whisper, acceptance, costs, ceilings."""
    found = {}
    for config in [c for c in configs if c.draft]:
        own = alone_of(config, configs).name
        alone = {r["clip"]: r for r in rows if r["configuration"] == own}
        mine = [r for r in rows if r["configuration"] == config.name]
        chosen = kinds(mine)
        short, long = chosen["short_english"], {r["clip"]: r for r in chosen["long_form"]}
        other = [r["ratio"] for r in mine if r["clip_language"] != "en"]
        theirs = {t: [r for r in rows if r["configuration"] == f"faster-whisper {t}" and r["long_form"]]
                  for t in COMPUTE_TYPES}  # fmt: skip
        languages = {r["clip_language"]: [o for o in mine if o["clip_language"] == r["clip_language"]]
                     for r in mine}  # fmt: skip
        costs = {kind: drafting_costs([r for r in mine if r["long_form"] == (kind == "long_form")], alone)
                 for kind in ("short", "long_form")}  # fmt: skip
        found[config.name.removeprefix("draft ")] = {
            "short_english_median_ratio": median([r["ratio"] for r in short]) if short else None,
            "short_english_own_type_ratio": median([r["ratio_own_type"] for r in short]) if short else None,
            # the decode phase alone, the target alone's over ours, summed over the short English clips
            "short_english_decode_ratio": harness.ratio(*(sum(r["decode_seconds"] for r in of) for of in
                                                          ([alone[r["clip"]] for r in short], short))),
            "non_english_min_ratio": min(other, default=None),
            "long_form_ratio": median([r["ratio"] for r in long.values()]) if long else None,
            "long_form_own_type_ratio": median(r["ratio_own_type"] for r in long.values()) if long else None,
            "long_form_vs_faster_whisper": {
                t: median(r["median_seconds"] / long[r["clip"]]["median_seconds"] for r in of)
                for t, of in theirs.items() if of and long},
            "acceptance_by_language": {
                language: harness.ratio(sum(r["accepted"] for r in of), sum(r["drafted"] for r in of))
                for language, of in languages.items()},
            "drafting_costs": {kind: figures for kind, figures in costs.items() if figures},
            # `kinds`' whole requests with every token accepted at these costs (`request_ceiling`); 1.0 where
            # the draft did not run (the target alone's request); None where none of the kind was drafted
            "ceiling_ratio": {
                kind: median([request_ceiling(alone[r["clip"]], costs[cost]["decode_ceiling"])
                              if r["drafted"] else 1.0 for r in of]) if costs[cost] and of else None
                for (kind, of), cost in zip(chosen.items(), ("short", "long_form"), strict=True)},
        }  # fmt: skip
    return found


def free_decode_bound(rows: list[dict]) -> dict[str, float | None]:
    """What no draft can pass: `kinds`' medians of the target alone's requests with no time decoding."""
    alone = kinds([r for r in rows if r["configuration"] == TARGET_ALONE])
    return {kind: median([request_ceiling(r, float("inf")) for r in of]) if of else None
            for kind, of in alone.items()}  # fmt: skip


def request_ceiling(alone: dict, decode_ceiling: float) -> float:
    """How many times faster than the target alone (alone: its row for the clip) a whole request could be
    with its audio, features and encoder as they are and its decode `decode_ceiling` times as fast."""
    total, decode = alone["median_seconds"], alone["decode_seconds"]
    return total / (total - decode + decode / decode_ceiling)


def drafting_costs(mine: list[dict], alone: dict[str, dict]) -> dict | None:
    """A drafted token's cost where the draft ran, in passes of the target alone: `draft`, the draft's
    seconds; `verify`, what it adds to a verify pass. It pays above acceptance draft + verify; all accepted,
    k = max_draft_tokens a pass decode at most (k + 1) / (1 + k (draft + verify)) times as fast."""
    if not (drafted := [r for r in mine if r["drafted"]]):
        return None
    theirs = [alone[r["clip"]] for r in drafted]
    pass_alone = sum(r["verify_seconds"] for r in theirs) / sum(r["target_passes"] for r in theirs)
    tokens, passes = sum(r["drafted"] for r in drafted), sum(r["target_passes"] for r in drafted)
    draft = sum(r["draft_seconds"] for r in drafted) / tokens / pass_alone
    verify_pass = sum(r["verify_seconds"] for r in drafted) / passes
    verify, k = (verify_pass - pass_alone) / (tokens / passes) / pass_alone, DecodeOptions().max_draft_tokens
    return {"target_pass_seconds": pass_alone, "draft": draft, "verify": verify, "break_even_acceptance":
            draft + verify, "decode_ceiling": (k + 1) / (1 + k * (draft + verify))}  # fmt: skip


def table(rows: list[dict], configs: list[Config]) -> str:
    """Clips down, configurations across (median seconds, ratio to the target alone, α); the target alone's
    WER and its identity with generate(), each speculative output's with the target alone's."""
    lines = []
    for clip in dict.fromkeys(row["clip"] for row in rows):
        mine = {row["configuration"]: row for row in rows if row["clip"] == clip}
        line = dict(mine[TARGET_ALONE], clip=clip + (" (long)" if mine[TARGET_ALONE]["long_form"] else ""))
        for name, row in mine.items():
            ratio = "" if name == TARGET_ALONE else f" {row['ratio']:.2f}x"
            alpha = "" if row["acceptance_rate"] is None else f" α {row['acceptance_rate']:.2f}"
            alpha = " no drafts" if row["draft"] and row["drafted"] == 0 else alpha
            line[name] = f"{row['median_seconds']:.2f} s{ratio}{alpha}{'' if row['same_text'] else ' *'}"
        differ = [name for name, row in mine.items() if row["identical"] is False]
        verdict, generate = f"NO: {', '.join(differ)}" if differ else "yes", line["same_as_generate"]
        lines.append(line | {"generate": {True: "yes", False: "NO"}.get(generate), "verdict": verdict})
    columns = [("clip", "clip", ""), ("lang", "clip_language", ""), ("audio s", "audio_seconds", ".1f"),
               *[(c.name, c.name, "") for c in configs], ("WER", "wer", ".1%"), ("target alone = generate()",
               "generate", ""), ("speculative = target alone", "verdict", "")]  # fmt: skip
    notes = "* text other than the target alone's; α: acceptance rate; no drafts: the draft did not run"
    return harness.table(lines, columns, markdown=True) + f"\n({notes})"


def flat(figures: dict, prefix: str = "") -> dict:
    """Nested figures on one level, their keys joined ("drafting_costs short draft")."""
    found = {}
    for key, value in figures.items():
        found |= flat(value, f"{prefix}{key} ") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return found


def summary_table(found: dict[str, dict], bound: dict[str, float | None]) -> str:
    """`summary`'s figures down (the free-decode bound last: the same for every draft), the drafts across."""
    figures = {draft: flat({**of, "free_decode_bound": bound}) for draft, of in found.items()}
    lines = [{"figure": key.replace("_", " "), **{draft: of.get(key) for draft, of in figures.items()}}
             for key in dict.fromkeys(key for of in figures.values() for key in of)]  # fmt: skip
    columns = [("per draft", "figure", "<"), *[(draft, draft, ".3g") for draft in found]]
    return harness.table(lines, columns, markdown=True)


def figure(rows: list[dict], configs: list[Config], title: str) -> plots.go.Figure:
    """Ratio to the target alone per clip, a bar per configuration, a line at 1.0."""
    mine = {c.name: [row for row in rows if row["configuration"] == c.name] for c in configs[1:]}
    traces = [plots.bar([r["clip"] for r in of], [r["ratio"] for r in of], name) for name, of in mine.items()]
    axes = [{"y": {"title_text": "x the target alone, end to end (median)"}}]
    return plots.figure(title, {"": traces}, axes, one_line=[1], barmode="group")


def run_and_report(options: E2eBenchOptions, out: Path, command: str) -> dict:
    """Run the benchmark, print the tables, write the JSON (and the HTML beside it)."""
    record = Record(command, options)
    harness.quiet_transformers()
    chosen, models = clips(options), load_models(options)
    configs, note = list(models), "faster-whisper: left out (its weights are the bundled base's)"
    with tempfile.TemporaryDirectory() as folder:
        parts = [load_audio(clip.path, max_seconds=None)[:WARM_UP_SAMPLES] for clip in chosen[:2]]
        soundfile.write(warm_up := Path(folder) / "warm-up.wav", np.concatenate(parts), SAMPLE_RATE)
        calls = measure(models, chosen, options.repeats, warm_up, record.log)
        if options.target == "base":
            found = harness.in_child(measure_faster_whisper, options.faster_whisper, chosen, warm_up,
                                     options.repeats, torch.get_num_threads())  # fmt: skip
            configs, calls, note = configs + found[0], {**calls, **found[1]}, found[2]
            record.log(f"{note}: timed in a child process")
    rows = rows_of(configs, chosen, calls, models)
    found, bound = summary(rows, configs), free_decode_bound(rows)
    print(f"\n{torch.get_num_threads()} threads, {options.repeats} rounds, medians\n", table(rows, configs),
          "", summary_table(found, bound), sep="\n")  # fmt: skip
    differ = [f"{row['clip']} {row['configuration']}" for row in rows
              if False in (row["identical"], row["same_as_generate"])]  # fmt: skip
    same = "every speculative output equals the target alone's, and on the short clips generate()'s"
    record.verdict(differ, same)
    record.update(
        models={c.name: " <- ".join(f"{m.name} ({m.source})" for m in (model.pair.target, model.pair.draft)
                                    if m is not None) for c, model in models.items()},
        faster_whisper=note, rows=rows, summary=found,
        free_decode_bound=bound,  # read off the target alone's rows: one for every draft
    )  # fmt: skip
    title = f"end to end, per clip, x the target alone ({options.target}): {command}"
    record.write(record_path(out, "e2e.json"), lambda: [figure(rows, configs, title)], title)
    return record
