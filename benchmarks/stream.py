"""`python -m benchmarks stream`: live transcription timed as a user meets it, and checked update by update.

`--size small`: the demo models, per draft with hypothesis reuse and the draft alone, and the target alone,
every chunk decoded. `--size real`: the bundled whisper-base, the CPU default at its pace and beside it,
on real streams, each against `transcribe` (WER) and per minute. Every decoded update is checked against
the target alone on its buffer with its prompt. docs/benchmarks.md gives the method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal
from benchmarks.runners import Models
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import TranscribeOptions
from specdec.streaming.playback import stream_audio, summarise
from specdec.streaming.session import StreamOptions, Update
from specdec.wer import word_errors

GOAL_PASS_RATIO = 2.0  # draft only / with reuse, target passes per decoded update
PACE = StreamOptions().max_load  # the default: decoding at most this share of real time
REAL_STREAMS = {  # --size real: name -> clips played back to back (None: the English short clips)
    "English clips": None,
    "a minute": ("long/en-six-parts.flac",),
    "a 5-minute talk": ("long/en-talk.ogg",),
}
DEFAULT = "self + reuse"  # the CPU default as `specdec stream` runs it
GOAL_REAL_TIME_FACTOR = 0.5
GOAL_MEDIAN_LATENCY = 1.0
GOAL_P95_LATENCY = 2.0
GOAL_WER = 0.05  # the committed text against `transcribe` on the same audio
GOAL_SCRIPT_GAP = 0.02  # its WER against the words spoken, past transcribe's on the same audio
GOAL_MEDIAN_COMMIT_LAG = 3.0  # seconds from a word's end to its text being committed
GOAL_P95_COMMIT_LAG = 6.0


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


@dataclass(frozen=True)
class StreamConfig:
    name: str
    draft: str | None  # draft name (a key of the loaded whispers); None: the target alone
    reuse: bool  # the previous hypothesis drafts first
    max_load: float | None = None  # the pace (None: every chunk decoded)

    def stream_options(self, chunk_seconds: float) -> StreamOptions:
        return StreamOptions(
            chunk_seconds=chunk_seconds, language=LANGUAGE, reuse_hypothesis=self.reuse,
            use_draft=self.draft is not None, max_load=self.max_load,
        )  # fmt: skip


def stream_configs(drafts: list[str]) -> list[StreamConfig]:
    """The demo models, every chunk decoded: per draft with reuse and draft only; then the target alone."""
    configs = [StreamConfig(f"{d} {way}", d, way == "+ reuse") for d in drafts for way in ("+ reuse", "only")]
    return [*configs, StreamConfig("target alone", None, False)]


def real_configs() -> list[StreamConfig]:
    """The CPU default at its pace and every chunk, tiny.en drafting, the target alone at the pace."""
    return [
        StreamConfig(DEFAULT, "self", True, PACE),
        StreamConfig("self + reuse, every chunk", "self", True, None),
        StreamConfig("tiny.en + reuse", "tiny.en", True, PACE),
        StreamConfig("target alone", None, False, PACE),
    ]


def load_whispers(options: StreamBenchOptions) -> dict[str, SpeculativeWhisper]:
    """One SpeculativeWhisper per draft of the preset, all on one target (CPU, float32)."""
    harness.quiet_transformers()
    if options.size == "real":  # each as a user loads it: the CPU default, and tiny.en named
        return {
            "self": SpeculativeWhisper(device="cpu"),
            "tiny.en": SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu"),
        }
    if options.size != "small":
        raise ValueError(
            "the stream benchmark runs with --size small or real: the large-v3-size random models never end "
            "a transcript (their end-of-text is silenced for the token benchmark), so every update would "
            "decode to the token limit"
        )
    models = Models(options.size, options.seed, options.cache_dir, log=lambda _: None, assistants=False)
    return {name: SpeculativeWhisper.from_pair(pair) for name, pair in models.pairs.items()}


def stream_clips(options: StreamBenchOptions) -> tuple[np.ndarray, list[str]]:
    """The small stream's waveform (16 kHz) and the names of its clips, in order."""
    paths = [*sorted(ASSETS.glob("*.wav"))[: 1 if options.quick else None], *map(Path, options.audio)]
    return np.concatenate([load_audio(path, max_seconds=None) for path in paths]), [p.stem for p in paths]


