"""The guarantee: speculative greedy == target-only greedy == transformers generate(), for every draft kind,
every option, at batch size 1 and 3 (one engine: a clip alone is a batch of one).

Runs on the project's random-weight demo checkpoints (real Whisper architectures, loaded through
from_pretrained); tests/test_real_pair.py does the same on real weights. Each pair's acceptance rate is
asserted strictly between 0 and 1, so both the accept and the reject paths run.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
import torch

from specdec.api import SpeculativeWhisper
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.trace import ACCEPTED, BONUS, CORRECTED, TARGET
from specdec.whisper.models import DraftKind, LoadedModel

MAX_NEW_TOKENS = 24  # long enough for every kind to accept and reject (test_each_kind_accepts_and_rejects)


def clips() -> dict[str, np.ndarray]:
    """Varied 16 kHz inputs: noise bursts, a chirp, different lengths (random models need no speech)."""
    rng = np.random.default_rng(7)
    t = np.arange(int(4.0 * 16_000)) / 16_000
    return {
        "noise-2s": (0.1 * rng.standard_normal(2 * 16_000)).astype(np.float32),
        "chirp-4s": (0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t)).astype(np.float32),
        "bursts-9s": (rng.standard_normal(9 * 16_000) * (np.arange(9 * 16_000) % 8000 < 3000) * 0.2).astype(
            np.float32
        ),
    }


CLIPS = clips()


BASELINES_CHECKED: set[tuple[str, DecodeOptions]] = set()
REFERENCES: dict[tuple, list[int]] = {}  # generate()'s output by target checkpoint, audio and options


def reference_ids(whisper: SpeculativeWhisper, waveform: np.ndarray, options: DecodeOptions) -> list[int]:
    """What `generate()` outputs for the target alone, as target ids after the prompt without end-of-text.

    Every pair of a kind loads the same target checkpoint, and draft options (k, adaptive, confidence)
    do not reach generate(): each (checkpoint, dtype, audio, target options) is generated once."""
    target = whisper.pair.target
    key = (
        target.name, target.model.dtype, hashlib.sha1(waveform.tobytes()).hexdigest(),
        options.language, options.task, options.timestamps, options.max_new_tokens, options.prompt_ids,
        options.no_speech_threshold, options.logprob_threshold,
    )  # fmt: skip
    if key not in REFERENCES:
        REFERENCES[key] = _generate(target, waveform, options)
    return REFERENCES[key]


def _generate(target: LoadedModel, waveform: np.ndarray, options: DecodeOptions) -> list[int]:
    features = target.processor.feature_extractor(waveform, sampling_rate=16_000, return_tensors="pt")
    config = target.model.generation_config
    multilingual = config.is_multilingual  # an English-only model takes neither language nor task
    previous = (
        {
            "prompt_ids": torch.tensor(
                [config.prev_sot_token_id, *options.prompt_ids], device=target.model.device
            )
        }
        if options.prompt_ids
        else {}
    )
    with torch.inference_mode():
        output = target.model.generate(
            features.input_features.to(target.model.device, target.model.dtype),
            language=options.language if multilingual else None,
            task=options.task if multilingual else None,
            return_timestamps=options.timestamps,
            max_new_tokens=options.max_new_tokens,
            **previous,
            **no_speech_rule(options),
        )
    sequence = (output["sequences"] if isinstance(output, dict) else output)[0].tolist()
    eos = target.model.generation_config.eos_token_id
    while sequence and sequence[-1] == eos:  # end-of-text and right padding
        sequence.pop()
    return sequence


def no_speech_rule(options: DecodeOptions) -> dict:
    """generate()'s arguments for the no-speech rule: its thresholds, and a temperature, without which
    generate() cannot average the log-probabilities (it compares temperature None with 0.0)."""
    if options.no_speech_threshold is None and options.logprob_threshold is None:
        return {}
    return {
        "temperature": options.temperature,
        "no_speech_threshold": options.no_speech_threshold,
        "logprob_threshold": options.logprob_threshold,
    }


def test_each_kind_accepts_and_rejects(pair_of_each_kind):
    kind, whisper = pair_of_each_kind
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS)
    results = [whisper.transcribe_waveforms([w], options)[0].result for w in CLIPS.values()]
    accepted = sum(r.num_accepted for r in results)
    drafted = sum(r.num_drafted for r in results)
    assert 0 < accepted < drafted, f"{kind}: acceptance {accepted}/{drafted} must be strictly between 0 and 1"
    labels = {token.label for r in results for token in r.tokens}
    assert {ACCEPTED, CORRECTED} <= labels


def test_draft_kind_detected(pair_of_each_kind):
    kind, whisper = pair_of_each_kind
    assert whisper.pair.kind is kind


@pytest.mark.slow
def test_float64_batch_equals_generate(float64_pair):
    """In float64 a near-tie has even less room to flip on the rounding differences between a batch's
    matrix products and generate()'s; the clips decoded together, each must be generate()'s."""
    options = DecodeOptions(language="fr", timestamps=True, max_new_tokens=MAX_NEW_TOKENS)
    together = float64_pair.transcribe_waveforms(
        list(CLIPS.values()), TranscribeOptions.of(options, batch_size=len(CLIPS))
    )
    for waveform, transcription in zip(CLIPS.values(), together, strict=True):
        assert list(transcription.token_ids) == reference_ids(float64_pair, waveform, options)


def test_trace_is_complete_and_consistent(separate_pair):
    result = separate_pair.transcribe_waveforms([CLIPS["chirp-4s"]], DecodeOptions(language="en"))[0].result
    kept = [token.token_id for token in result.tokens if token.kept]
    assert tuple(kept) == result.token_ids
    assert sum(token.label == ACCEPTED for token in result.tokens) == result.num_accepted
    for step in result.steps:
        step_tokens = [token for token in result.tokens if token.step == step.index]
        assert 1 <= len(step_tokens) <= step.n_accepted + 1
        assert [t.token_id for t in step_tokens[: step.n_accepted]] == list(step.drafted[: step.n_accepted])
        last = step_tokens[-1]
        if step.target_token is not None:
            assert last.token_id == step.target_token
            if not step.drafted:  # adaptive drafting paused the draft: the target's own token
                assert last.label == TARGET
            else:
                assert last.label == (BONUS if step.n_accepted == len(step.drafted) else CORRECTED)
        assert result.pass_of(step).draft_seconds >= 0 and result.pass_of(step).verify_seconds > 0
    for token in result.tokens:
        assert 0 <= token.target_prob <= 1
        assert (token.draft_prob is None) == (token.label in (BONUS, TARGET))
    stats = result.stats()
    assert stats["num_target_passes"] == len(result.steps)
    assert stats["tokens_per_pass"] > 1
    assert 0 < stats["acceptance_rate"] < 1
    assert result.to_dict()["stats"] == stats


def test_sampling_is_seeded_and_valid(separate_pair):
    options = DecodeOptions(language="en", temperature=0.8, top_p=0.95, seed=3, max_new_tokens=MAX_NEW_TOKENS)
    first = separate_pair.transcribe_waveforms([CLIPS["noise-2s"]], options)[0]
    again = separate_pair.transcribe_waveforms([CLIPS["noise-2s"]], options)[0]
    assert first.token_ids == again.token_ids
    other = separate_pair.transcribe_waveforms([CLIPS["noise-2s"]], dataclasses.replace(options, seed=4))[0]
    assert other.token_ids != first.token_ids
    assert all(token.target_prob > 0 for token in first.result.tokens)


def test_target_only_pair_has_no_draft_steps(separate_pair):
    result = separate_pair.transcribe_waveforms(
        [CLIPS["noise-2s"]],
        TranscribeOptions.of(DecodeOptions(language="en", max_new_tokens=10), speculative=False),
    )[0].result
    assert result.num_drafted == 0 and result.acceptance_rate is None
    assert {token.label for token in result.tokens} == {TARGET}
    assert result.num_target_passes == result.num_generated


def test_detected_language_is_reported(separate_pair):
    result = separate_pair.transcribe_waveforms([CLIPS["chirp-4s"]], DecodeOptions())[0].result
    config = separate_pair.pair.target.model.generation_config
    assert config.lang_to_id[f"<|{result.language}|>"] == result.prompt_ids[1]


def test_kinds_are_distinct(pair_of_each_kind):
    kind, whisper = pair_of_each_kind
    draft = whisper.pair.draft.model
    if kind is DraftKind.SHARED_ENCODER:
        assert draft.model.encoder is whisper.pair.target.model.model.encoder
    else:
        assert draft.model.encoder is not whisper.pair.target.model.model.encoder


# --- every option, at batch size 1 and 3, for every draft kind ---

PREVIOUS_TEXT = " The weather report follows, with the forecast for tomorrow."
OPTION_SETS = {
    "forced-language": DecodeOptions(language="de"),
    "timestamps-detected-language": DecodeOptions(timestamps=True),
    "translate-budget": DecodeOptions(language="de", task="translate", max_new_tokens=7),
    "k1": DecodeOptions(language="en", num_draft_tokens=1),
    "k8": DecodeOptions(language="en", num_draft_tokens=8),
    "adaptive": DecodeOptions(language="en", adaptive=True, num_draft_tokens=2, max_draft_tokens=6),
    "cost-aware": DecodeOptions(language="en", cost_aware=True),
    "confidence-stop": DecodeOptions(language="en", num_draft_tokens=6, draft_confidence=0.5),
    "previous-text": DecodeOptions(language="en", timestamps=True),  # prompt_ids added per tokenizer
}


def matrix_options(whisper: SpeculativeWhisper, name: str) -> DecodeOptions:
    options = dataclasses.replace(
        OPTION_SETS[name], max_new_tokens=OPTION_SETS[name].max_new_tokens or MAX_NEW_TOKENS
    )
    if name == "previous-text":
        tokenizer = whisper.pair.target.processor.tokenizer
        options = dataclasses.replace(
            options, prompt_ids=tuple(tokenizer.encode(PREVIOUS_TEXT, add_special_tokens=False))
        )
    return options


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_every_option_at_every_batch_size_equals_generate(pair_of_each_kind, name, batch_size):
    """The one engine: each option, with the clips decoded one at a time (a batch of one) or together,
    gives every clip generate()'s own output, for every kind of draft."""
    kind, whisper = pair_of_each_kind
    options = matrix_options(whisper, name)
    if batch_size == 1:  # one clip, a different one for each option set: the matrix covers every clip
        clip = list(CLIPS)[list(OPTION_SETS).index(name) % len(CLIPS)]
        clips = {clip: CLIPS[clip]}
        results = [whisper.transcribe_waveforms([CLIPS[clip]], options)[0]]
    else:
        clips = CLIPS
        results = whisper.transcribe_waveforms(
            list(CLIPS.values()), TranscribeOptions.of(options, batch_size=len(CLIPS))
        )
    for clip, waveform, transcription in zip(clips, clips.values(), results, strict=True):
        expected = reference_ids(whisper, waveform, options)
        assert list(transcription.token_ids) == expected, f"{kind} {name} batch {batch_size} {clip}"
        if options.prompt_ids:
            prev_sot = whisper.pair.target.model.generation_config.prev_sot_token_id
            assert transcription.result.prompt_ids[: len(options.prompt_ids) + 1] == (
                prev_sot,
                *options.prompt_ids,
            )
    assert sum(t.result.num_drafted for t in results) > 0, "the draft must have run"


