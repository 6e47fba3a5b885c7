"""The benchmark's honesty: controlled acceptance leaves the output unchanged and delivers the planned α.

Runs on the demo checkpoints (seconds). Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.controlled import controlled_draft, make_plan, plan_from
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.transcriber import SpeculativeWhisper

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


def _examined(result: DecodeResult) -> list[tuple[int, int, bool]]:
    """(window, generated position, accepted) for every draft token the target judged, in order."""
    examined, window, position = [], 0, 0
    for step in result.steps:
        if step.window != window:
            window, position = step.window, 0
        examined += [(window, position + i, True) for i in range(step.n_accepted)]
        if step.n_accepted < len(step.drafted):
            examined.append((window, position + step.n_accepted, False))
        position += step.n_accepted + 1
    return examined


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
    judged: dict[float, list[bool]] = {alpha: [] for alpha in ALPHAS}
    for seed, waveform in enumerate(_clips()):
        baseline = whisper.transcribe_waveform(waveform, options, speculative=False).result
        expected = _generate_ids(whisper, waveform, options)
        assert list(baseline.token_ids) == expected
        for alpha in ALPHAS:
            plan = plan_from(baseline, alpha, seed=seed)
            with controlled_draft(whisper.pair, len(baseline.prompt_ids)) as controlled:
                controlled.set_plan(plan)
                result = whisper.transcribe_waveform(waveform, options).result
            assert list(result.token_ids) == expected, f"alpha {alpha}: output differs from generate()"
            examined = _examined(result)
            # the target judged exactly the plan: accepted where it agrees, rejected where it does not
            assert [ok for *_, ok in examined] == [plan.agree[w][p] for w, p, _ in examined]
            judged[alpha] += [ok for *_, ok in examined]
    for alpha, outcomes in judged.items():
        measured = sum(outcomes) / len(outcomes)
        assert abs(measured - alpha) < 0.2, f"measured per-token acceptance {measured:.2f} for alpha {alpha}"
    assert 0 < sum(judged[0.7]) < len(judged[0.7]), "both accepted and rejected drafts"


def test_without_plan_the_hook_changes_nothing(separate_pair):
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS)
    waveform = _clips()[0]
    plain = separate_pair.transcribe_waveform(waveform, options).result
    with controlled_draft(separate_pair.pair, len(plain.prompt_ids)) as controlled:
        controlled.set_plan(None)
        hooked = separate_pair.transcribe_waveform(waveform, options).result
    assert [s.drafted for s in hooked.steps] == [s.drafted for s in plain.steps]
