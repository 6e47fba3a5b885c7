"""`python -m benchmarks app`: the app served as a user starts it, on a preset's checkpoints, driven as its
users drive it.

One Compare through `gradio_client`, one `/v1/audio/transcriptions` through `openai`, and N requests at
once against the same N one after another; greedy throughout. Given a GPU record (`--record`), the
Compare's decode ratio is set beside the record's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.checkpoints import DEFAULT_CACHE, PRESETS, bench_models
from benchmarks.harness import ASSETS, Record, goal, one_after_another_then_at_once, print_goals, served

GOAL_CONCURRENT = 4.0  # N requests at once finish this many times sooner than one after another
GOAL_COMPARE = 0.2  # Compare's decode ratio within this share of the record's


@dataclass(frozen=True)
class AppCheckOptions:
    size: str = "large-v3"  # a checkpoints preset: its target and drafts are the app's --target and --draft
    clip: str = "en-fellow-americans.wav"  # under assets/
    clients: int = 8  # requests at once, against the same one after another
    record: str = ""  # a `benchmarks gpu` record to read the Compare's ratio beside; "": none
    start_seconds: int = 600  # the server's start: loading and warming up the default pair
    seed: int = 0
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # the app's --device


def compare(url: str, clip: Path, label: str) -> dict:
    """One Compare through gradio_client, as the page's button sends it (adaptive k, greedy)."""
    from gradio_client import Client, handle_file

    client = Client(url, verbose=False)
    start = time.perf_counter()
    outputs = client.predict(
        handle_file(str(clip)), label, "en", "transcribe", False, "adaptive", 5, 0.0, 0, "sequential", "",
        fallback=False, api_name="/compare",
    )  # fmt: skip
    seconds = time.perf_counter() - start
    *shown, _windows, _words = outputs
    details = shown[-1]
    runs = {name: details[name] for name in ("baseline", "speculative")}
    each = {
        f"{name}_{key}": run[key]
        for name, run in runs.items()
        for key in ("decode_seconds", "num_target_passes")
    }
    return {
        "pair": label, "client_seconds": seconds, "decode_speedup": details["decode_speedup"],
        "identical": details["identical"], **each, "acceptance_rate": runs["speculative"]["acceptance_rate"],
        "tokens": runs["speculative"]["num_generated"],
    }  # fmt: skip


def transcribe(url: str, clip: Path) -> dict:
    """One /v1/audio/transcriptions request through the openai client (the default pair); its answer."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    start = time.perf_counter()
    with clip.open("rb") as audio:
        answer = client.audio.transcriptions.create(
            model="whisper-1", file=audio, language="en", response_format="verbose_json",
            extra_body={"fallback": "false"},
        )  # fmt: skip
    seconds = time.perf_counter() - start
    found = answer.model_dump()
    return {"client_seconds": seconds, "text": found["text"], **found.get("speculative", {})}


def concurrent(url: str, clip: Path, clients: int) -> dict:
    """N requests one after another, then the same N at once; seconds, their ratio, identical texts."""
    found = one_after_another_then_at_once(lambda _: transcribe(url, clip), range(clients))
    return {
        "clients": clients, "one_after_another_seconds": found["serial_seconds"],
        "at_once_seconds": found["together_seconds"],
        "speedup": found["serial_seconds"] / found["together_seconds"],
        "mean_batch_rows": sum(answer["batch_rows"] for answer in found["together"]) / clients,
        "identical": found["identical"],
    }  # fmt: skip


def record_ratio(record: Path, draft: str) -> float | None:
    """The record's decode ratio of the draft deciding for itself over our target alone: float16 batch 1,
    replayed where the record has it (as the app decodes on CUDA), else eager."""
    rows = [row for row in json.loads(record.read_text())["rows"] if row["batch"] == 1]
    dtype = "float16" if any(row["dtype"] == "float16" for row in rows) else rows[0]["dtype"]
    for mode in ("replayed", "eager"):
        mine = {row["config"]: row for row in rows if row["dtype"] == dtype and row["mode"] == mode}
        alone = mine.get(f"specdec target-only {mode}")
        own = mine.get(f"specdec {draft} adaptive {mode}")
        if alone and own:
            return alone["decode_seconds"] / own["decode_seconds"]
    return None


def run_and_report(options: AppCheckOptions, out_dir: Path, command: str) -> dict:
    """Serve the app on the preset's models, drive it, print and write app.json (the server log beside it)."""
    from specdec.app.store import pairs_for

    record = Record(command, options)
    out_dir.mkdir(parents=True, exist_ok=True)
    clip = ASSETS / options.clip
    target, *drafts = map(str, bench_models(options.size, options.cache_dir, options.seed).values())
    args = ["--target", target, "--device", options.device, *(a for d in drafts for a in ("--draft", d))]
    with served(args, out_dir / "app-server.log", options.start_seconds) as (url, start_seconds):
        labels = list(pairs_for(target, drafts))
        print(f"app answered after {start_seconds:.1f} s at {url}; pairs: {labels}", flush=True)
        transcribe(url, clip)  # the first request's own costs (new shapes) are not the subject
        compared = compare(url, clip, labels[0])
        print(f"Compare: {json.dumps(compared)}", flush=True)
        one = transcribe(url, clip)
        print(f"/v1 one request: {one['client_seconds']:.2f} s", flush=True)
        many = concurrent(url, clip, options.clients)
        print(f"/v1 {json.dumps(many)}", flush=True)
    draft = list(PRESETS[options.size].drafts)[0]  # the first pair's draft
    expected = record_ratio(Path(options.record), draft) if options.record else None
    off = abs(compared["decode_speedup"] / expected - 1) if expected else None
    at_once = f"{options.clients} /v1 requests at once over one after another"
    found = [
        goal(at_once, many["speedup"], ">=", GOAL_CONCURRENT),
        goal("Compare's decode ratio off the record's, share", off, "<", GOAL_COMPARE),
    ]
    record.update(
        start_seconds=start_seconds, compare=compared, transcription=one, concurrent=many,
        record_decode_ratio=expected, identical=compared["identical"] and many["identical"], goals=found,
    )  # fmt: skip
    print_goals(found)
    record.write(out_dir / "app.json")
    return record
