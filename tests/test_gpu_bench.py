"""The GPU run's benchmarks, tried on the CPU: the profile's counts.

Timings are never asserted: they are benchmark figures. What runs only on CUDA (kernel launches, host
syncs, the compiled static-cache generate(), replay itself) is checked through its bookkeeping here.
"""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from benchmarks import profile as profiling
from benchmarks.__main__ import main
from benchmarks.tokens import Measurement


def _event(
    key: str, count: int, device: DeviceType = DeviceType.CPU, self_cpu_us: float = 0.0, device_us=0.0
):
    return SimpleNamespace(
        key=key, count=count, device_type=device, self_cpu_time_total=self_cpu_us,
        self_device_time_total=device_us, device_time_total=device_us,
    )  # fmt: skip


def test_profile_summary_counts_launches_syncs_and_copies_per_pass():
    events = [
        _event("cudaLaunchKernel", 40, self_cpu_us=400.0),
        _event("cuLaunchKernel", 8, self_cpu_us=80.0),
        _event("cudaGraphLaunch", 2, self_cpu_us=20.0),
        _event("cudaStreamSynchronize", 4, self_cpu_us=1000.0),
        _event("aten::_local_scalar_dense", 4, self_cpu_us=50.0),
        _event("aten::item", 4, self_cpu_us=10.0),  # calls _local_scalar_dense: not counted twice
        _event("aten::copy_", 6, self_cpu_us=30.0),
        _event("Memcpy DtoH (Device -> Pageable)", 4, DeviceType.CUDA, device_us=8.0),
        _event("Memcpy HtoD (Pageable -> Device)", 2, DeviceType.CUDA, device_us=4.0),
        _event("ampere_sgemm", 40, DeviceType.CUDA, device_us=3988.0),
    ]
    prof = SimpleNamespace(key_averages=lambda: events)
    measurement = Measurement(seconds=[0.01], token_ids=(1, 2, 3, 4), target_passes=2)
    found = profiling.summary(prof, measurement, wall_seconds=0.008, top=3)
    per = found["per_pass"]
    assert per["kernel_launches"] == 24 and per["graph_launches"] == 1
    assert per["host_syncs"] == 2 and per["host_reads"] == 2 and per["device_to_host_copies"] == 2
    assert per["copies"] == 3 and per["device_copies"] == 3
    assert per["device_ms"] == pytest.approx(2.0) and per["op_cpu_ms"] == pytest.approx(0.795)
    assert found["device_busy"] == pytest.approx(0.5) and found["decode_ms_per_pass"] == pytest.approx(5.0)
    assert [op["op"] for op in found["top_ops"]] == [
        "cudaStreamSynchronize",
        "cudaLaunchKernel",
        "cuLaunchKernel",
    ]


def test_profile_on_the_cpu(benchmark_checkpoints, tmp_path, capsys):
    out = tmp_path / "profile"
    argv = ["profile", "--size", "small", "--max-new-tokens", "8", "--cache-dir", str(benchmark_checkpoints)]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads((out / "profile.json").read_text())
    rows = report["rows"]
    drafts = [f"specdec {draft} k=5 α=0.8" for draft in ("draft-separate", "draft-shared")]
    assert list(rows) == ["generate()", "specdec target-only", *drafts]
    assert report["identical"] and all(row["identical"] for row in rows.values())
    for row in rows.values():
        assert row["per_pass"]["kernel_launches"] == 0 and row["per_pass"]["host_syncs"] == 0  # a CPU's
        assert 0 < len(row["top_ops"]) <= 15 and row["per_pass"]["op_cpu_ms"] > 0
        with gzip.open(out / row["trace"]) as trace:
            assert json.load(trace)["traceEvents"]
    assert (
        rows["specdec draft-shared k=5 α=0.8"]["target_passes"] < rows["specdec target-only"]["target_passes"]
    )
    assert "top ops by self CPU time" in capsys.readouterr().out
