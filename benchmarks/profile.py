"""`python -m benchmarks profile`: where a target pass's time goes, under `torch.profiler`.

A few passes of each way to decode one clip, once untimed, once timed, once profiled: per target pass the
launches, syncs, host reads and copies, CPU against device time, the top ops, and a Chrome trace of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.harness import ASSETS, LANGUAGE, Record
from benchmarks.runners import Models, Run
from benchmarks.ways import Way
from specdec.options import DecodeOptions

# per target pass: what is counted -> the events, as the profiler names them (CUDA runtime and driver calls
# are CPU-side events); a name ending in "*" counts every event whose name begins so
COUNTED = {
    "kernel_launches": ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"),
    "graph_launches": ("cudaGraphLaunch",),  # one launch that replays a captured graph's kernels
    "host_syncs": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"),
    "device_to_host_copies": ("Memcpy DtoH*",),
    "host_reads": ("aten::_local_scalar_dense",),  # a value read on the host; item() calls it: counted once
    "copies": ("aten::copy_", "aten::_to_copy"),
    "device_copies": ("Memcpy DtoH*", "Memcpy HtoD*", "Memcpy DtoD*"),  # the kernel-side copies
}


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


def summary(prof: profile, measurement: Run, wall_seconds: float, top: int) -> dict:
    """The profile of one run, per target pass where a count is (see the module docstring)."""
    averages, passes = prof.key_averages(), max(measurement.target_passes, 1)
    calls = {event.key: event.count for event in averages}

    def count(names: tuple[str, ...]) -> int:
        return sum(n for key, n in calls.items() for name in names
                   if key == name or name.endswith("*") and key.startswith(name[:-1]))  # fmt: skip

    on_cpu = [event for event in averages if event.device_type == DeviceType.CPU]
    device_us = sum(event.self_device_time_total for event in averages if event.device_type != DeviceType.CPU)
    ops = sorted(on_cpu, key=lambda event: event.self_cpu_time_total, reverse=True)[:top]
    return {
        "target_passes": measurement.target_passes,
        "tokens": len(measurement.token_ids[0]),
        "decode_ms_per_pass": 1e3 * measurement.seconds / passes,  # unprofiled, from the run itself
        "per_pass": {key: count(names) / passes for key, names in COUNTED.items()} | {
            "wall_ms": 1e3 * wall_seconds / passes,  # under the profiler: its own overhead included
            # time inside ops and runtime calls, not Python between them
            "op_cpu_ms": sum(event.self_cpu_time_total for event in on_cpu) / 1e3 / passes,
            "device_ms": device_us / 1e3 / passes,  # kernels running
        },
        "device_busy": device_us / 1e6 / wall_seconds if wall_seconds else 0.0,
        "top_ops": [{
            "op": event.key, "calls_per_pass": event.count / passes,
            "self_cpu_ms_per_pass": event.self_cpu_time_total / 1e3 / passes,
            "device_ms_per_pass": event.device_time_total / 1e3 / passes,
        } for event in ops],
    }  # fmt: skip


COLUMNS = [
    ("per target pass", "name", "<34"), ("passes", "target_passes", ">7"),
    ("launch", "kernel_launches", ">8.0f"), ("graphs", "graph_launches", ">7.1f"),
    ("syncs", "host_syncs", ">7.1f"), ("DtoH", "device_to_host_copies", ">6.1f"),
    ("reads", "host_reads", ">7.1f"), ("copies", "copies", ">7.0f"), ("wall ms", "wall_ms", ">9.2f"),
    ("op cpu", "op_cpu_ms", ">8.2f"), ("device", "device_ms", ">8.2f"), ("busy", "device_busy", ">6.0%"),
    ("ms*", "decode_ms_per_pass", ">7.2f"),
]  # fmt: skip


def run_and_report(options: ProfileOptions, out_dir: Path, command: str) -> dict:
    """Each way of decoding run untimed (first-use costs: new shapes, allocations), timed (the unprofiled
    decode time) and profiled: the tables, profile.json and each one's gzipped Chrome trace."""
    record, tokens = Record(command, options), options.max_new_tokens
    k, alpha = options.num_draft_tokens, options.alpha
    models = Models(options.size, options.seed, options.cache_dir, options.device, options.dtype)
    (clip,) = models.clips(sorted(ASSETS.glob("*.wav"))[:1])
    decoding = DecodeOptions(language=LANGUAGE, max_new_tokens=tokens, num_draft_tokens=k, adaptive=False)

    def decode(way: Way) -> Run:
        if way.engine == "generate":
            return models.generate([clip], tokens)
        return models.decode(way.draft, [clip], decoding, [clip.plans[alpha]] if way.draft else None)

    ways = [Way("generate()", "generate"), Way("specdec target-only", "specdec")]
    models.make_plans(clip, decode(ways[1]).results[0], (alpha,), options.seed)  # agreement planted on these
    ways += [Way(f"specdec {name} k={k} α={alpha:g}", "specdec", name, alpha) for name in models.pairs]
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if models.device.type == "cuda" else [])]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, expected = {}, ()  # generate()'s output, which comes first
    for index, way in enumerate(ways):
        decode(way)
        timed = decode(way)
        with profile(activities=activities) as prof:
            profiled, wall = harness.timed(lambda way=way: decode(way))
        rows[way.name] = row = summary(prof, timed, wall, options.top)
        slug = "".join(c if c.isalnum() else "-" for c in way.name.replace("α=", "a")).strip("-").lower()
        row["trace"] = f"trace-{index}-{slug}.json.gz"
        prof.export_chrome_trace(str(out_dir / row["trace"]))  # gzipped, by its name
        expected = timed.token_ids if way.engine == "generate" else expected
        row["identical"] = profiled.token_ids == timed.token_ids == expected  # the profiled run's too
    print(harness.table([{"name": name, **row, **row["per_pass"]} for name, row in rows.items()], COLUMNS))
    print("ms*: decode milliseconds per pass of the same run unprofiled; busy: device time / wall")
    for name, row in rows.items():
        print(f"\n{name}: top ops by self CPU time, per target pass")
        for op in row["top_ops"]:
            calls, ms, device = op["calls_per_pass"], op["self_cpu_ms_per_pass"], op["device_ms_per_pass"]
            print(f"  {op['op'][:58]:<58}{calls:>8.1f} calls{ms:>9.3f} ms{device:>9.3f} ms on device")
    record.update(clip=clip.name, rows=rows, identical=all(row["identical"] for row in rows.values()))
    record.write(out_dir / "profile.json")
    print(f"and {len(rows)} traces")
    return record
