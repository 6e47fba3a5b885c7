"""The long-clip benchmark's honesty: the made clip has the asked length, every chunk's draft follows its
own plan while the output stays the target's, and the report says whether everything matched.

Runs on the demo checkpoints (seconds). Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.controlled import judged
from benchmarks.long import LongBench, LongBenchOptions, long_clip
from specdec.audio import SAMPLE_RATE


def test_long_clip_is_the_assets_cycled_to_the_asked_length():
    clip = long_clip(1.5)
    assert len(clip) == round(1.5 * 60 * SAMPLE_RATE)
    assert clip.dtype.name == "float32"
    second_half = clip[len(clip) // 2 :]
    assert abs(second_half).max() > 0.01  # the assets come round again, not silence


@pytest.fixture(scope="module")
def bench(benchmark_checkpoints) -> LongBench:
    options = LongBenchOptions(
        size="small",
        minutes=1.2,  # 4 chunks
        alpha=0.7,
        max_new_tokens=12,
        batch_size=3,  # two batches: each gets its own plans
        cache_dir=benchmark_checkpoints,
    )
    return LongBench(options, log=lambda _: None)


def test_every_chunk_follows_its_plan_and_keeps_the_target_output(bench):
    assert len(bench.chunks) == 4
    baseline, speculative = bench.run(speculative=False), bench.run(speculative=True)
    assert [r.token_ids for r in speculative.results] == [r.token_ids for r in baseline.results]
    assert speculative.merged_ids == baseline.merged_ids and baseline.merged_ids
    for result, plan in zip(speculative.results, bench.plans, strict=True):
        examined = judged(result)
        assert examined
        assert [accepted for *_, accepted in examined] == [plan.agree[w][p] for w, p, _ in examined]
    assert speculative.target_passes < baseline.target_passes


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_cli_report(benchmark_checkpoints, tmp_path, capsys):
    code = main(
        [
            "long", "--size", "small", "--minutes", "0.8", "--max-new-tokens", "6",
            "--rounds", "1", "--cache-dir", str(benchmark_checkpoints), "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    assert code == 0
    assert "decode speedup" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "long.json").read_text())
    assert report["merged_identical"] and report["mismatched_chunks"] == []
    assert report["chunks"] == 2 and report["tokens"] > 0
    assert report["options"]["alpha"] == 0.8 and report["audio_seconds"] == pytest.approx(48.0)
