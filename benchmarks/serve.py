"""`python -m benchmarks serve`: many clients at once against `python app.py`, over loopback.

For each number of clients N, N requests one after another then all at once: seconds, throughput,
latency, the rows passes shared; every answer at once must be its answer one after another. Beside it, one
request alone through the scheduler against the direct call.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
import numpy as np

from benchmarks import harness, plots
from benchmarks.harness import ASSETS, Record, median, one_after_another_then_at_once, record_path, served
from specdec.audio import SAMPLE_RATE, load_audio


@dataclass(frozen=True)
class ServeBenchOptions:
    OUT: ClassVar[str] = "docs/bench-serve-base.json"  # where --out points unless told
    clients: tuple[int, ...] = (1, 2, 4, 8, 16)  # numbers of concurrent clients
    # cycled: asset names, or audio files and folders of them (clips the project never shipped)
    clips: str = "en-fellow-americans,en-weather,en-jfk,de-bahnhof,es-biblioteca,fr-marche"
    alone_rounds: int = 5  # one request alone: rounds of scheduler vs direct


def clip_paths(options: ServeBenchOptions) -> list[Path]:
    """The clips named: an asset's name (its audio, not its text), an audio file, or a folder of them."""
    names = [name.strip() for name in options.clips.split(",") if name.strip()]
    named = [
        Path(n) if Path(n).exists() else next(p for p in ASSETS.glob(f"{n}.*") if p.suffix != ".txt")
        for n in names
    ]
    return harness.audio_paths(named)


def request(url: str, path: Path) -> dict:
    """One transcription, timed from the client: its answer and seconds."""
    start = time.perf_counter()
    with path.open("rb") as audio:
        answer = httpx.post(
            f"{url}/v1/audio/transcriptions", files={"file": (path.name, audio)},
            data={"model": "whisper-1", "response_format": "verbose_json"}, timeout=600,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    if answer.status_code != 200:
        raise SystemExit(f"serve: {path.name} got {answer.status_code}: {answer.text[:500]}")
    return {"seconds": seconds, **answer.json()}


def run_clients(url: str, paths: list[Path], clients: int) -> dict:
    """N requests one after another, then the same N at once."""
    found = one_after_another_then_at_once(
        lambda path: request(url, path), [paths[i % len(paths)] for i in range(clients)]
    )
    serial_seconds, together_seconds, together = (
        found["serial_seconds"],
        found["together_seconds"],
        found["together"],
    )
    audio = sum(answer["duration"] for answer in together)
    latencies = sorted(answer["seconds"] for answer in together)
    stats = [answer["speculative"] for answer in together]
    passes = sum(s["target_passes"] for s in stats)
    return {
        "clients": clients,
        "one_after_another_seconds": round(serial_seconds, 3),
        "at_once_seconds": round(together_seconds, 3),
        "speedup": round(serial_seconds / together_seconds, 3),
        "audio_seconds": round(audio, 2),
        "throughput": round(audio / together_seconds, 2),  # seconds of audio per second, at once
        "throughput_one_after_another": round(audio / serial_seconds, 2),
        "latency_p50": round(statistics.median(latencies), 3),
        "latency_p95": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 3),
        "mean_batch_rows": round(sum(s["batch_rows"] * s["target_passes"] for s in stats) / passes, 2),
        "draft_tokens_per_row_pass": round(sum(s["draft_tokens"] for s in stats) / passes, 2),
        "identical": found["identical"],
    }


def alone_through_the_scheduler(paths: list[Path], count: int) -> dict:
    """One request alone: the scheduler against the direct call, same pair, interleaved, medians."""
    from specdec.api import SpeculativeWhisper
    from specdec.options import DecodeOptions
    from specdec.scheduler import Scheduler

    whisper, options = SpeculativeWhisper(), DecodeOptions()
    scheduler = Scheduler(whisper)
    ways = {
        "direct": lambda waveform: whisper.transcribe_waveforms([waveform], options),
        "scheduler": lambda waveform: scheduler.submit(waveform, options).result(),
    }
    per_clip = {}
    for path in paths:
        waveform = load_audio(path)

        def call(way: str, _: object, waveform: np.ndarray = waveform) -> float:
            return harness.timed(lambda: ways[way](waveform))[1]

        warm_up = lambda way, waveform=waveform: ways[way](waveform)  # noqa: E731
        found = harness.rounds(list(ways), call, count, warm_up=warm_up, settle=0.3, log=lambda _: None)
        per_clip[path.stem] = {way: round(median(seconds), 3) for (way, _), seconds in found.items()}
    ratios = [clip["scheduler"] / clip["direct"] for clip in per_clip.values()]
    return {"per_clip": per_clip, "median_ratio": round(median(ratios), 3)}


def figure(rows: list[dict], title: str) -> plots.go.Figure:
    x, lines = [row["clients"] for row in rows], {"dash": "dash"}
    throughput = [
        plots.scatter(x, [r["throughput"] for r in rows], "at once"),
        plots.scatter(x, [r["throughput_one_after_another"] for r in rows], "one after another", line=lines),
    ]
    latency = [plots.scatter(x, [r[f"latency_{p}"] for r in rows], f"{p} latency") for p in ("p50", "p95")]
    axes = [{"x": {"title_text": "concurrent clients", "type": "log"}, "y": {"title_text": y}}
            for y in ("seconds of audio per second", "seconds")]  # fmt: skip
    return plots.figure(title, {"throughput": throughput, "latency": latency}, axes, height=460)


def run_and_report(options: ServeBenchOptions, out: Path, command: str) -> dict:
    record = Record(command, options)
    paths = clip_paths(options)
    with served([]) as (url, _):
        request(url, paths[0])  # warm
        rows = []
        for clients in options.clients:
            rows.append(run_clients(url, paths, clients))
            print(_line(rows[-1]), flush=True)
    alone = alone_through_the_scheduler(paths, options.alone_rounds)
    print(
        f"one request alone, through the scheduler / direct: {alone['median_ratio']:.3f} (median over clips)"
    )
    record.update(
        clips=[path.name for path in paths],
        clip_seconds={path.name: round(len(load_audio(path)) / SAMPLE_RATE, 2) for path in paths},
        rows=rows, alone=alone, identical=all(row["identical"] for row in rows),
    )  # fmt: skip
    title = f"python app.py, concurrent /v1 clients: {command}"
    record.write(record_path(out, "serve.json"), lambda: [figure(rows, title)], title)
    return record


def _line(row: dict) -> str:
    return (
        f"{row['clients']:3d} clients: one after another {row['one_after_another_seconds']:6.2f} s, at once "
        f"{row['at_once_seconds']:6.2f} s ({row['speedup']:.2f}x), {row['throughput']:.1f} s audio/s, "
        f"p50 {row['latency_p50']:.2f} s, p95 {row['latency_p95']:.2f} s, rows per pass "
        f"{row['mean_batch_rows']:.1f}, draft tokens per row and pass {row['draft_tokens_per_row_pass']:.2f}"
        + ("" if row["identical"] else "  !!! TEXTS DIFFER")
    )
