"""What every benchmark shares: the report header (command, date, machine, options), JSON output, goals
and how they print, and Leviathan et al.'s speedup bound."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

VERDICTS = {True: "met", False: "MISSED", None: "not measured"}


def leviathan_bound(alpha: float, num_draft_tokens: int, cost_ratio: float) -> float:
    """Expected speedup of speculative decoding over the target alone (Leviathan et al. 2023, eq. 1)."""
    k = num_draft_tokens
    tokens_per_pass = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens_per_pass / (k * cost_ratio + 1)


def goal(name: str, value: float | None, relation: str, threshold: float) -> dict:
    """A goal with the measured figure (None: the run did not measure it)."""
    compare = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}[relation]
    met = None if value is None else compare(float(value), float(threshold))
    return {"goal": name, "value": value, "relation": relation, "threshold": threshold, "met": met}


def print_goals(goals: list[dict], digits: int = 2) -> None:
    for found in goals:
        value = "-" if found["value"] is None else f"{found['value']:.{digits}f}"
        verdict = VERDICTS[found["met"]]
        print(f"goal {found['goal']}: {value} ({found['relation']} {found['threshold']:g}) {verdict}")


def cell(value: float | None, width: int, spec: str) -> str:
    """A fixed-width table cell, '-' for a figure not measured."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{spec}}"


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


def report_header(command: str, options: object) -> dict:
    """The first fields of every benchmark's JSON: the command, when, on what, with which options."""
    return {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(options),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
    }


def machine(options: object | None = None) -> dict:
    """What the numbers were measured on."""
    import platform

    import torch
    import transformers

    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line
        ]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu,
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
