"""`python -m benchmarks profile`: where a target pass's time goes, under `torch.profiler`.

A few passes of each way to decode one clip, once untimed, once timed, once profiled: per target pass the
launches, syncs, host reads and copies, CPU against device time, the top ops, and a Chrome trace of each.
"""

from __future__ import annotations

import gzip
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, Record
from benchmarks.runners import Clip, Models, Run
from benchmarks.tokens import Config, run

# event names, as the profiler records them (CUDA runtime and driver calls are CPU-side events)
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
GRAPH_LAUNCHES = ("cudaGraphLaunch",)  # one launch that replays a captured graph's kernels
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
HOST_READS = ("aten::_local_scalar_dense", "aten::item")  # a tensor's value read on the host (.item())
COPIES = ("aten::copy_", "aten::_to_copy")
DEVICE_COPIES = ("Memcpy DtoH", "Memcpy HtoD", "Memcpy DtoD")  # kernel-side names start with these


@dataclass(frozen=True)
class ProfileOptions:
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    max_new_tokens: int = 16  # per run: a few passes (the trace holds every op of each)
    alpha: float = 0.8  # planted agreement of the speculative runs
    num_draft_tokens: int = 5  # k
    top: int = 15  # ops listed by self CPU time
    seed: int = 0  # model weights and the acceptance plan
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"
    dtype: str = "float32"  # float32, float16 or bfloat16


def configs(models: Models, options: ProfileOptions) -> list[Config]:
    k, alpha = options.num_draft_tokens, options.alpha
    found = [Config("generate()", "generate"), Config("specdec target-only", "specdec")]
    return found + [
        Config(f"specdec {n} k={k} α={alpha:g}", "specdec", n, alpha, False, k) for n in models.pairs
    ]


def summary(prof: profile, measurement: Run, wall_seconds: float, top: int) -> dict:
    """The profile of one run, per target pass where a count is (see the module docstring)."""
    averages = prof.key_averages()
    calls = {event.key: event.count for event in averages}
    passes = max(measurement.target_passes, 1)

    def count(names: tuple[str, ...]) -> int:
        return sum(calls.get(name, 0) for name in names)

    def count_prefixed(prefixes: tuple[str, ...]) -> int:
        return sum(n for name, n in calls.items() if name.startswith(prefixes))

    on_cpu = [event for event in averages if event.device_type == DeviceType.CPU]
    on_device = [event for event in averages if event.device_type != DeviceType.CPU]
    op_cpu_us = sum(event.self_cpu_time_total for event in on_cpu)
    device_us = sum(event.self_device_time_total for event in on_device)
    ops = sorted(on_cpu, key=lambda event: event.self_cpu_time_total, reverse=True)[:top]
    return {
        "target_passes": measurement.target_passes,
        "tokens": len(measurement.token_ids[0]),
        "decode_ms_per_pass": 1e3 * measurement.seconds / passes,  # unprofiled, from the run itself
        "per_pass": {
            "kernel_launches": count(LAUNCHES) / passes,
            "graph_launches": count(GRAPH_LAUNCHES) / passes,
            "host_syncs": count(SYNCS) / passes,
            "device_to_host_copies": count_prefixed(("Memcpy DtoH",)) / passes,
            "host_reads": count(HOST_READS[:1]) / passes,  # item() calls _local_scalar_dense: counted once
            "copies": count(COPIES) / passes,
            "device_copies": count_prefixed(DEVICE_COPIES) / passes,
            "wall_ms": 1e3 * wall_seconds / passes,  # under the profiler: its own overhead included
            "op_cpu_ms": op_cpu_us / 1e3 / passes,  # time inside ops and runtime calls, not Python between
            "device_ms": device_us / 1e3 / passes,  # kernels running
        },
        "device_busy": device_us / 1e6 / wall_seconds if wall_seconds else 0.0,
        "top_ops": [
            {
                "op": event.key,
                "calls_per_pass": event.count / passes,
                "self_cpu_ms_per_pass": event.self_cpu_time_total / 1e3 / passes,
                "device_ms_per_pass": event.device_time_total / 1e3 / passes,
            }
            for event in ops
        ],
    }