@pytest.mark.parametrize("batch_size", [1, 3])
def test_target_alone_at_every_batch_size_equals_generate(separate_pair, batch_size):
    options = DecodeOptions(timestamps=True, max_new_tokens=MAX_NEW_TOKENS)
    waveforms = list(CLIPS.values())
    if batch_size == 1:
        results = [
            separate_pair.transcribe_waveforms([w], TranscribeOptions.of(options, speculative=False))[0]
            for w in waveforms
        ]
    else:
        run = TranscribeOptions.of(options, speculative=False, batch_size=len(waveforms))
        results = separate_pair.transcribe_waveforms(waveforms, run)
    for waveform, transcription in zip(waveforms, results, strict=True):
        assert list(transcription.token_ids) == reference_ids(separate_pair, waveform, options)
        assert {token.label for token in transcription.result.tokens} == {TARGET}


def test_previous_text_with_forced_german_and_timestamps_equals_generate(separate_pair):
    tokenizer = separate_pair.pair.target.processor.tokenizer
    prompt_ids = tuple(tokenizer.encode(PREVIOUS_TEXT, add_special_tokens=False))
    options = DecodeOptions(
        language="de", timestamps=True, prompt_ids=prompt_ids, max_new_tokens=MAX_NEW_TOKENS
    )
    # the first window closes a segment past the clip's end: a second window, the previous text again
    alone = separate_pair.transcribe_waveforms(
        [CLIPS["bursts-9s"]], TranscribeOptions.of(options, speculative=False)
    )[0]
    assert list(alone.token_ids) == reference_ids(separate_pair, CLIPS["bursts-9s"], options)
    assert len(alone.result.windows) == 2
    speculative = separate_pair.transcribe_waveforms([CLIPS["bursts-9s"]], options)[0]
    assert speculative.token_ids == alone.token_ids and 0 < speculative.result.acceptance_rate < 1
