"""`python app.py` started as a user starts it and driven over loopback: the `serve` and `app` benchmarks."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from benchmarks import harness, plots
from benchmarks.checkpoints import DEFAULT_CACHE, PRESETS, bench_models
from benchmarks.harness import ASSETS, Record, goal, median, served
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions
from specdec.scheduler import Scheduler

GOAL_CONCURRENT = 4.0  # N requests at once finish this many times sooner than one after another
GOAL_COMPARE = 0.2  # Compare's decode ratio within this share of the record's
ENGLISH = {"language": "en", "extra_body": {"fallback": "false"}}  # the app check's /v1 requests: greedy
LINE = (  # a row of `at_once`
    "{clients:3d} clients: one after another {one_after_another_seconds:6.2f} s, at once "
    "{at_once_seconds:6.2f} s ({speedup:.2f}x), {throughput:.1f} s audio/s, p50 {latency_p50:.2f} s, p95 "
    "{latency_p95:.2f} s, rows per pass {mean_batch_rows:.1f}, draft tokens per row and pass "
    "{draft_tokens_per_row_pass:.2f}"
)


@dataclass(frozen=True)
class ServeBenchOptions:
    """`serve`: 1-16 concurrent clients against `python app.py` over loopback: throughput, latency, rows"""

    OUT: ClassVar[str] = "docs/bench-serve-base.json"  # where --out points unless told
    clients: tuple[int, ...] = (1, 2, 4, 8, 16)  # numbers of concurrent clients
    # cycled: asset names, or audio files and folders of them (clips the project never shipped)
    clips: str = "en-fellow-americans,en-weather,en-jfk,de-bahnhof,es-biblioteca,fr-marche"
    alone_rounds: int = 5  # one request alone: rounds of scheduler vs direct


@dataclass(frozen=True)
class AppCheckOptions:
    """`app`: `python app.py` on a preset's models: a Compare (gradio_client), /v1 (openai), N at once"""

    size: str = "large-v3"  # a checkpoints preset: its target and drafts are the app's --target and --draft
    clip: str = "en-fellow-americans.wav"  # under assets/
    clients: int = 8  # requests at once, against the same one after another
    record: str = ""  # a `benchmarks gpu` record to read the Compare's ratio beside; "": none
    start_seconds: int = 600  # the server's start: loading and warming up the default pair
    seed: int = 0
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # the app's --device


def clip_paths(clips: str) -> list[Path]:
    """The clips named: an asset's name (its audio, not its text), an audio file, or a folder of them."""
    asset = lambda name: next(p for p in ASSETS.glob(f"{name}.*") if p.suffix != ".txt")  # noqa: E731
    names = [name.strip() for name in clips.split(",") if name.strip()]
    return harness.audio_paths([Path(name) if Path(name).exists() else asset(name) for name in names])


def transcribe(url: str, clip: Path, **fields: object) -> dict:
    """One verbose_json /v1 transcription through `openai`: client seconds, text, duration, its statistics."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    start = time.perf_counter()
    answer = client.audio.transcriptions.create(
        model="whisper-1", file=(clip.name, clip.read_bytes()), response_format="verbose_json", **fields
    ).model_dump()
    seconds, text, duration = time.perf_counter() - start, answer["text"], answer["duration"]
    return {"client_seconds": seconds, "text": text, "duration": duration, **answer.get("speculative", {})}


def at_once(url: str, clips: list[Path], clients: int, **fields: object) -> dict:
    """N requests (the clips in turn) one after another, then the same N at once, each answer as before."""
    sent = [clips[i % len(clips)] for i in range(clients)]
    found = harness.one_after_another_then_at_once(lambda clip: transcribe(url, clip, **fields), sent)
    serial, together, answers = found["serial_seconds"], found["together_seconds"], found["together"]
    audio, passes = sum(a["duration"] for a in answers), sum(a["target_passes"] for a in answers)
    latencies = sorted(answer["client_seconds"] for answer in answers)
    return {
        "clients": clients, "one_after_another_seconds": round(serial, 3), "identical": found["identical"],
        "at_once_seconds": round(together, 3), "speedup": round(serial / together, 3),
        "audio_seconds": round(audio, 2), "throughput": round(audio / together, 2),  # audio s per s, at once
        "throughput_one_after_another": round(audio / serial, 2), "latency_p50": round(median(latencies), 3),
        "latency_p95": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 3),
        "mean_batch_rows": round(sum(a["batch_rows"] * a["target_passes"] for a in answers) / passes, 2),
        "draft_tokens_per_row_pass": round(sum(a["draft_tokens"] for a in answers) / passes, 2),
    }  # fmt: skip


def alone_through_the_scheduler(paths: list[Path], count: int) -> dict:
    """One request alone: the scheduler against the direct call, same pair, interleaved, medians per clip."""
    waveforms = {path.stem: load_audio(path) for path in paths}
    scheduler, options = Scheduler(SpeculativeWhisper()), DecodeOptions()
    ways = {"direct": lambda waveform: scheduler.whisper.transcribe_waveforms([waveform], options),
            "scheduler": lambda waveform: scheduler.submit(waveform, options).result()}  # fmt: skip
    warm_up = lambda way: [ways[way](waveform) for waveform in waveforms.values()]  # noqa: E731
    call = lambda way, clip: harness.timed(lambda: ways[way](waveforms[clip]))[1]  # noqa: E731
    found = harness.rounds(list(ways), call, count, list(waveforms), warm_up, settle=0.3, log=lambda _: None)
    medians = {clip: {way: round(median(found[(way, clip)]), 3) for way in ways} for clip in waveforms}
    ratio = median(clip["scheduler"] / clip["direct"] for clip in medians.values())
    return {"per_clip": medians, "median_ratio": round(ratio, 3)}


def compare(url: str, clip: Path, label: str) -> dict:
    """One Compare through gradio_client, as the page's button sends it (adaptive k, greedy)."""
    from gradio_client import Client, handle_file

    client, start = Client(url, verbose=False), time.perf_counter()
    *_, details, _windows, _words = client.predict(handle_file(str(clip)), label, "en", "transcribe", False,
        "adaptive", 5, 0.0, 0, "sequential", "", fallback=False, api_name="/compare")  # fmt: skip
    seconds, speculative = time.perf_counter() - start, details["speculative"]
    each = {f"{name}_{key}": details[name][key] for name in ("baseline", "speculative")
            for key in ("decode_seconds", "num_target_passes")}  # fmt: skip
    return {"pair": label, "client_seconds": seconds, "decode_speedup": details["decode_speedup"], **each,
            "identical": details["identical"], "acceptance_rate": speculative["acceptance_rate"],
            "tokens": speculative["num_generated"]}  # fmt: skip


