"""The batch benchmark's honesty: per-row controlled acceptance leaves every row's output unchanged and
delivers each row's own plan, and the batch-scaling table is produced.

Runs on the demo checkpoints (seconds). Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.controlled import judged
from benchmarks.ways import BatchBenchOptions, Way, Ways

MAX_NEW_TOKENS = 20
BATCH = 7  # rows 5 and 6 are clips 0 and 1 again, each with its own plan


@pytest.fixture(scope="module")
def models_dir(benchmark_checkpoints):
    return benchmark_checkpoints


@pytest.fixture(scope="module")
def bench(models_dir) -> Ways:
    options = BatchBenchOptions(
        size="small",
        batch_sizes=(1, BATCH),
        alphas=(0.7,),
        max_new_tokens=MAX_NEW_TOKENS,
        cache_dir=models_dir,
    )
    return Ways(options, "float32", log=lambda _: None)


@pytest.mark.parametrize(
    ("draft", "cost_aware"),
    [("draft-separate", False), ("draft-shared", True)],  # the CLI test below runs draft-shared fixed
    ids=["separate", "shared-cost-aware"],
)
def test_each_row_follows_its_own_plan_and_keeps_its_output(bench, draft, cost_aware):
    (group,) = bench.groups[BATCH]
    alone = bench.run_group(Way("target alone", "specdec"), group)
    controlled = bench.run_group(Way(draft, "specdec", draft, 0.7, cost_aware=cost_aware), group)
    lengths = set()
    for i, (result, reference) in enumerate(zip(controlled.results, alone.results, strict=True)):
        assert result.token_ids == reference.token_ids == bench.alone[bench.row_clips[i].name].token_ids
        plan = bench.plans[0.7][i]
        examined = judged(result)
        assert examined, f"row {i} judged no draft token"
        assert [accepted for _, _, accepted in examined] == [plan.agree[w][p] for w, p, _ in examined]
        lengths.add(len(result.steps))
    assert len(lengths) > 1, "rows should finish after different numbers of steps (rows leave the batch)"
    # the same clip in two rows, two seeds: two different acceptance patterns
    assert bench.row_clips[0] is bench.row_clips[5]
    assert judged(controlled.results[0]) != judged(controlled.results[5])


def test_row_plans_are_seeded_per_row(bench):
    rates = [plan.planned_rate for plan in bench.plans[0.7]]
    assert len(set(rates)) > 1  # seeded per row
    assert all(0.3 < rate < 1.0 for rate in rates)


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_cli_bench_batch_writes_the_table_and_report(models_dir, tmp_path, capsys):
    code = main(
        [
            "batch", "--size", "small", "--quick", "--batch-sizes", "1", "2",
            "--max-new-tokens", "6", "--cache-dir", str(models_dir), "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "batch  configuration" in printed and "every row of 6 configurations equals" in printed
    report = json.loads((tmp_path / "batch.json").read_text())
    assert {(row["config"], row["batch"]) for row in report["rows"]} == {
        (name, size)
        for name in ("target alone", "draft-shared k=5", "draft-shared cost-aware")  # quick: distil-like
        for size in (1, 2)
    }
    for row in report["rows"]:
        assert row["mismatched_rows"] == [] and row["mismatched_alone"] == []
        assert row["tokens"] > 0 and row["target_passes"] > 0
        assert ("alpha" in row) == (row["draft"] is not None)
    assert [goal["met"] for goal in report["goals"]] == [None] * 8  # batch 8 and 16 not run
    assert (tmp_path / "batch.html").exists()
