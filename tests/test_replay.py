"""Fixed-shape decoder steps (`engine.replay`) change no output.

The storage a replayed step needs (rows in power-of-two slots, the cache over the whole context, feeds
padded to captured widths) is the same with or without the capture, so on a CPU the fixed shapes run
uncaptured (`enable(model, capture=False)`): every decoding must give generate()'s tokens and those of
the steps of the feed's own shape, at batch 1, 4 and 8, as rows join and leave (the slots grow and shrink
between buckets), in long form, with timestamps, a prompt and language detection, for a separate draft
and the bundled real pair's lean self-draft. On CUDA (SPECDEC_TEST_DEVICE=cuda) the same tests run the
captured graphs, and one more compares them with the uncaptured steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TEST_DEVICE
from test_lossless import CLIPS, reference_ids

from specdec.api import SpeculativeWhisper
from specdec.audio import load_audio
from specdec.engine import replay
from specdec.engine.cache import CachedDecoder
from specdec.options import DecodeOptions, TranscribeOptions

ASSETS = Path(__file__).parent.parent / "assets"
CAPTURE = TEST_DEVICE.startswith("cuda")  # on a GPU the graphs themselves; elsewhere the shapes uncaptured


@contextlib.contextmanager
def replayed(whisper: SpeculativeWhisper, capture: bool = CAPTURE) -> Iterator[None]:
    """The pair's models decode in fixed shapes within the block (and as before after it: on CUDA the pair
    loaded with its steps captured)."""
    models = [whisper.pair.target.model] + ([whisper.pair.draft.model] if whisper.pair.draft else [])
    before = [replay.is_captured(model) if replay.is_enabled(model) else None for model in models]
    try:
        assert all(replay.enable(model, capture=capture) for model in models)
        yield
    finally:
        for model, captured in zip(models, before, strict=True):
            replay.disable(model)
            if captured is not None:
                replay.enable(model, capture=captured)


def decode(
    whisper: SpeculativeWhisper, clips: list[np.ndarray], options: TranscribeOptions
) -> list[list[int]]:
    return [list(found.token_ids) for found in whisper.transcribe_waveforms(clips, options)]


@pytest.mark.parametrize(
    ("batch_size", "speculative"), [(1, True), (4, True), (8, True), (4, False)],
    ids=["speculative-1", "speculative-4", "speculative-8", "target-alone-4"],
)  # fmt: skip
def test_fixed_shapes_decode_as_generate(separate_pair, batch_size, speculative):
    """Six clips (two of each), so that at batch 4 rows leave and others join, and at batch 8 the slots
    shrink as rows finish: generate()'s tokens, and the slots used more than one bucket."""
    options = DecodeOptions(language="en", max_new_tokens=24)
    clips = [CLIPS[name] for name in CLIPS] * 2
    run = TranscribeOptions.of(options, batch_size=batch_size, speculative=speculative)
    with replayed(separate_pair):
        found = decode(separate_pair, clips, run)
        sizes = {key[0] for key in replay.replay_of(separate_pair.pair.target.model).shared}
        slots = replay.replay_of(separate_pair.pair.target.model).shared.values()
        assert not any(one.busy for one in slots)  # each decoding hands its slots back as its rows finish
    assert found == [reference_ids(separate_pair, clip, options) for clip in clips]
    assert len(sizes) > 1 if batch_size > 1 else sizes == {1}


def test_fixed_shapes_with_timestamps_a_prompt_detection_and_long_form(separate_pair):
    """Timestamps (the seek loop's windows rejoin the batch), a previous-text prompt (a feed wider than every
    captured width), the language detected (a peek), a clip over 30 s: the same tokens as the steps of
    the feed's own shape."""
    long = np.concatenate([CLIPS["bursts-9s"]] * 4)  # 36 s
    tokenizer = separate_pair.pair.target.processor.tokenizer
    prompt = tuple(tokenizer.encode(" weather and travel" * 6, add_special_tokens=False))
    cases = [
        DecodeOptions(language="en", timestamps=True, max_new_tokens=24),
        DecodeOptions(language="de", prompt_ids=prompt, max_new_tokens=16),
        DecodeOptions(max_new_tokens=16),
    ]
    clips = [CLIPS["chirp-4s"], long, CLIPS["noise-2s"]]
    for options in cases:
        run = TranscribeOptions.of(options, batch_size=2)
        expected = decode(separate_pair, clips, run)
        with replayed(separate_pair):
            assert decode(separate_pair, clips, run) == expected


@pytest.mark.slow  # the real pair: CI runs it; -m 'not slow' skips it
def test_the_real_pair_with_its_lean_self_draft(real_models):
    """whisper-base with its self-draft (lean steps, int8 on a CPU, one row's one-token feeds that need the
    mask once the cache is read whole): the same tokens on real speech, clip by clip, and the draft's
    proposals as good (its error would change no output, only what it costs)."""
    whisper = SpeculativeWhisper(draft_model="self", final_model=str(real_models["base"]), device=TEST_DEVICE)
    names = ["en-jfk.flac", "de-bahnhof.wav"]
    clips = [load_audio(ASSETS / name) for name in names]
    run = TranscribeOptions(max_new_tokens=32, batch_size=1)
    expected = whisper.transcribe_waveforms(clips, run)
    with replayed(whisper):
        found = whisper.transcribe_waveforms(clips, run)
    assert [f.token_ids for f in found] == [e.token_ids for e in expected]
    accepted = [sum(one.result.num_accepted for one in decoding) for decoding in (found, expected)]
    assert accepted[0] >= 0.9 * accepted[1] > 0  # equal here; a draft that read stale keys: half as many


def test_a_second_decoding_at_once_gets_slots_of_its_own(separate_pair):
    """The model's shared slots serve one decoding at a time: another, meanwhile, gets storage of its own;
    once the first is gone its slots serve the next."""
    model = separate_pair.pair.target.model
    states = torch.zeros(1, 1500, model.config.d_model, dtype=model.dtype, device=model.device)
    prompt = [model.generation_config.decoder_start_token_id]
    with replayed(separate_pair):
        first, second = CachedDecoder(model, states), CachedDecoder(model, states)
        assert first._held[0].shared and not second._held[0].shared
        assert torch.equal(first.feed([prompt])[0], second.feed([prompt])[0])
        shared = first._held[0]
        del first
        third = CachedDecoder(model, states)
        assert third._held[0] is shared


@pytest.mark.skipif(not CAPTURE, reason="CUDA graphs need the tests on CUDA (SPECDEC_TEST_DEVICE=cuda)")
def test_captured_steps_equal_uncaptured_ones(separate_pair):
    """On CUDA: the graphs replayed give the tokens of the same fixed shapes run step by step."""
    options = TranscribeOptions(language="en", max_new_tokens=24, batch_size=4)
    clips = list(CLIPS.values())
    with replayed(separate_pair, capture=False):
        eager = decode(separate_pair, clips, options)
    with replayed(separate_pair, capture=True):
        assert replay.is_captured(separate_pair.pair.target.model)
        assert decode(separate_pair, clips, options) == eager
