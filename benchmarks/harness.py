"""What every benchmark does the same way: the record, rotated rounds, timing, tables, goals, a child
process and the app served."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
LANGUAGE = "en"  # forced wherever a benchmark times decoding alone: no language-detection pass


def audio_paths(paths: Iterable[Path]) -> list[Path]:
    """Each folder replaced by the audio files under it, sorted (`scripts/get_real_speech.py`'s folder)."""
    from specdec.distill.data import find_clips

    found = []
    for path in paths:
        audio = [clip.path for clip in find_clips(path)] if path.is_dir() else [path]
        if not audio:
            raise SystemExit(f"no audio files under {path}")
        found += audio
    return found


def quiet_transformers() -> None:
    """No progress bars, and no warning per generate() call (max_length) in the benchmarks' output."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


class Record(dict):
    """A benchmark's JSON report: the header first, then what the benchmark adds to it."""

    def __init__(self, command: str, options: object, **fields: Any) -> None:
        super().__init__(
            command=command,
            date=time.strftime("%Y-%m-%d %H:%M"),
            machine=machine(options),
            options={k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
            **fields,
        )
        self.started = time.perf_counter()

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:5.0f} s] {message}", flush=True)

    def verdict(
        self, mismatched: list[str], same: str, goals: list[dict] | None = None, digits: int = 2
    ) -> bool:
        """The goals printed and kept; then `same` when no output differed, else what did, kept as
        `identical`; True when none differed."""
        for found in goals or ():
            value = "-" if found["value"] is None else f"{found['value']:.{digits}f}"
            verdict = {True: "met", False: "MISSED", None: "not measured"}[found["met"]]
            print(f"goal {found['goal']}: {value} ({found['relation']} {found['threshold']:g}) {verdict}")
        if goals is not None:
            self["goals"] = goals
        print(f"\n!!! OUTPUT DIFFERS in: {', '.join(mismatched)}" if mismatched else f"\n{same}")
        self["identical"] = not mismatched
        return self["identical"]

    def write(self, path: Path, figures: Callable[[], Sequence] | None = None, title: str = "",
              quiet: bool = False) -> Path:  # fmt: skip
        """The JSON at `path` (wall_seconds set), then figures()' figures in one HTML beside it; says so
        unless quiet. The JSON comes first: a figure that fails loses no measurement."""
        self["wall_seconds"] = time.perf_counter() - self.started
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self, indent=1))
        written = [path]
        if figures is not None:
            from benchmarks.plots import write_html  # plotly only here

            written.append(write_html(figures(), path.with_suffix(".html"), title))
        if not quiet:
            print(f"wrote {' and '.join(map(str, written))} ({self['wall_seconds']:.0f} s)")
        return path


def record_path(out: Path, name: str) -> Path:
    """`out` itself when it names a JSON file, else `name` in the folder `out`."""
    return out if out.suffix == ".json" else out / name


def machine(options: object | None = None) -> dict:
    """What the numbers were measured on."""
    import platform

    import torch
    import transformers

    cpuinfo = Path("/proc/cpuinfo")
    names = re.findall(r"model name\s*:\s*(.+)", cpuinfo.read_text()) if cpuinfo.exists() else []
    return {
        "cpu": names[0].strip() if names else platform.processor() or "unknown",
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "device": getattr(options, "device", "cpu"),
        "dtype": getattr(options, "dtype", "float32"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }


def goal(name: str, value: float | None, relation: str, threshold: float) -> dict:
    """A goal with the measured figure (None: the run did not measure it)."""
    compare = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}[relation]
    met = None if value is None else compare(float(value), float(threshold))
    return {"goal": name, "value": value, "relation": relation, "threshold": threshold, "met": met}


def leviathan_bound(alpha: float, num_draft_tokens: int, cost_ratio: float) -> float:
    """Expected speedup of speculative decoding over the target alone (Leviathan et al. 2023, eq. 1)."""
    k = num_draft_tokens
    tokens_per_pass = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens_per_pass / (k * cost_ratio + 1)


