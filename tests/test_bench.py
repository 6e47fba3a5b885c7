"""The benchmark's honesty: controlled acceptance leaves the output unchanged and delivers the planned α.

Runs on the demo checkpoints (seconds). Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.controlled import controlled, judged, make_plan, plan_from, planted
from benchmarks.harness import leviathan_bound
from benchmarks.ways import BenchOptions, run_and_report
from specdec.api import SpeculativeWhisper
from specdec.engine import kernels
from specdec.engine.draft_length import AdaptiveDraftLength, StepFacts
from specdec.options import DecodeOptions, TranscribeOptions

MAX_NEW_TOKENS = 24
ALPHAS = (0.0, 0.7, 1.0)


def _clips() -> list[np.ndarray]:
    """One short noise clip: the demo target decodes it in three windows (it emits timestamp pairs)."""
    rng = np.random.default_rng(3)
    return [(0.1 * rng.standard_normal(2 * 16_000)).astype(np.float32)]


def _generate_ids(whisper: SpeculativeWhisper, waveform: np.ndarray, options: DecodeOptions) -> list[int]:
    target = whisper.pair.target
    features = target.processor.feature_extractor(waveform, sampling_rate=16_000, return_tensors="pt")
    with torch.inference_mode():
        output = target.model.generate(
            features.input_features, language=options.language, max_new_tokens=options.max_new_tokens
        )
    sequence = output[0].tolist()
    eos = target.model.generation_config.eos_token_id
    while sequence and sequence[-1] == eos:
        sequence.pop()
    return sequence


def test_make_plan_is_deterministic_and_near_alpha():
    tokens = [list(range(1500)), list(range(500))]
    plan = make_plan(tokens, 0.8, seed=5)
    assert plan == make_plan(tokens, 0.8, seed=5)
    assert plan != make_plan(tokens, 0.8, seed=6)
    assert [len(window) for window in plan.agree] == [1500, 500]
    assert abs(plan.planned_rate - 0.8) < 0.03
    assert make_plan(tokens, 1.0).planned_rate == 1.0 and make_plan(tokens, 0.0).planned_rate == 0.0
    with pytest.raises(ValueError):
        make_plan(tokens, 1.5)


@pytest.mark.parametrize("pair_name", ["separate_pair", "shared_pair"])
def test_controlled_acceptance_keeps_output_and_follows_plan(request, pair_name):
    whisper: SpeculativeWhisper = request.getfixturevalue(pair_name)
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS, num_draft_tokens=3)
    outcomes_by_alpha: dict[float, list[bool]] = {alpha: [] for alpha in ALPHAS}
    for seed, waveform in enumerate(_clips()):
        (alone,) = whisper.transcribe_waveforms([waveform], TranscribeOptions.of(options, speculative=False))
        baseline = alone.result
        expected = _generate_ids(whisper, waveform, options)
        assert list(baseline.token_ids) == expected
        for alpha in ALPHAS:
            plan = plan_from(baseline, alpha, seed=seed)
            make_drafter = controlled(whisper.pair, [plan])  # an ordinary drafter in front of the draft model
            result = whisper.transcribe_waveforms([waveform], planted(options), make_drafter=make_drafter)
            result = result[0].result
            assert list(result.token_ids) == expected, f"alpha {alpha}: output differs from generate()"
            if alpha == 1.0:  # a planted proposal is sure: k or more drafted a pass, up to the budget's end
                drafted = [len(step.drafted) for step in result.steps if step.drafted]
                assert len(drafted) > 1 and min(drafted[:-1]) >= options.num_draft_tokens, drafted
            examined = judged(result)
            # the target judged exactly the plan: accepted where it agrees, rejected where it does not
            assert [ok for *_, ok in examined] == [plan.agree[w][p] for w, p, _ in examined]
            outcomes_by_alpha[alpha] += [ok for *_, ok in examined]
    for alpha, outcomes in outcomes_by_alpha.items():
        measured = sum(outcomes) / len(outcomes)
        assert abs(measured - alpha) < 0.2, f"measured per-token acceptance {measured:.2f} for alpha {alpha}"
    assert 0 < sum(outcomes_by_alpha[0.7]) < len(outcomes_by_alpha[0.7]), "both accepted and rejected drafts"


def test_packed_kernels_match_stock_linear_stay_inside_the_loop_and_unpack():
    layer = torch.nn.Linear(64, 96)
    model = torch.nn.ModuleDict({"decoder": torch.nn.Sequential(layer)})
    x = torch.randn(1, 6, 64)
    stock = layer(x)
    assert kernels.pack(model) in (0, 1)
    assert torch.equal(layer(x), stock), "outside active() a packed layer is the stock one"
    with torch.inference_mode(), kernels.active():
        packed = layer(x)
    torch.testing.assert_close(packed, stock, rtol=1e-5, atol=1e-5)
    kernels.unpack(model)
    assert type(layer) is torch.nn.Linear and not kernels.is_packed(model)


def test_adaptive_pauses_a_useless_draft_and_resumes():
    options = DecodeOptions(adaptive=True, num_draft_tokens=1)
    rows = [SimpleNamespace(budget=100, options=options)]  # a test double for a row: its budget and options
    policy = AdaptiveDraftLength()
    policy.add(rows)

    def step(n_accepted: int) -> int:
        """One step: the policy's k, and what was accepted of a draft of that length."""
        (k,) = policy.choose(rows, [1])
        policy.observe(StepFacts([k], [min(n_accepted, k)], 0, 0.0, 0, 0.0))
        return k

    drafted_at = [index for index in range(40) if step(n_accepted=0)]
    assert drafted_at[:5] == [0, 2, 5, 10, 19] and len(drafted_at) == 6  # pauses 1, 2, 4, 8, 16, 16
    while not step(n_accepted=1):  # the pauses run out, and one accepted token ends them
        pass
    assert policy.backoff == [0] and policy.paused == [0] and policy.choose(rows, [1]) == [2]


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_bench_small_preset_runs_every_configuration_with_generates_output(
    benchmark_checkpoints, tmp_path, capsys
):
    options = BenchOptions(
        size="small", quick=True, alphas=(0.8,), max_new_tokens=6, repeats=1, cache_dir=benchmark_checkpoints
    )
    report = run_and_report(options, tmp_path / "out", "python -m benchmarks tokens --quick")
    rows = {row["config"]: row for row in report["rows"]}
    assert {"generate()", "specdec target-only", "assisted draft-shared k=5 α=0.8"} <= rows.keys()
    assert all(row["identical"] for row in rows.values())
    controlled = rows["specdec draft-shared k=5 α=0.8"]
    assert controlled["bound"] > 0 and controlled["cost_ratio"] > 0 and 0 <= controlled["alpha"] <= 1
    assert "assisted" not in " ".join(r for r in rows if "draft-separate" in r), (
        "other vocabulary: no assisted"
    )
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["goals"]
    assert (tmp_path / "out" / "bench.html").stat().st_size > 1000
    assert "configuration" in capsys.readouterr().out


def test_leviathan_bound():
    assert leviathan_bound(0.0, 5, 0.0) == 1.0
    assert leviathan_bound(1.0, 4, 0.0) == 5.0
    assert abs(leviathan_bound(0.8, 5, 0.1) - (1 - 0.8**6) / (0.2 * 1.5)) < 1e-12
