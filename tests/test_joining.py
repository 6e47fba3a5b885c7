"""Clips joining a running batch (`engine.windows.WindowBatch`, what serving many requests at once is built
on): every clip's output is its output decoded alone, whoever it shared passes with and whenever it joined.

The clips differ in language, length, options (timestamps, a forced language, sampling) and in whether they
speculate; each joins at another step of the others' decoding, and one is dropped half-way (a cancelled
request) without changing the rest. Every draft kind is covered (shared encoder, a separate encoder with
its own vocabulary, and with the target's).

A seeded sampled clip that speculates keeps the target's distribution in a batch but not its very samples:
the CPU draft's int8 layers quantise their input per batch, so what it proposes (and the random numbers its
proposals use) depends on the rows beside it. Its sampled row here is the target alone's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pytest
from test_batching import BATCH

from specdec.engine.clip_decoding import ClipDecoding, make_generator
from specdec.engine.windows import WindowBatch
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.whisper.features import pair_features

GREEDY = DecodeOptions(max_new_tokens=24)
# (clip, options, speculative, the step of the running batch at which it joins)
ARRIVALS = [
    ("en-weather", GREEDY, True, 0),
    ("de-bahnhof", dataclasses.replace(GREEDY, timestamps=True), True, 2),
    ("noise-2s", GREEDY, False, 3),
    ("es-biblioteca", dataclasses.replace(GREEDY, language="es"), True, 5),
    ("bursts-9s", dataclasses.replace(GREEDY, temperature=0.8, seed=3), False, 6),
]


def clip_decoding(
    whisper, name: str, options: DecodeOptions, speculative: bool, audio: Mapping[str, np.ndarray] = BATCH
) -> ClipDecoding:
    features = pair_features(whisper.pair, audio[name], speculative)
    generator = make_generator(options, whisper.pair.target.model.device)
    return ClipDecoding(features, generator, options, speculative)


def alone(whisper, name: str, options: DecodeOptions, speculative: bool) -> tuple[int, ...]:
    return whisper.transcribe_waveforms(
        [BATCH[name]], TranscribeOptions.of(options, speculative=speculative)
    )[0].token_ids


def run_arrivals(
    whisper, arrivals, drop: str | None = None, drop_at: int = 0, audio: Mapping[str, np.ndarray] = BATCH
) -> dict[str, ClipDecoding]:
    """Each clip (its waveform: audio[name]) joins at its step; `drop` leaves at step drop_at. Runs until
    every clip is done."""
    batch = WindowBatch(whisper.pair)
    clips, step = {}, 0
    while step == 0 or batch.busy or len(clips) < len(arrivals):
        for name, options, speculative, at in arrivals:
            if at == step:
                clips[name] = clip_decoding(whisper, name, options, speculative, audio)
                batch.join([clips[name]])
        if drop is not None and step == drop_at:
            batch.drop(clips[drop])
        batch.step()
        step += 1
    return clips


def test_clips_joining_at_any_step_decode_as_alone(pair_of_each_kind):
    _, whisper = pair_of_each_kind
    clips = run_arrivals(whisper, ARRIVALS)
    config = whisper.pair.target.model.generation_config
    shared_passes = 0
    for name, options, speculative, _ in ARRIVALS:
        result = clips[name].result(config)
        assert result.token_ids == alone(whisper, name, options, speculative), f"{name} differs from alone"
        shared_passes += sum(1 for one in result.passes if one.rows > 1)
        if not speculative:
            assert not any(step.drafted for step in result.steps), f"{name} asked for the target alone"
    assert shared_passes > 10, "the clips shared passes"
    steps = [step for name, *_ in ARRIVALS for step in clips[name].result(config).steps if step.drafted]
    assert any(step.n_accepted == len(step.drafted) for step in steps), "some drafts accepted whole"
    assert any(step.n_accepted < len(step.drafted) for step in steps), "some drafts rejected"


@pytest.mark.parametrize("first_speculates", [False, True])
def test_the_draft_starts_when_a_row_that_drafts_joins(separate_pair, first_speculates):
    """A batch that began with the target alone gets its drafter when a speculative clip joins (blank draft
    rows for those already there); the outputs stay those alone either way."""
    arrivals = [
        ("de-bahnhof", GREEDY, first_speculates, 0),
        ("en-weather", GREEDY, True, 2),
        ("noise-2s", GREEDY, True, 3),
    ]
    clips = run_arrivals(separate_pair, arrivals)
    config = separate_pair.pair.target.model.generation_config
    for name, options, speculative, _ in arrivals:
        assert clips[name].result(config).token_ids == alone(separate_pair, name, options, speculative)
    assert any(step.drafted for step in clips["en-weather"].result(config).steps)


def test_a_dropped_clip_leaves_and_the_others_decode_as_alone(shared_pair):
    clips = run_arrivals(shared_pair, ARRIVALS[:3], drop="de-bahnhof", drop_at=4)
    config = shared_pair.pair.target.model.generation_config
    dropped = clips["de-bahnhof"].result(config)
    assert clips["de-bahnhof"].done and len(dropped.steps) < len(alone(shared_pair, *ARRIVALS[1][:3]))
    for name, options, speculative, _ in (ARRIVALS[0], ARRIVALS[2]):
        assert clips[name].result(config).token_ids == alone(shared_pair, name, options, speculative)