def record_ratio(record: Path, draft: str) -> float | None:
    """The record's decode ratio, the draft's adaptive k over our target alone: float16 batch 1, replayed
    where the record has it (as the app decodes on CUDA), else eager."""
    rows = [row for row in json.loads(record.read_text())["rows"] if row["batch"] == 1]
    dtype = "float16" if any(row["dtype"] == "float16" for row in rows) else rows[0]["dtype"]
    for mode in ("replayed", "eager"):
        mine = {row["config"]: row for row in rows if row["dtype"] == dtype and row["mode"] == mode}
        alone, own = mine.get(f"specdec target-only {mode}"), mine.get(f"specdec {draft} adaptive {mode}")
        if alone and own:
            return alone["decode_seconds"] / own["decode_seconds"]
    return None


def figure(rows: list[dict], title: str) -> plots.go.Figure:
    x = [row["clients"] for row in rows]
    keys = {"throughput": {"at once": "throughput", "one after another": "throughput_one_after_another"},
            "latency": {"p50 latency": "latency_p50", "p95 latency": "latency_p95"}}  # fmt: skip
    panels = {panel: [plots.scatter(x, [r[k] for r in rows], name) for name, k in found.items()]
              for panel, found in keys.items()}  # fmt: skip
    axes = [{"x": {"title_text": "concurrent clients", "type": "log"}, "y": {"title_text": y}}
            for y in ("seconds of audio per second", "seconds")]  # fmt: skip
    return plots.figure(title, panels, axes, height=460)


def run_and_report(options: ServeBenchOptions | AppCheckOptions, out: Path, command: str) -> dict:
    """`serve`: the clients, serve.json and its figure; `app`: the app check, app.json (the log beside)."""
    if isinstance(options, AppCheckOptions):
        return check_app(options, out, Record(command, options))
    record, paths, rows = Record(command, options), clip_paths(options.clips), []
    with served([]) as (url, _):
        transcribe(url, paths[0])  # warm
        for clients in options.clients:
            rows.append(at_once(url, paths, clients))
            print(LINE.format_map(rows[-1]), flush=True)
    alone = alone_through_the_scheduler(paths, options.alone_rounds)
    print(f"one request alone, through the scheduler / direct: {alone['median_ratio']:.3f} (clips' median)")
    seconds = {path.name: round(len(load_audio(path)) / SAMPLE_RATE, 2) for path in paths}
    record.update(clips=[path.name for path in paths], clip_seconds=seconds, rows=rows, alone=alone)
    record.verdict([f"{r['clients']} clients" for r in rows if not r["identical"]], "every answer its own")
    title = f"python app.py, concurrent /v1 clients: {command}"
    record.write(harness.record_path(out, "serve.json"), lambda: [figure(rows, title)], title)
    return record


def check_app(options: AppCheckOptions, out: Path, record: Record) -> dict:
    clip, draft = ASSETS / options.clip, list(PRESETS[options.size].drafts)[0]  # the first pair's draft
    target, *drafts = map(str, bench_models(options.size, options.cache_dir, options.seed).values())
    args = ["--target", target, "--device", options.device, *(a for d in drafts for a in ("--draft", d))]
    out.mkdir(parents=True, exist_ok=True)
    with served(args, out / "app-server.log", options.start_seconds) as (url, start_seconds):
        label = f"{Path(target).name} ← {Path(drafts[0]).name}"  # the first pair, as the page names it
        print(f"app answered after {start_seconds:.1f} s at {url}; Compare: {label}", flush=True)
        transcribe(url, clip, **ENGLISH)  # the first request's own costs (new shapes) are not the subject
        compared = compare(url, clip, label)
        one = transcribe(url, clip, **ENGLISH)
        print(f"Compare: {json.dumps(compared)}\n/v1 one request: {one['client_seconds']:.2f} s", flush=True)
        many = at_once(url, [clip], options.clients, **ENGLISH)
        print(f"/v1 {LINE.format_map(many)}", flush=True)
    expected = record_ratio(Path(options.record), draft) if options.record else None
    off = abs(compared["decode_speedup"] / expected - 1) if expected else None
    at_once_goal = f"{options.clients} /v1 requests at once over one after another"
    goals = [goal(at_once_goal, many["speedup"], ">=", GOAL_CONCURRENT),
             goal("Compare's decode ratio off the record's, share", off, "<", GOAL_COMPARE)]  # fmt: skip
    record.update(start_seconds=start_seconds, compare=compared, transcription=one, concurrent=many,
                  record_decode_ratio=expected)  # fmt: skip
    mismatched = [name for name, run in (("Compare", compared), ("/v1", many)) if not run["identical"]]
    record.verdict(mismatched, "every answer its own", goals)
    record.write(out / "app.json")
    return record