@dataclass(frozen=True)
class RealStream:
    waveform: np.ndarray  # 16 kHz
    script: str | None  # what was read (the clips' .txt files), where every clip has one


def real_streams(options: StreamBenchOptions) -> dict[str, RealStream]:
    """--size real: stream name -> its audio and script."""
    english = sorted([*ASSETS.glob("en-*.wav"), *ASSETS.glob("en-*.flac")])
    found = {}
    for name, clips in REAL_STREAMS.items():
        if not (options.quick and name == "a 5-minute talk"):
            found[name] = english if clips is None else [ASSETS / clip for clip in clips]
    found.update({path.stem: [path] for path in map(Path, options.audio)})
    streams = {}
    for name, paths in found.items():
        scripts = [path.with_suffix(".txt") for path in paths]
        script = " ".join(p.read_text() for p in scripts) if all(p.exists() for p in scripts) else None
        audio = np.concatenate([load_audio(path, max_seconds=None) for path in paths])
        streams[name] = RealStream(audio, script)
    return streams


def measure(
    whispers: dict[str, SpeculativeWhisper],
    waveform: np.ndarray,
    chunk_seconds: float,
    rounds: int = 1,
    log: Callable[[str], None] = print,
    configs: list[StreamConfig] | None = None,
    check: bool = True,
) -> list[dict]:
    """Every configuration streams `waveform` `rounds` times; one row of figures per configuration."""
    configs = configs or stream_configs(list(whispers))
    any_whisper = next(iter(whispers.values()))  # the target alone: any pair, its draft unused
    for whisper in whispers.values():
        whisper.warm_up()

    def stream(config: StreamConfig, _: object) -> list[Update]:
        whisper = whispers[config.draft] if config.draft else any_whisper
        return stream_audio(whisper, waveform, config.stream_options(chunk_seconds))

    found = harness.rounds(configs, stream, rounds, log=log)
    updates = {
        config.name: [u for round_updates in found[(config, None)] for u in round_updates]
        for config in configs
    }
    references: dict[tuple, tuple[int, ...]] = {}
    rows = []
    for config in configs:
        summary = summarise(updates[config.name], rounds * len(waveform) / SAMPLE_RATE)
        options = config.stream_options(chunk_seconds)
        mine = updates[config.name]
        mismatched, sampled = (
            target_alone_mismatches(any_whisper, waveform, mine, references, options) if check else ([], [])
        )
        rows.append({
            "config": config.name, "draft": config.draft, "reuse": config.reuse, "max_load": config.max_load,
            **summary.to_dict(), "by_minute": by_minute(updates[config.name]), "checked": check,
            "identical": not mismatched, "mismatched_updates": mismatched, "sampled_updates": sampled,
            "final_text": updates[config.name][-1].committed_text,
        })  # fmt: skip
    if check:
        log(f"checked against the target alone: {len(references)} distinct buffers")
    return rows