def draft_statistics(accepted: int, judged: int, drafted: int, drafting_steps: int, cost_ratio: float,
                     k: float | None = None) -> dict:  # fmt: skip
    """α (accepted over judged), mean k (drafted per drafting step), the draft's cost ratio c and Leviathan's
    bound at k (None: at the mean k); 0 where nothing was judged or drafted."""
    alpha = accepted / judged if judged else 0.0
    mean_k = drafted / drafting_steps if drafting_steps else 0.0
    bound = leviathan_bound(alpha, mean_k if k is None else k, cost_ratio)
    return {"alpha": alpha, "mean_k": mean_k, "c": cost_ratio, "bound": bound}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None where either is missing or the denominator is 0."""
    return None if numerator is None or not denominator else numerator / denominator


def rounds(
    configs: Sequence[Hashable], run: Callable[[Any, Any], Any], count: int, items: Sequence = (None,),
    warm_up: Callable[[Any], object] | None = None, settle: float = 0.0, log: Callable[[str], None] = print,
) -> dict[tuple, list]:  # fmt: skip
    """run(config, item) for every item and configuration, `count` rounds: (config, item) -> each round's
    result. warm_up(config) first, untimed, for each; each round rotates the configurations' order;
    `settle` seconds of untimed pause before each call (threads left spinning by the call before sleep)."""
    for config in configs if warm_up else ():
        warm_up(config)
    found: dict[tuple, list] = {(config, item): [] for item in items for config in configs}
    for index in range(count):
        start, shift = time.perf_counter(), index % len(configs)
        for item in items:
            for config in [*configs[shift:], *configs[:shift]]:
                time.sleep(settle)
                found[(config, item)].append(run(config, item))
        log(f"round {index + 1}/{count}: {time.perf_counter() - start:.0f} s")
    return found


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def synchronize(device: object = None) -> None:
    """Wait for a device's (or a module's) queued GPU work, so that a clock read after it times the work."""
    import torch

    if hasattr(device, "parameters"):
        device = next(device.parameters()).device
    if torch.cuda.is_available() and torch.device(device or "cpu").type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], Any], device: object = None) -> tuple[Any, float]:
    """call()'s result and its seconds (the device's queued work included)."""
    synchronize(device)
    start = time.perf_counter()
    found = call()
    synchronize(device)
    return found, time.perf_counter() - start


def in_child(function: Callable, *args: object) -> Any:
    """function(*args) in a spawned process: its result."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(function, *args).result()


Column = tuple[str, str | Callable[[dict], Any], str]  # header, a row's key or a function of it, format


def table(rows: Iterable[dict], columns: Sequence[Column], markdown: bool = False) -> str:
    """Rows as a table, a column's cells formatted by its spec: fixed-width, or markdown (cells stripped);
    '-' for None. A text cell (and the header) keeps the spec's alignment (default right) and width."""
    text = [f"{m[1] or '>'}{m[2]}" for m in (re.match(r"([<>^]?)(\d*)", spec) for *_, spec in columns)]

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(cell.strip() for cell in cells) + " |" if markdown else "".join(cells)

    head = line(f"{header:{align}}" for (header, *_), align in zip(columns, text, strict=True))
    lines = [head, "|" + "---|" * len(columns) if markdown else "-" * len(head)]
    for row in rows:
        values = [row.get(key) if isinstance(key, str) else key(row) for _, key, _ in columns]
        lines.append(line(
            f"{'-' if value is None else value:{align}}" if value is None or isinstance(value, str)
            else f"{value:{spec}}" for value, (*_, spec), align in zip(values, columns, text, strict=True)
        ))  # fmt: skip
    return "\n".join(lines)


@contextmanager
def served(
    args: Sequence[str], log: Path | None = None, start_seconds: float = 300
) -> Iterator[tuple[str, float]]:
    """`python app.py ARGS --port P` in its own process, as a user starts it: (its URL, seconds until
    /v1/models answered) while the block runs; stopped after it."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    output = log.open("w") if log else subprocess.DEVNULL
    command = [sys.executable, "app.py", *args, "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    url, start = f"http://127.0.0.1:{port}", time.perf_counter()
    try:
        while server.poll() is None and time.perf_counter() - start < start_seconds:
            with suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                    break
            time.sleep(1)
        else:
            late = f"did not answer within {start_seconds:.0f} s"
            why = late if server.poll() is None else f"exited ({server.returncode})"
            raise SystemExit(f"the server {why}{f'; see {log}' if log else ''}")
        yield url, time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(30)


def one_after_another_then_at_once(send: Callable[[Any], dict], items: Sequence) -> dict:
    """send(item) for each item one after another, then for all of them at once from as many threads:
    both lists of answers and both wall times."""
    serial, serial_seconds = timed(lambda: [send(item) for item in items])
    time.sleep(0.5)
    with ThreadPoolExecutor(len(items)) as pool:
        together, together_seconds = timed(lambda: list(pool.map(send, items)))
    identical = [a["text"] for a in together] == [a["text"] for a in serial]
    return {"serial": serial, "serial_seconds": serial_seconds, "together": together,
            "together_seconds": together_seconds, "identical": identical}  # fmt: skip
