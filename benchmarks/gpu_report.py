"""The GPU record's report (`python -m benchmarks gpu`): the record written as each phase of
`benchmarks.gpu` ends, rows of other dtypes from an earlier run on the same device kept, the table and the
goals (docs/benchmarks.md, "On a GPU")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import gpu
from benchmarks.common import goal, machine, print_goals, report_header, write_json
from benchmarks.gpu import GpuBench, GpuBenchOptions
from specdec.whisper.models import DraftKind


def device_name(device: str) -> str:
    """The device the record was measured on, by name."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu: {machine()['cpu']}"


def _add(report: dict, rows: list[dict], bench: GpuBench, path: Path, started: float) -> None:
    """Rows into the report, printed, and the record written again."""
    print(table(rows), flush=True)
    report["rows"] += rows
    report["identical"] = all(row["identical"] for row in report["rows"])
    report["goals"] = goals(report["rows"])
    report["compiled"], report["errors"] = bench.compiled, bench.errors
    report["wall_seconds"] = time.perf_counter() - started
    write_json(report, path)


def kept_rows(path: Path, device: str, options: GpuBenchOptions) -> list[dict]:
    """The rows of an earlier record at `path` on the same device whose dtype this run does not measure."""
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    if earlier.get("device") != device:
        return []
    return [row for row in earlier.get("rows", []) if row["dtype"] not in options.dtypes]


def goals(rows: list[dict]) -> list[dict]:
    """The GPU goals at batch 1 (float16 where measured, else the first dtype), batch 8 for pass cost."""
    dtype = (
        "float16" if any(row["dtype"] == "float16" for row in rows) else rows[0]["dtype"] if rows else None
    )
    mine = [row for row in rows if row["dtype"] == dtype]

    def seconds(batch: int, predicate: Callable[[dict], bool]) -> float | None:
        found = [row["decode_seconds"] for row in mine if row["batch"] == batch and predicate(row)]
        return min(found) if found else None  # replayed where measured: the faster of eager and replayed

    def ratio(numerator: float | None, denominator: float | None) -> float | None:
        return None if numerator is None or denominator is None else numerator / denominator

    target_alone = seconds(1, lambda r: r["engine"] == "specdec" and r["draft"] is None)
    generated = seconds(1, lambda r: r["engine"] == "generate")
    transformers_best = seconds(1, lambda r: r["engine"] in ("static", "assisted"))
    found = []
    for kind, label in (
        (DraftKind.SEPARATE_OTHER_VOCAB, "tiny-size"),
        (DraftKind.SHARED_ENCODER, "distil-size"),
    ):
        ours = seconds(1, lambda r, kind=kind: _planted(r) and r["draft_kind"] == kind.value)
        found.append(
            goal(f"speculative ({label}) over generate(), {dtype}", ratio(generated, ours), ">=", 5.0)
        )
        found.append(
            goal(f"speculative ({label}) over our target alone", ratio(target_alone, ours), ">=", 2.0)
        )
        found.append(
            goal(
                f"speculative ({label}) over the faster of static+compile and assisted",
                ratio(transformers_best, ours), ">=", 1.5,
            )
        )  # fmt: skip
    eight = seconds(8, lambda r: r["engine"] == "specdec" and r["draft"] is None)
    found.append(
        goal("batch 8 pass cost over batch 1 (target alone), at most", ratio(eight, target_alone), "<", 1.5)
    )
    return found


def table(rows: list[dict]) -> str:
    header = f"{'dtype':<9}{'batch':>5}  {'configuration':<44}{'decode s':>9}{'x gen':>7}{'passes':>7}  same"
    lines = [header, "-" * len(header)]
    for row in rows:
        same = "yes" if row["identical"] else f"NO: rows {row['mismatched_rows']}"
        lines.append(
            f"{row['dtype']:<9}{row['batch']:>5}  {row['config']:<44}{row['decode_seconds']:>9.3f}"
            f"{row['decode_speedup_vs_generate']:>7.2f}{row['target_passes']:>7}  {same}"
        )
    return "\n".join(lines)


def run_and_report(options: GpuBenchOptions, out: Path, command: str) -> dict:
    """Measure every dtype and batch size, writing the record after each; print the table and goals."""
    started = time.perf_counter()
    path = out if out.suffix == ".json" else out / Path(GpuBenchOptions.OUT).name
    report = {
        **report_header(command, options),
        "device": device_name(options.device),
        "replay_available": gpu.replay is not None,
        "rows": kept_rows(path, device_name(options.device), options) if options.keep else [],
        "identical": True,
    }
    for dtype in options.dtypes:
        bench = GpuBench(options, dtype)
        # ours and generate() at every batch size first, then the static cache compiled (the slowest to
        # start, and read by one goal only)
        for batch in options.batch_sizes:
            for rows in bench.measure(batch):
                _add(report, rows, bench, path, started)
        for batch in options.batch_sizes:
            _add(report, bench.measure_static(batch), bench, path, started)
        del bench
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print_goals(report["goals"])
    mismatched = [
        f"{r['config']} {r['dtype']} batch {r['batch']}" for r in report["rows"] if not r["identical"]
    ]
    if mismatched:
        print(f"\n!!! OUTPUT DIFFERS FROM generate() in: {', '.join(mismatched)}")
    else:
        print(f"\nevery row of {len(report['rows'])} configurations equals generate()'s, token for token")
    print(f"wrote {path} ({report['wall_seconds']:.0f} s)")
    return report


def _planted(row: dict) -> bool:
    """Our speculative decoding at planted agreement (the goals' configuration)."""
    return row["engine"] == "specdec" and row["planted_alpha"] is not None
