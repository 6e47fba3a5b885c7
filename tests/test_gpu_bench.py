"""The GPU run's benchmarks, tried on the CPU: the profile's counts, the record's rows (with a stand-in for
the engine's replay), its goals, and the app check driven end to end on the demo models.

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
from benchmarks import serve
from benchmarks import ways as gpu
from benchmarks.__main__ import main
from benchmarks.runners import Run


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
    measurement = Run(seconds=0.01, first_pass_seconds=0.0, token_ids=((1, 2, 3, 4),), target_passes=2)
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


class StandInReplay:
    """`specdec.engine.replay`'s interface: every model it is given is 'replayed' (nothing changes); with
    `fail_after`, enabling more models than that raises, as a capture that fails would."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.enabled: list[object] = []
        self.fail_after = fail_after

    def enable(self, model) -> bool:
        if self.fail_after is not None and len(self.enabled) >= self.fail_after:
            raise RuntimeError("capture failed")
        self.enabled.append(model)
        return True

    def disable(self, model) -> None:
        if model in self.enabled:
            self.enabled.remove(model)


def test_record_rows_each_configuration_at_each_batch(benchmark_checkpoints, tmp_path, monkeypatch):
    replay = StandInReplay()
    monkeypatch.setattr(gpu, "replay", replay)
    options = gpu.GpuBenchOptions(
        size="small", batch_sizes=(1, 2), dtypes=("float32",), max_new_tokens=12, repeats=1,
        cache_dir=benchmark_checkpoints,
    )  # fmt: skip
    path = tmp_path / "record.json"
    report = gpu.run_and_report(options, path, "test")
    assert replay.enabled == []  # each model enabled was disabled again
    assert json.loads(path.read_text())["rows"] == report["rows"]
    assert report["device"].startswith("cpu") and report["identical"]
    by_batch = {
        batch: {row["config"]: row for row in report["rows"] if row["batch"] == batch} for batch in (1, 2)
    }
    planted = [f"specdec {draft} k=5 α=0.8 {mode}" for draft in ("draft-separate", "draft-shared")
               for mode in ("eager", "replayed")]  # fmt: skip
    alone = ["specdec target-only eager", "specdec target-only replayed"]
    assert set(by_batch[2]) == {"generate()", "generate() static", *alone, *planted}
    assert set(by_batch[1]) == set(by_batch[2]) | {
        "assisted draft-shared k=5 α=0.8",
        *(f"specdec {draft} adaptive {mode}" for draft in ("draft-separate", "draft-shared")
          for mode in ("eager", "replayed")),
    }  # fmt: skip
    for batch, rows in by_batch.items():
        assert rows["generate()"]["x_generate"] == 1.0
        assert rows["generate() static"]["compiled"] is False  # compiling is for CUDA
        for name, row in rows.items():
            assert row["identical"] and row["dtype"] == "float32" and row["decode_seconds"] > 0, name
            assert row["rows"] == (1 if row["engine"] == "assisted" else batch)
            assert row["mode"] == ("replayed" if name.endswith("replayed") else "eager")
        assert (
            rows["specdec draft-shared k=5 α=0.8 eager"]["target_passes"]
            < rows["generate()"]["target_passes"]
        )
    assert [goal["met"] is not None for goal in report["goals"]][-1] is False  # no batch 8: not measured

    # a second run of another dtype keeps these rows; a record of another device keeps none
    assert gpu.kept_rows(path, report["device"], gpu.GpuBenchOptions(dtypes=("float16",))) == report["rows"]
    assert gpu.kept_rows(path, report["device"], gpu.GpuBenchOptions(dtypes=("float32",))) == []
    assert gpu.kept_rows(path, "NVIDIA H100", gpu.GpuBenchOptions(dtypes=("float16",))) == []


