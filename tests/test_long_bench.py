"""The long-clip benchmark's honesty: the made clip has the asked length, every chunk's draft follows its
own plan while the output stays the target's, and the report says whether everything matched.

Runs on the demo checkpoints (seconds). Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.controlled import judged
from benchmarks.ways import LongBenchOptions, Way, Ways, long_clip
from specdec.audio import SAMPLE_RATE


def test_long_clip_is_the_assets_cycled_to_the_asked_length():
    clip = long_clip(1.5)
    assert len(clip) == round(1.5 * 60 * SAMPLE_RATE)
    assert clip.dtype.name == "float32"
    second_half = clip[len(clip) // 2 :]
    assert abs(second_half).max() > 0.01  # the assets come round again, not silence


@pytest.fixture(scope="module")
def bench(benchmark_checkpoints) -> Ways:
    options = LongBenchOptions(
        size="small",
        minutes=1.2,  # 4 chunks
        alphas=(0.7,),
        max_new_tokens=12,
        batch_sizes=(3,),  # two batches: each gets its own plans
        cache_dir=benchmark_checkpoints,
    )
    return Ways(options, "float32", log=lambda _: None)


def test_every_chunk_follows_its_plan_and_keeps_the_target_output(bench):
    assert len(bench.clips) == 4 and bench.groups[3] == [(0, 1, 2), (3,)]
    (alone, speculative) = bench.options.ways(bench.drafts, {}, 3, replayed=False)
    assert speculative == Way("draft-shared cost-aware", "specdec", "draft-shared", 0.7, cost_aware=True)
    baseline = [r for group in bench.groups[3] for r in bench.run_group(alone, group).results]
    drafted = [r for group in bench.groups[3] for r in bench.run_group(speculative, group).results]
    assert [r.token_ids for r in drafted] == [r.token_ids for r in baseline]
    assert [r.token_ids for r in baseline] == [r.token_ids for r in bench.alone.values()]
    for result, plan in zip(drafted, bench.plans[0.7], strict=True):
        examined = judged(result)
        assert examined
        assert [accepted for *_, accepted in examined] == [plan.agree[w][p] for w, p, _ in examined]
    assert sum(r.num_target_passes for r in drafted) < sum(r.num_target_passes for r in baseline)


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_cli_report(benchmark_checkpoints, tmp_path, capsys):
    code = main(
        [
            "long", "--size", "small", "--minutes", "0.8", "--max-new-tokens", "6",
            "--repeats", "1", "--cache-dir", str(benchmark_checkpoints), "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    assert code == 0
    assert "real_time_factor" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "long.json").read_text())
    assert report["identical"] and all(row["mismatched_alone"] == [] for row in report["rows"])
    assert report["chunks"] == 2 and all(row["tokens"] > 0 for row in report["rows"])
    assert report["options"]["alphas"] == [0.8] and report["audio_seconds"] == pytest.approx(48.0)