def profile_run(
    models: Models, config: Config, clip: Clip, tokens: int, trace: Path, top: int
) -> tuple[dict, tuple]:
    """One run of `config` under the profiler: its summary and output; its trace written (gzipped) to
    `trace`. An untimed run before it pays first-use costs (new shapes, allocations), a timed one gives the
    unprofiled decode time."""
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if models.device.type == "cuda" else [])]
    run(models, config, clip, tokens)
    timed = run(models, config, clip, tokens)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        profiled = run(models, config, clip, tokens)
        wall = time.perf_counter() - start
    found = summary(prof, timed, wall, top)
    plain = trace.with_suffix("")
    prof.export_chrome_trace(str(plain))
    with plain.open("rb") as source, gzip.open(trace, "wb") as target:
        shutil.copyfileobj(source, target)
    plain.unlink()
    found["trace"] = trace.name
    same = profiled.token_ids == timed.token_ids
    return found, timed.token_ids if same else ()  # () never equals generate()'s output


def _per(key: str, spec: str) -> tuple:
    """A column's key and spec: the per-pass figure `key`."""
    return lambda row: row["per_pass"][key], spec


def table(rows: dict[str, dict]) -> str:
    columns = [
        ("per target pass", "name", "<34"), ("passes", "target_passes", ">7"),
        ("launch", *_per("kernel_launches", ">8.0f")), ("graphs", *_per("graph_launches", ">7.1f")),
        ("syncs", *_per("host_syncs", ">7.1f")), ("DtoH", *_per("device_to_host_copies", ">6.1f")),
        ("reads", *_per("host_reads", ">7.1f")), ("copies", *_per("copies", ">7.0f")),
        ("wall ms", *_per("wall_ms", ">9.2f")), ("op cpu", *_per("op_cpu_ms", ">8.2f")),
        ("device", *_per("device_ms", ">8.2f")), ("busy", "device_busy", ">6.0%"),
        ("ms*", "decode_ms_per_pass", ">7.2f"),
    ]  # fmt: skip
    found = harness.table([{"name": name, **row} for name, row in rows.items()], columns)
    return found + "\nms*: decode milliseconds per pass of the same run unprofiled; busy: device time / wall"


def top_table(name: str, row: dict) -> str:
    lines = [f"{name}: top ops by self CPU time, per target pass"]
    lines += [
        f"  {op['op'][:58]:<58}{op['calls_per_pass']:>8.1f} calls{op['self_cpu_ms_per_pass']:>9.3f} ms"
        f"{op['device_ms_per_pass']:>9.3f} ms on device"
        for op in row["top_ops"]
    ]
    return "\n".join(lines)


def run_and_report(options: ProfileOptions, out_dir: Path, command: str) -> dict:
    """Profile every configuration, print the tables, write profile.json and the traces to out_dir."""
    record = Record(command, options)
    models = Models(options.size, options.seed, options.cache_dir, options.device, options.dtype)
    (clip,) = models.clips(sorted(ASSETS.glob("*.wav"))[:1])
    tokens = options.max_new_tokens
    alone = run(models, Config("specdec target-only", "specdec"), clip, tokens).results[0]
    models.make_plans(
        clip, alone, (options.alpha,), options.seed
    )  # the target's tokens, to plant agreement on
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, outputs = {}, {}
    for index, config in enumerate(configs(models, options)):
        trace = out_dir / f"trace-{index}-{_slug(config.name)}.json.gz"
        rows[config.name], outputs[config.name] = profile_run(
            models, config, clip, tokens, trace, options.top
        )
    for name, row in rows.items():
        row["identical"] = outputs[name] == outputs["generate()"]
    print(table(rows))
    for name, row in rows.items():
        print(f"\n{top_table(name, row)}")
    record.update(clip=clip.name, rows=rows, identical=all(row["identical"] for row in rows.values()))
    record.write(out_dir / "profile.json")
    print(f"and {len(rows)} traces")
    return record


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.replace("α=", "a")).strip("-").lower()