def test_a_failed_compile_or_replay_leaves_the_other_rows(benchmark_checkpoints, monkeypatch):
    """Compiling and capturing happen only on CUDA, in one unattended run: a failure there is recorded and
    the run goes on (the static cache uncompiled; no replayed rows)."""
    replay = StandInReplay(fail_after=1)  # the target enables, the first draft's capture fails
    monkeypatch.setattr(gpu, "replay", replay)
    options = gpu.GpuBenchOptions(
        size="small", batch_sizes=(1,), dtypes=("float32",), max_new_tokens=6, repeats=1,
        cache_dir=benchmark_checkpoints,
    )  # fmt: skip
    bench = gpu.Ways(options, "float32", log=lambda _: None)
    bench.compiled = True  # as on CUDA; compiling then fails
    monkeypatch.setattr(bench, "_compiled", lambda: (_ for _ in ()).throw(RuntimeError("no compiler")))
    assert len(list(bench.measure(1))) == 1 and replay.enabled == []  # no replayed rows; all disabled
    (static,) = bench.measure_static(1)
    assert static["config"] == "generate() static" and static["identical"] and not static["compiled"]
    assert not bench.compiled
    assert bench.errors == [
        "replayed, batch 1: RuntimeError: capture failed", "torch.compile, batch 1: RuntimeError: no compiler"
    ]  # fmt: skip
    assert "forward" not in bench.models.target.model.__dict__


def _row(config: str, seconds: float, batch: int = 1, **fields) -> dict:
    return {
        "config": config, "batch": batch, "dtype": "float16", "decode_seconds": seconds, "engine": "specdec",
        "draft": None, "draft_kind": None, "planted_alpha": None, **fields,
    }  # fmt: skip


def test_goals_read_the_planted_rows_and_the_faster_of_each_mode():
    tiny = {"draft": "tiny", "draft_kind": "separate-other-vocabulary", "planted_alpha": 0.8}
    distil = {"draft": "distil-large-v3", "draft_kind": "shared-encoder"}
    rows = [
        _row("generate()", 2.0, engine="generate"),
        _row("generate() static+compile", 0.5, engine="static"),
        _row("assisted distil-large-v3", 0.9, engine="assisted", **distil, planted_alpha=0.8),
        _row("specdec target-only eager", 1.0),
        _row("specdec target-only replayed", 0.4),
        _row("specdec tiny planted eager", 0.6, **tiny),
        _row("specdec tiny planted replayed", 0.25, **tiny),
        _row("specdec tiny adaptive eager", 0.1, **tiny | {"planted_alpha": None}),  # not the goals' case
        _row("specdec target-only eager", 0.5, batch=8),
    ]
    found = {goal["goal"]: goal for goal in gpu.GpuBenchOptions().goals(rows)}
    assert found["speculative (tiny-size) over generate(), float16"]["value"] == pytest.approx(8.0)
    assert found["speculative (tiny-size) over our target alone"]["value"] == pytest.approx(1.6)
    assert found["speculative (tiny-size) over the faster of static+compile and assisted"]["value"] == 2.0
    assert found["speculative (distil-size) over generate(), float16"]["met"] is None  # only assisted ran
    assert found["batch 8 pass cost over batch 1 (target alone), at most"]["value"] == pytest.approx(1.25)


def test_the_compare_is_read_beside_the_record_replayed_where_it_has_it(tmp_path):
    record = tmp_path / "record.json"
    rows = [
        {
            "config": f"specdec {name} eager",
            "batch": 1,
            "dtype": "float16",
            "mode": "eager",
            "decode_seconds": seconds,
        }
        for name, seconds in (("target-only", 2.0), ("tiny adaptive", 1.0))
    ]
    record.write_text(json.dumps({"rows": rows}))
    assert serve.record_ratio(record, "tiny") == 2.0
    replayed = [
        {**row, "mode": "replayed", "config": row["config"].replace("eager", "replayed")} for row in rows
    ]
    replayed[1]["decode_seconds"] = 0.5
    record.write_text(json.dumps({"rows": rows + replayed}))
    assert serve.record_ratio(record, "tiny") == 4.0
    assert serve.record_ratio(record, "distil-large-v3") is None


@pytest.mark.slow
def test_app_check_drives_the_served_app(benchmark_checkpoints, tmp_path):
    options = serve.AppCheckOptions(size="small", clients=2, cache_dir=benchmark_checkpoints)
    report = serve.run_and_report(options, tmp_path, "test")
    assert report["identical"] and report["compare"]["identical"]
    assert report["compare"]["pair"] == "target ← draft-separate"
    assert report["compare"]["baseline_num_target_passes"] > 0 and report["compare"]["decode_speedup"] > 0
    assert report["transcription"]["text"] and report["transcription"]["target_passes"] > 0
    assert report["concurrent"]["clients"] == 2 and report["concurrent"]["identical"]
    assert [goal["met"] for goal in report["goals"]][1] is None  # no record given
    assert (tmp_path / "app.json").exists() and (tmp_path / "app-server.log").exists()
