"""`python -m benchmarks serve`: many clients at once against `python app.py`, over loopback.

The server is started as a user starts it (`python app.py --port P`, the device's default pair: on a CPU
whisper-base with its self-draft) in its own process. For each number of clients N (1, 2, 4, 8, 16), N
requests to `/v1/audio/transcriptions` (verbose_json, clips cycled from `clips`) are sent one after another,
then all at once from N threads; reported per N: the seconds of both, their ratio (one after another /
at once), throughput (seconds of audio per second), each request's latency (p50, p95), the rows of the
target passes the requests shared on average (the server's `batch_rows`), and the draft tokens per row
and pass. Every answer at once must be its answer one after another (the exit code says otherwise).

Beside it, in this process, one request alone through the scheduler (`specdec.scheduler.Scheduler`) against
the same clip decoded directly (`SpeculativeWhisper.transcribe_waveforms`, as the server decoded one request
before the scheduler), interleaved rounds, medians: what batching costs one request alone.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx

from benchmarks.common import report_header, write_json
from benchmarks.plots import COLOURS
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.distill.data import find_clips

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
START_SECONDS = 300  # the server's start: loading (and on first use converting) the bundled models


@dataclass(frozen=True)
class ServeBenchOptions:
    OUT: ClassVar[str] = "docs/bench-serve-base.json"  # where --out points unless told
    clients: tuple[int, ...] = (1, 2, 4, 8, 16)  # numbers of concurrent clients
    # cycled: asset names, or audio files and folders of them (clips the project never shipped)
    clips: str = "en-fellow-americans,en-weather,en-jfk,de-bahnhof,es-biblioteca,fr-marche"
    alone_rounds: int = 5  # one request alone: rounds of scheduler vs direct


def clip_paths(options: ServeBenchOptions) -> list[Path]:
    """The clips named: an asset's name (its audio, not its text), an audio file, or every audio file in a
    folder, sorted."""
    paths = []
    for name in (name.strip() for name in options.clips.split(",") if name.strip()):
        path = Path(name)
        if path.is_dir():
            paths += [clip.path for clip in find_clips(path)]
        elif path.is_file():
            paths.append(path)
        else:
            paths.append(next(p for p in ASSETS.glob(f"{name}.*") if p.suffix != ".txt"))
    return paths


def start_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    server.kill()
    raise SystemExit("serve: the server did not start")


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
    chosen = [paths[i % len(paths)] for i in range(clients)]
    start = time.perf_counter()
    serial = [request(url, path) for path in chosen]
    serial_seconds = time.perf_counter() - start
    time.sleep(0.5)
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        together = list(pool.map(lambda path: request(url, path), chosen))
    together_seconds = time.perf_counter() - start
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
        "identical": [a["text"] for a in together] == [a["text"] for a in serial],
    }


def alone_through_the_scheduler(paths: list[Path], rounds: int) -> dict:
    """One request alone: the scheduler against the direct call, same pair, interleaved, medians."""
    from specdec.api import SpeculativeWhisper
    from specdec.options import DecodeOptions
    from specdec.scheduler import Scheduler

    whisper = SpeculativeWhisper()
    scheduler = Scheduler(whisper)
    waveforms = {path.stem: load_audio(path) for path in paths}
    options = DecodeOptions()
    per_clip = {}
    for name, waveform in waveforms.items():
        whisper.transcribe_waveforms([waveform], options)  # warm
        scheduler.submit(waveform, options).result()
        mine: dict[str, list[float]] = {"direct": [], "scheduler": []}
        for _ in range(rounds):
            for way in ("direct", "scheduler"):
                time.sleep(0.3)
                start = time.perf_counter()
                if way == "direct":
                    whisper.transcribe_waveforms([waveform], options)
                else:
                    scheduler.submit(waveform, options).result()
                mine[way].append(time.perf_counter() - start)
        per_clip[name] = {way: round(statistics.median(found), 3) for way, found in mine.items()}
    ratios = [clip["scheduler"] / clip["direct"] for clip in per_clip.values()]
    return {"per_clip": per_clip, "median_ratio": round(statistics.median(ratios), 3)}


def figure(rows: list[dict], title: str):
    from plotly.subplots import make_subplots

    result = make_subplots(rows=1, cols=2, subplot_titles=("throughput", "latency"))
    x = [row["clients"] for row in rows]
    result.add_scatter(x=x, y=[r["throughput"] for r in rows], name="at once", row=1, col=1,
                       line={"color": COLOURS[0]})  # fmt: skip
    result.add_scatter(x=x, y=[r["throughput_one_after_another"] for r in rows], name="one after another",
                       row=1, col=1, line={"color": COLOURS[1], "dash": "dash"})  # fmt: skip
    result.add_scatter(x=x, y=[r["latency_p50"] for r in rows], name="p50 latency", row=1, col=2,
                       line={"color": COLOURS[2]})  # fmt: skip
    result.add_scatter(x=x, y=[r["latency_p95"] for r in rows], name="p95 latency", row=1, col=2,
                       line={"color": COLOURS[3]})  # fmt: skip
    result.update_xaxes(title_text="concurrent clients", type="log")
    result.update_yaxes(title_text="seconds of audio per second", row=1, col=1)
    result.update_yaxes(title_text="seconds", row=1, col=2)
    result.update_layout(title=title, height=460, width=1100, template="plotly_white")
    return result


def run_and_report(options: ServeBenchOptions, out: Path, command: str) -> dict:
    started = time.perf_counter()
    paths = clip_paths(options)
    server, url = start_server()
    try:
        request(url, paths[0])  # warm
        rows = []
        for clients in options.clients:
            rows.append(run_clients(url, paths, clients))
            print(_line(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(30)
    alone = alone_through_the_scheduler(paths, options.alone_rounds)
    print(
        f"one request alone, through the scheduler / direct: {alone['median_ratio']:.3f} (median over clips)"
    )
    identical = all(row["identical"] for row in rows)
    report = {
        **report_header(command, options),
        "clips": [path.name for path in paths],
        "clip_seconds": {path.name: round(len(load_audio(path)) / SAMPLE_RATE, 2) for path in paths},
        "rows": rows,
        "alone": alone,
        "identical": identical,
        "wall_seconds": time.perf_counter() - started,
    }
    path = out if out.suffix == ".json" else out / "serve.json"
    write_json(report, path)
    html = path.with_suffix(".html")
    html.write_text(
        figure(rows, f"python app.py, concurrent /v1 clients: {command}").to_html(include_plotlyjs="cdn")
    )
    print(f"wrote {path} and {html} ({report['wall_seconds']:.0f} s)")
    return report


def _line(row: dict) -> str:
    return (
        f"{row['clients']:3d} clients: one after another {row['one_after_another_seconds']:6.2f} s, at once "
        f"{row['at_once_seconds']:6.2f} s ({row['speedup']:.2f}x), {row['throughput']:.1f} s audio/s, "
        f"p50 {row['latency_p50']:.2f} s, p95 {row['latency_p95']:.2f} s, rows per pass "
        f"{row['mean_batch_rows']:.1f}, draft tokens per row and pass {row['draft_tokens_per_row_pass']:.2f}"
        + ("" if row["identical"] else "  !!! TEXTS DIFFER")
    )