def by_minute(updates: list[Update]) -> list[dict]:
    """Per minute of stream time (rounds pooled): decoded updates, median and p95 latency, processing per
    second of audio."""
    minutes: dict[int, list[Update]] = {}
    for update in updates:
        if update.chunk_seconds or update.decoded:
            minutes.setdefault(int(max(update.stream_seconds - 1e-9, 0) // 60), []).append(update)
    rows = []
    for minute, found in sorted(minutes.items()):
        latencies = [update.latency_seconds for update in found if update.decoded]
        audio = sum(update.chunk_seconds for update in found)
        rows.append({
            "minute": minute + 1, "decoded_updates": len(latencies),
            "median_latency_seconds": float(np.median(latencies)) if latencies else 0.0,
            "p95_latency_seconds": float(np.percentile(latencies, 95)) if latencies else 0.0,
            "real_time_factor": sum(u.latency_seconds for u in found) / audio if audio else 0.0,
        })  # fmt: skip
    return rows


def target_alone_mismatches(
    whisper: SpeculativeWhisper,
    waveform: np.ndarray,
    updates: list[Update],
    memo: dict,
    options: StreamOptions,
) -> tuple[list[int], list[int]]:
    """(indices of decoded updates whose hypothesis differs from the target alone on their buffer with the
    stream's decoding options, indices of those the temperature fallback sampled: the target's in
    distribution, not token for token, so not compared)."""
    mismatched, sampled = [], []
    for update in updates:
        if not update.decoded:
            continue
        if update.result.sampled:
            sampled.append(update.index)
            continue
        start = round(update.buffer_start_seconds * SAMPLE_RATE)
        end = round(update.buffer_end_seconds * SAMPLE_RATE)
        key = (start, end, update.prompt_ids, update.language)
        if key not in memo:
            decode = options.decode_options(update.language, update.prompt_ids)
            (alone,) = whisper.transcribe_waveforms(
                [waveform[start:end]], TranscribeOptions.of(decode, speculative=False)
            )
            memo[key] = alone.token_ids
        if update.hypothesis != memo[key]:
            mismatched.append(update.index)
    return mismatched, sampled


def goals(rows: list[dict], drafts: list[str], chunk_seconds: float) -> list[dict]:
    """The demo models, per draft: >= 2x fewer passes per update with reuse; median latency < chunk."""
    by_name, found = {row["config"]: row for row in rows}, []
    for draft in drafts:
        reuse, alone = by_name[f"{draft} + reuse"], by_name[f"{draft} only"]
        fewer = harness.ratio(alone["passes_per_update"], reuse["passes_per_update"])
        found += [
            goal(f"passes per update, {draft}: draft only / with reuse", fewer, ">=", GOAL_PASS_RATIO),
            goal(
                f"median update latency (s), {draft} + reuse",
                reuse["median_latency_seconds"],
                "<",
                chunk_seconds,
            ),
        ]
    return found


REAL_GOALS = [  # the row's key, its goal's name, how it compares and its threshold
    ("real_time_factor", "real-time factor", "<", GOAL_REAL_TIME_FACTOR),
    ("median_latency_seconds", "median update latency (s)", "<", GOAL_MEDIAN_LATENCY),
    ("p95_latency_seconds", "p95 update latency (s)", "<", GOAL_P95_LATENCY),
    ("wer", "WER of the committed text against transcribe", "<", GOAL_WER),
    ("median_commit_lag_seconds", "median commit lag (s)", "<=", GOAL_MEDIAN_COMMIT_LAG),
    ("p95_commit_lag_seconds", "p95 commit lag (s)", "<=", GOAL_P95_COMMIT_LAG),
]


def real_goals(rows_by_stream: dict[str, list[dict]]) -> list[dict]:
    """The CPU default on each stream: real-time factor, median and p95 latency (in the last minute too:
    flat over a long talk), its committed text against `transcribe`."""
    found = []
    for name, rows in rows_by_stream.items():
        row = next(row for row in rows if row["config"] == DEFAULT)
        found += [
            goal(f"{name}: {label}", row[key], relation, value) for key, label, relation, value in REAL_GOALS
        ]
        if row.get("script_wer") is not None:
            gap = row["script_wer"] - row["transcribe_script_wer"]
            found.append(
                goal(f"{name}: WER against the words spoken, past transcribe's", gap, "<=", GOAL_SCRIPT_GAP)
            )
        if len(row["by_minute"]) > 1:
            last = row["by_minute"][-1]["p95_latency_seconds"]
            found.append(
                goal(f"{name}: p95 update latency in its last minute (s)", last, "<", GOAL_P95_LATENCY)
            )
    return found


def _acceptance(row: dict) -> str:
    return (
        ", ".join(
            f"{source} {row['acceptance'].get(source, 0.0):.2f} ({counts['accepted']}/{counts['drafted']})"
            for source, counts in sorted(row["proposals"].items(), reverse=True)
        )
        or "-"
    )


def _same(row: dict) -> str:
    if not row.get("checked", True):
        return "  not checked"
    same = "  yes" if row["identical"] else f"  NO: updates {row['mismatched_updates']}"
    return same + (f" ({len(row['sampled_updates'])} sampled)" if row.get("sampled_updates") else "")


COLUMNS = [
    ("configuration", "config", "<26"),
    ("decoded", "decoded_updates", ">8"),
    ("passes/upd", "passes_per_update", ">11.1f"),
    ("median s", "median_latency_seconds", ">9.2f"),
    ("p95 s", "p95_latency_seconds", ">7.2f"),
    ("lag s", "median_commit_lag_seconds", ">6.1f"),
    ("RTF", "real_time_factor", ">6.2f"),
    ("WER", "wer", ">6.3f"),
    ("  acceptance by source (accepted/drafted)", lambda row: f"  {_acceptance(row)}", "<48"),
    ("  same", _same, ""),
]


def table(rows: list[dict]) -> str:
    """A fixed-width text table: one line per configuration."""
    return harness.table(rows, COLUMNS)


def minutes_table(row: dict) -> str:
    """One line per minute of a stream: decoded updates, median and p95 latency, real-time factor."""
    return harness.table(row["by_minute"], [
        ("minute", "minute", ">7"), ("decoded", "decoded_updates", ">8"),
        ("median s", "median_latency_seconds", ">9.2f"), ("p95 s", "p95_latency_seconds", ">7.2f"),
        ("RTF", "real_time_factor", ">6.2f"),
    ])  # fmt: skip


def run_and_report(options: StreamBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the stream benchmark, print the tables and the goals, write stream.json."""
    record = Record(command, options)
    whispers = load_whispers(options)
    if options.size == "real":
        rows_by_stream = measure_real(whispers, options)
        found = real_goals(rows_by_stream)
        streams = {
            name: {"seconds": rows[0]["audio_seconds"] / options.rounds}
            for name, rows in rows_by_stream.items()
        }
    else:
        waveform, clips = stream_clips(options)
        seconds = len(waveform) / SAMPLE_RATE
        print(f"stream: {', '.join(clips)} ({seconds:.1f} s), {options.chunk_seconds:g} s chunks")
        rows = measure(whispers, waveform, options.chunk_seconds, options.rounds, check=options.check)
        found = goals(rows, list(whispers), options.chunk_seconds)
        print(table(rows))
        rows_by_stream, streams = {"stream": rows}, {"stream": {"clips": clips, "seconds": seconds}}
    print()
    mismatched = [row["config"] for rows in rows_by_stream.values() for row in rows if not row["identical"]]
    same = "every decoded update of every configuration equals the target alone on its buffer"
    record.verdict(mismatched, same if options.check else "updates not checked", found)
    target = next(iter(whispers.values())).pair.target
    drafts = {name: whisper.pair.draft.name for name, whisper in whispers.items()}
    record.update(
        language=LANGUAGE, streams=streams, models={"target": target.name, **drafts},
        rows=rows_by_stream,
    )  # fmt: skip
    record.write(out_dir / "stream.json")
    return record


def measure_real(
    whispers: dict[str, SpeculativeWhisper], options: StreamBenchOptions
) -> dict[str, list[dict]]:
    """Each real stream through every configuration; each row with its WER against `transcribe`."""
    rows_by_stream = {}
    for name, stream in real_streams(options).items():
        waveform = stream.waveform
        seconds = len(waveform) / SAMPLE_RATE
        print(f"\nstream: {name} ({seconds:.1f} s), {options.chunk_seconds:g} s chunks")
        chunk, count = options.chunk_seconds, options.rounds
        rows = measure(whispers, waveform, chunk, count, configs=real_configs(), check=options.check)
        whole = whispers["self"].transcribe(waveform, sample_rate=SAMPLE_RATE, language=LANGUAGE)[0]
        for row in rows:  # against transcribe; and, as transcribe, against what was read
            errors = word_errors(whole, row["final_text"])
            row["wer"], row["deleted_words"] = errors.wer, errors.deletions
            if stream.script is not None:
                row["script_wer"] = word_errors(stream.script, row["final_text"]).wer
                row["transcribe_script_wer"] = word_errors(stream.script, whole).wer
        rows_by_stream[name] = rows
        print(table(rows))
        default = next(row for row in rows if row["config"] == DEFAULT)
        if stream.script is not None:
            print(
                f"WER against what was read: transcribe {default['transcribe_script_wer']:.3f}, "
                f"{DEFAULT} {default['script_wer']:.3f} (words it left out of transcribe's: "
                f"{default['deleted_words']})"
            )
        if seconds > 120:
            print(f"\n{DEFAULT}, minute by minute:")
            print(minutes_table(next(row for row in rows if row["config"] == DEFAULT)))
    return rows_by_stream
