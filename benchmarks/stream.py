"""`python -m benchmarks stream`: live transcription timed as a user meets it, and checked update by update.

`--size small`: the demo models, per draft with hypothesis reuse and the draft alone, and the target alone,
every chunk decoded. `--size real`: the bundled whisper-base, the CPU default at its pace and beside it,
on real streams, each against `transcribe` (WER) and per minute. Every decoded update is checked against
the target alone on its buffer with its prompt. docs/benchmarks.md gives the method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal
from benchmarks.runners import Models
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.streaming.playback import stream_audio, summarise
from specdec.streaming.session import StreamOptions, Update
from specdec.wer import word_errors

GOAL_PASS_RATIO = 2.0  # draft only / with reuse, target passes per decoded update
GOAL_SCRIPT_GAP = 0.02  # real: WER against the words spoken, past transcribe's on the same audio
REAL_GOALS = [  # real, the CPU default on each stream: its row's key, the goal, how it compares, threshold
    ("real_time_factor", "real-time factor", "<", 0.5),
    ("median_latency_seconds", "median update latency (s)", "<", 1.0),
    ("p95_latency_seconds", "p95 update latency (s)", "<", 2.0),  # in the last minute too
    ("wer", "WER of the committed text against transcribe", "<", 0.05),  # on the same audio
    ("median_commit_lag_seconds", "median commit lag (s)", "<=", 3.0),  # from a word's end to its commit
    ("p95_commit_lag_seconds", "p95 commit lag (s)", "<=", 6.0),
]
REAL_STREAMS = {  # real: name -> clips played back to back (None: the English short clips)
    "English clips": None,
    "a minute": ("long/en-six-parts.flac",),
    "a 5-minute talk": ("long/en-talk.ogg",),  # left out with --quick
}
PACE = StreamOptions().max_load  # the default: decoding at most this share of real time
DEFAULT = "self + reuse"  # the CPU default as `specdec stream` runs it
Config = tuple[str | None, bool, float | None]  # the draft (None: the target alone), reuse, pace
REAL_CONFIGS: dict[str, Config] = {  # the CPU default at its pace and every chunk, tiny.en, the target alone
    DEFAULT: ("self", True, PACE),
    "self + reuse, every chunk": ("self", True, None),
    "tiny.en + reuse": ("tiny.en", True, PACE),
    "target alone": (None, False, PACE),
}


@dataclass(frozen=True)
class StreamBenchOptions:
    size: str = "small"  # "real": the bundled whisper-base <- whisper-tiny.en; "small": the demo models
    chunk_seconds: float = 1.0  # audio per update
    quick: bool = False  # small: the first clip only; real: without the five-minute talk
    audio: tuple[str, ...] = ()  # more clips: appended to the stream (small), a stream each (real)
    rounds: int = 1  # times each configuration streams the whole audio
    check: bool = True  # every decoded update against the target alone on its buffer
    seed: int = 0  # model weights
    cache_dir: Path = DEFAULT_CACHE


def stream_configs(drafts: list[str]) -> dict[str, Config]:
    """The demo models, every chunk decoded: per draft with reuse and draft only; then the target alone."""
    found = {f"{d} {way}": (d, way == "+ reuse", None) for d in drafts for way in ("+ reuse", "only")}
    return found | {"target alone": (None, False, None)}


def load_whispers(options: StreamBenchOptions) -> dict[str, SpeculativeWhisper]:
    """One SpeculativeWhisper per draft of the preset, all on one target (CPU, float32)."""
    harness.quiet_transformers()
    if options.size == "real":  # each as a user loads it: the CPU default, and tiny.en named
        tiny = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")
        return {"self": SpeculativeWhisper(device="cpu"), "tiny.en": tiny}
    if options.size != "small":
        raise ValueError(
            "the stream benchmark runs with --size small or real: the large-v3-size random models "
            "never end a transcript, so every update would decode to the token limit"
        )
    models = Models(options.size, options.seed, options.cache_dir, log=lambda _: None, assistants=False)
    return {name: SpeculativeWhisper.from_pair(pair) for name, pair in models.pairs.items()}


def streams(options: StreamBenchOptions) -> dict[str, list[Path]]:
    """Stream name -> its clips, played back to back: small, assets/*.wav and --audio; real, REAL_STREAMS
    and a stream per --audio file."""
    audio = [Path(path) for path in options.audio]
    if options.size != "real":
        return {"stream": [*sorted(ASSETS.glob("*.wav"))[: 1 if options.quick else None], *audio]}
    english = sorted([*ASSETS.glob("en-*.wav"), *ASSETS.glob("en-*.flac")])
    found = {name: [ASSETS / c for c in clips] if clips else english for name, clips in REAL_STREAMS.items()}
    if options.quick:
        del found["a 5-minute talk"]
    return found | {path.stem: [path] for path in audio}


def measure(whispers: dict[str, SpeculativeWhisper], waveform: np.ndarray, chunk_seconds: float,
            rounds: int = 1, log: Callable[[str], None] = print, configs: dict[str, Config] | None = None,
            check: bool = True) -> list[dict]:  # fmt: skip
    """Every configuration streams `waveform` `rounds` times; one row of figures per configuration."""
    configs = configs or stream_configs(list(whispers))
    any_whisper = next(iter(whispers.values()))  # the target alone: any pair, its draft unused
    for whisper in whispers.values():
        whisper.warm_up()
    options = {
        name: StreamOptions(chunk_seconds=chunk_seconds, language=LANGUAGE, reuse_hypothesis=reuse,
                            use_draft=draft is not None, max_load=max_load)
        for name, (draft, reuse, max_load) in configs.items()
    }  # fmt: skip

    def play(name: str, _: object) -> list[Update]:  # the whole stream, within its round
        return list(stream_audio(whispers.get(configs[name][0], any_whisper), waveform, options[name]))

    found, references, rows = harness.rounds(list(configs), play, rounds, log=log), {}, []
    for name, (draft, reuse, max_load) in configs.items():
        updates = [update for streamed in found[(name, None)] for update in streamed]
        mismatched, sampled = mismatches(any_whisper, waveform, updates, references, options[name], check)
        rows.append({
            "config": name, "draft": draft, "reuse": reuse, "max_load": max_load,
            **summarise(updates, rounds * len(waveform) / SAMPLE_RATE).to_dict(),
            "by_minute": by_minute(updates), "checked": check, "identical": not mismatched,
            "mismatched_updates": mismatched, "sampled_updates": sampled,
            "final_text": updates[-1].committed_text,
        })  # fmt: skip
    if check:
        log(f"checked against the target alone: {len(references)} distinct buffers")
    return rows


def by_minute(updates: list[Update]) -> list[dict]:
    """Per minute of stream time (rounds pooled): decoded updates, median and p95 latency, RTF."""
    minutes: dict[int, list[Update]] = {}
    for update in (update for update in updates if update.chunk_seconds or update.decoded):
        minutes.setdefault(int(max(update.stream_seconds - 1e-9, 0) // 60) + 1, []).append(update)
    keys = ("decoded_updates", "median_latency_seconds", "p95_latency_seconds", "real_time_factor")
    found = {m: summarise(ups, sum(u.chunk_seconds for u in ups)).to_dict() for m, ups in minutes.items()}
    return [{"minute": minute, **{key: found[minute][key] for key in keys}} for minute in sorted(found)]


def mismatches(whisper: SpeculativeWhisper, waveform: np.ndarray, updates: list[Update], memo: dict,
               options: StreamOptions, check: bool = True) -> tuple[list[int], list[int]]:  # fmt: skip
    """(decoded updates whose hypothesis differs from the target alone on their buffer with the stream's
    decoding options, those the temperature fallback sampled: the target's in distribution, not token for
    token, so not compared), by index; none unless `check`."""
    mismatched, sampled = [], []
    for update in (update for update in updates if update.decoded and check):
        if update.result.sampled:
            sampled.append(update.index)
            continue
        start, end = (
            round(s * SAMPLE_RATE) for s in (update.buffer_start_seconds, update.buffer_end_seconds)
        )
        key = (start, end, update.prompt_ids, update.language)
        if key not in memo:  # buffers repeat across configurations
            alone = replace(options.decode_options(update.language, update.prompt_ids), speculative=False)
            memo[key] = whisper.transcribe_waveforms([waveform[start:end]], alone)[0].token_ids
        if update.hypothesis != memo[key]:
            mismatched.append(update.index)
    return mismatched, sampled


def goals(rows: list[dict], drafts: list[str], chunk_seconds: float) -> list[dict]:
    """The demo models, per draft: >= 2x fewer passes per update with reuse; median latency < chunk."""
    by_name, found = {row["config"]: row for row in rows}, []
    for draft in drafts:
        reuse, alone = by_name[f"{draft} + reuse"], by_name[f"{draft} only"]
        fewer = harness.ratio(alone["passes_per_update"], reuse["passes_per_update"])
        latency = reuse["median_latency_seconds"]
        found += [
            goal(f"passes per update, {draft}: draft only / with reuse", fewer, ">=", GOAL_PASS_RATIO),
            goal(f"median update latency (s), {draft} + reuse", latency, "<", chunk_seconds),
        ]
    return found


def real_goals(name: str, rows: list[dict]) -> list[dict]:
    """The CPU default on a stream: REAL_GOALS, its WER against the script past transcribe's, and the p95
    latency in its last minute (flat over a long talk)."""
    row = next(row for row in rows if row["config"] == DEFAULT)
    found = [goal(f"{name}: {label}", row[key], *rule) for key, label, *rule in REAL_GOALS]
    if row.get("script_wer") is not None:
        gap = row["script_wer"] - row["transcribe_script_wer"]
        found.append(
            goal(f"{name}: WER against the words spoken, past transcribe's", gap, "<=", GOAL_SCRIPT_GAP)
        )
    if len(row["by_minute"]) > 1:
        last = row["by_minute"][-1]["p95_latency_seconds"]
        found.append(goal(f"{name}: p95 update latency in its last minute (s)", last, *REAL_GOALS[2][2:]))
    return found


def _acceptance(row: dict) -> str:
    found = [f"{source} {row['acceptance'].get(source, 0.0):.2f} ({counts['accepted']}/{counts['drafted']})"
             for source, counts in sorted(row["proposals"].items(), reverse=True)]  # fmt: skip
    return "  " + (", ".join(found) or "-")


def _same(row: dict) -> str:
    if not row.get("checked", True):
        return "  not checked"
    same = "  yes" if row["identical"] else f"  NO: updates {row['mismatched_updates']}"
    return same + (f" ({len(row['sampled_updates'])} sampled)" if row.get("sampled_updates") else "")


COLUMNS = [
    ("configuration", "config", "<26"), ("decoded", "decoded_updates", ">8"),
    ("passes/upd", "passes_per_update", ">11.1f"), ("median s", "median_latency_seconds", ">9.2f"),
    ("p95 s", "p95_latency_seconds", ">7.2f"), ("lag s", "median_commit_lag_seconds", ">6.1f"),
    ("RTF", "real_time_factor", ">6.2f"), ("WER", "wer", ">6.3f"),
    ("  acceptance by source (accepted/drafted)", _acceptance, "<48"), ("  same", _same, ""),
]  # fmt: skip
MINUTE_COLUMNS = [("minute", "minute", ">7"), COLUMNS[1], *COLUMNS[3:5], COLUMNS[6]]


def table(rows: list[dict]) -> str:
    return harness.table(rows, COLUMNS)


def against_transcribe(whisper: SpeculativeWhisper, waveform: np.ndarray, paths: list[Path],
                       rows: list[dict]) -> None:  # fmt: skip
    """Each row's text against `transcribe`'s; both against what was read where every clip has its .txt."""
    whole = whisper.transcribe(waveform, sample_rate=SAMPLE_RATE, language=LANGUAGE)[0]
    scripts = [path.with_suffix(".txt") for path in paths]
    script = " ".join(p.read_text() for p in scripts) if all(p.exists() for p in scripts) else None
    for row in rows:
        errors = word_errors(whole, row["final_text"])
        row["wer"], row["deleted_words"] = errors.wer, errors.deletions
        if script is not None:
            row["script_wer"] = word_errors(script, row["final_text"]).wer
            row["transcribe_script_wer"] = word_errors(script, whole).wer


def run_and_report(options: StreamBenchOptions, out_dir: Path, command: str) -> dict:
    """Each stream through every configuration (real: against `transcribe`): tables, goals, stream.json."""
    record, whispers, real = Record(command, options), load_whispers(options), options.size == "real"
    rows_by_stream, streamed, found, chunk = {}, {}, [], options.chunk_seconds
    for name, paths in streams(options).items():
        waveform = np.concatenate([load_audio(path, max_seconds=None) for path in paths])
        streamed[name] = {"clips": [path.stem for path in paths], "seconds": len(waveform) / SAMPLE_RATE}
        seconds = streamed[name]["seconds"]
        print(f"\n{name}: {', '.join(streamed[name]['clips'])} ({seconds:.1f} s), {chunk:g} s chunks")
        configs = REAL_CONFIGS if real else None
        rows = measure(whispers, waveform, chunk, options.rounds, configs=configs, check=options.check)
        if real:
            against_transcribe(whispers["self"], waveform, paths, rows)
        found += real_goals(name, rows) if real else goals(rows, list(whispers), chunk)
        print(table(rows))
        rows_by_stream[name], default = rows, next((row for row in rows if row["config"] == DEFAULT), {})
        if "script_wer" in default:
            print(
                f"WER against what was read: transcribe {default['transcribe_script_wer']:.3f}, {DEFAULT} "
                f"{default['script_wer']:.3f} (words it left out of transcribe's: {default['deleted_words']})"
            )
        if default and seconds > 120:
            print(f"\n{DEFAULT}, minute by minute:\n{harness.table(default['by_minute'], MINUTE_COLUMNS)}")
    print()
    mismatched = [row["config"] for rows in rows_by_stream.values() for row in rows if not row["identical"]]
    same = "every decoded update of every configuration equals the target alone on its buffer"
    record.verdict(mismatched, same if options.check else "updates not checked", found)
    models = {"target": next(iter(whispers.values())).pair.target.name}
    models |= {name: whisper.pair.draft.name for name, whisper in whispers.items()}
    record.update(language=LANGUAGE, streams=streamed, models=models, rows=rows_by_stream)
    record.write(out_dir / "stream.json")
    return record
