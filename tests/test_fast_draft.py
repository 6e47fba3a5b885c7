"""A cheaper draft never changes the output: int8 weights, a restricted vocabulary, audio-only encoding.

On real speech (the bundled whisper-base with a whisper-tiny.en draft) each tuned draft gives the target
alone's tokens; the loaded models are left as they were; with a restricted vocabulary the draft's
distribution is a distribution over what it can propose, and one speculative step with it emits exactly
the target's distribution (exact enumeration on a tiny vocabulary, then the real sampling function).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_acceptance import (
    CHI2_CRITICAL_1E3,
    first_tokens_distribution,
    one_step_distribution,
    random_table,
    specdec_residual,
    target_only_distribution,
    to_float,
)
from transformers import WhisperForConditionalGeneration

from specdec.audio import load_audio
from specdec.engine import kernels
from specdec.engine.acceptance import speculative_sample
from specdec.engine.cache import CachedDecoder
from specdec.engine.fast_draft import (
    AUDIO_CONTEXT_MARGIN,
    CPU_DRAFT,
    AudioContextEncoder,
    RestrictedProjection,
    draft_frames,
    frequent_draft_ids,
    pooled_positions,
    pooled_states,
    sounding_frames,
    tune_draft,
)
from specdec.engine.lean_decoder import lean_decoder
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.whisper.features import encode, features, pair_features
from specdec.whisper.models import DraftSettings

ASSETS = Path(__file__).parent.parent / "assets"
SMALL_VOCABULARY = 2048  # small enough that the draft meets words it cannot propose


@pytest.fixture(scope="module")
def weather_alone(real_pair):
    waveform = load_audio(ASSETS / "en-weather.wav")
    alone = real_pair.transcribe_waveforms(
        [waveform], TranscribeOptions.of(DecodeOptions(language="en"), speculative=False)
    )[0]
    return waveform, alone.token_ids


@pytest.mark.parametrize(
    "settings",
    [
        DraftSettings(int8=True),
        DraftSettings(vocabulary=SMALL_VOCABULARY),
        DraftSettings(audio_context=True),
        DraftSettings(lean_step=True),
        DraftSettings(frame_pooling=4),
        DraftSettings(lean_step=True, frame_pooling=16),
    ],
    ids=["int8", "small-vocabulary", "audio-only", "lean-step", "pooled-frames", "lean-widely-pooled"],
)
def test_a_tuned_draft_keeps_the_target_output(real_pair, weather_alone, settings):
    waveform, expected = weather_alone
    tuned = type(real_pair).from_pair(tune_draft(real_pair.pair, settings))
    result = tuned.transcribe_waveforms([waveform], DecodeOptions(language="en"))[0].result
    assert result.token_ids == expected
    assert 0 < result.num_accepted < result.num_drafted  # the draft's proposals were judged, some rejected


def test_the_cpu_default_drafts_with_every_lever(real_pair, weather_alone):
    """SpeculativeWhisper on a CPU runs the tuned draft; its encoder reads the audio and a margin only."""
    assert real_pair.pair.draft_settings == CPU_DRAFT and real_pair.pair.plain_draft is not None
    waveform, expected = weather_alone
    shapes = []

    def recording(model, window):
        shapes.append(tuple(window.shape))
        return encode(model, window)

    pair = real_pair.pair
    (result,) = decode_clips(
        pair, [pair_features(pair, waveform)], DecodeOptions(language="en"), encoder=recording
    )
    sounding = sounding_frames(features(pair.target, waveform))
    assert sounding <= 638  # 6.38 s of audio
    assert shapes == [(1, 80, 3000), (1, 80, sounding + AUDIO_CONTEXT_MARGIN + (sounding % 2))]
    assert result.token_ids == expected


def test_tuning_leaves_the_loaded_models_alone(real_pair):
    pair = real_pair.pair
    plain = pair.plain_draft.model
    assert kernels.is_packed(plain) and type(plain.proj_out) is kernels.PackedLinear
    assert type(plain.model.decoder.layers[0].fc1) is kernels.PackedLinear
    tuned_encoder = pair.draft.model.model.encoder.encoder  # int8: its own copy; the loaded one is float32
    assert pair.draft.model is not plain and tuned_encoder is not plain.model.encoder
    assert type(plain.model.encoder.layers[0].fc1) is torch.nn.Linear
    assert type(tuned_encoder.layers[0].fc1) is torch.ao.nn.quantized.dynamic.Linear
    assert (
        tune_draft(pair, DraftSettings(audio_context=True)).draft.model.model.encoder.encoder
        is plain.model.encoder
    )
    back = tune_draft(pair, DraftSettings())
    assert back.draft is pair.plain_draft and back.plain_draft is None and back.target is pair.target
    again = tune_draft(back, DraftSettings(vocabulary=SMALL_VOCABULARY))
    assert again.plain_draft is pair.plain_draft and again.draft_settings.vocabulary == SMALL_VOCABULARY


def test_the_audio_only_encoder_over_a_whole_window_is_the_encoder(separate_pair):
    draft = separate_pair.pair.plain_draft.model
    window = torch.randn(1, draft.config.num_mel_bins, 3000, generator=torch.Generator().manual_seed(0))
    stock, _ = encode(draft, window)
    with torch.inference_mode():
        whole = AudioContextEncoder(draft.model.encoder)(window).last_hidden_state
        part = AudioContextEncoder(draft.model.encoder)(window[..., :400]).last_hidden_state
    assert torch.equal(whole, stock) and part.shape == (1, 200, draft.config.d_model)


@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_the_lean_step_computes_what_the_decoder_computes(separate_pair, weights):
    """Ragged feeds, a rollback and a dropped row: the same logits as transformers' decoder, to rounding,
    on the loaded draft and on the CPU default's tuned one (int8 layers fused into one product)."""
    pair = separate_pair.pair
    assert pair.draft_settings == CPU_DRAFT
    draft = pair.plain_draft.model if weights == "float32" else pair.draft.model
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 200, draft.config.d_model, generator=generator)
    lean, stock = lean_decoder(draft, hidden), CachedDecoder(draft, hidden)
    for step in (
        lambda decoder: decoder.feed([[50258, 11, 12], [50258]]),
        lambda decoder: decoder.rollback([2, 1]),
        lambda decoder: decoder.feed([[13, 14], [15, 16, 17]]),
        lambda decoder: decoder.feed([[], [18]]),
        lambda decoder: decoder.keep([1]),
        lambda decoder: decoder.feed([[19]]),
    ):
        got, expected = step(lean), step(stock)
        assert lean.lengths == stock.lengths
        for row_got, row_expected in zip(got or [], expected or [], strict=True):
            assert row_got.shape == row_expected.shape
            assert torch.allclose(row_got, row_expected, atol=1e-4, rtol=1e-4)


def test_the_lean_step_follows_weights_changed_after_first_use(separate_pair):
    """Its fused projections are remade when the model's change (here in place)."""
    torch.manual_seed(0)
    draft = WhisperForConditionalGeneration(separate_pair.pair.plain_draft.model.config).eval()
    hidden = torch.randn(1, 50, draft.config.d_model, generator=torch.Generator().manual_seed(1))
    before = lean_decoder(draft, hidden).feed([[50258, 11, 12]])[0]
    with torch.no_grad():
        draft.model.decoder.layers[0].self_attn.q_proj.weight.mul_(3.0)
    after = lean_decoder(draft, hidden).feed([[50258, 11, 12]])[0]
    expected = CachedDecoder(draft, hidden).feed([[50258, 11, 12]])[0]
    assert not torch.allclose(before, expected, atol=1e-4, rtol=1e-4)
    assert torch.allclose(after, expected, atol=1e-4, rtol=1e-4)


def test_pooled_states_are_the_means_of_consecutive_frames(real_pair):
    hidden = torch.randn(2, 10, 3, generator=torch.Generator().manual_seed(0))
    pooled = pooled_states(hidden, 4)
    assert pooled.shape == (2, pooled_positions(10, 4), 3) == (2, 3, 3)
    groups = [hidden[:, :4], hidden[:, 4:8], hidden[:, 8:]]  # the last group: the two frames left
    assert torch.allclose(pooled, torch.stack([group.mean(1) for group in groups], dim=1))
    assert pooled_states(hidden, DraftSettings().frame_pooling) is hidden
    with pytest.raises(ValueError, match="frame pooling"):
        tune_draft(real_pair.pair, DraftSettings(frame_pooling=0))


def test_sounding_frames_stop_at_the_padding():
    window = torch.full((2, 80, 3000), -0.5)  # the floor: silence
    window[0, 3, :700] = 0.2
    window[1, 5, 100:1200] = 0.1
    assert sounding_frames(window) == 1200 and sounding_frames(window[:1]) == 700
    assert draft_frames(DraftSettings(audio_context=True), window[:1], 3000) == 700 + AUDIO_CONTEXT_MARGIN
    assert draft_frames(DraftSettings(audio_context=True), window[:1], 500) == 500 + AUDIO_CONTEXT_MARGIN
    assert draft_frames(DraftSettings(), window[:1], 500) == 3000


def test_frequent_ids_are_the_first_text_tokens_and_every_special(real_pair):
    vocabulary = real_pair.pair.vocabulary
    size = real_pair.pair.draft.model.config.vocab_size
    ids = frequent_draft_ids(vocabulary, size, 1000)
    text, special = ids[ids < vocabulary.draft_eos_id], ids[ids >= vocabulary.draft_eos_id]
    assert text.max() < 1000 and (vocabulary.draft_to_target[ids] >= 0).all()
    assert len(special) == int((vocabulary.draft_to_target[vocabulary.draft_eos_id :] >= 0).sum())


# ---------------------------------------------------------------- sampling with a restricted vocabulary

VOCAB, SUBSET = 4, (0, 2)  # the draft can propose tokens 0 and 2 only; the target likes all four


def restricted_draft_probs(hidden: torch.Tensor, seed: int) -> torch.Tensor:
    """The draft's distribution (rows, VOCAB) through a RestrictedProjection of a random projection."""
    projection = torch.nn.Linear(hidden.shape[-1], VOCAB, dtype=torch.float64)
    with torch.no_grad():
        projection.weight.copy_(
            torch.randn(VOCAB, hidden.shape[-1], generator=torch.Generator().manual_seed(seed))
        )
    restricted = RestrictedProjection(projection, torch.tensor(SUBSET), int8=False)
    with torch.no_grad():
        return torch.softmax(restricted(hidden), dim=-1)


def test_a_restricted_draft_is_a_distribution_over_what_it_proposes():
    probs = restricted_draft_probs(torch.randn(5, 3, dtype=torch.float64), seed=1)
    outside = [token for token in range(VOCAB) if token not in SUBSET]
    assert (
        torch.allclose(probs.sum(-1), torch.ones(5, dtype=torch.float64)) and (probs[:, outside] == 0).all()
    )
    assert (probs[:, list(SUBSET)] > 0).all()


@pytest.mark.parametrize(
    "subset",
    [(0, 2), (*range(10), *range(30, 40)), tuple(range(0, 40, 2)), (39,)],
    ids=["two-ids", "two-runs", "twenty-runs-gathered", "last-id"],
)
def test_restricted_logits_are_the_projections_on_the_subset_and_minus_infinity_elsewhere(subset):
    """Laid out by copying runs of ids (a few runs) or by one gather (many): the same logits."""
    projection = torch.nn.Linear(6, 40, dtype=torch.float64)
    hidden = torch.randn(2, 3, 6, dtype=torch.float64)
    restricted = RestrictedProjection(projection, torch.tensor(subset), int8=False)
    with torch.no_grad():
        expected = torch.full((2, 3, 40), float("-inf"), dtype=torch.float64)
        expected[..., list(subset)] = projection(hidden)[..., list(subset)]
        logits = restricted(hidden)
    assert torch.equal(logits.isinf(), expected.isinf()) and torch.allclose(logits, expected)


@pytest.mark.parametrize("num_draft_tokens", [1, 2])
def test_speculative_step_with_a_restricted_draft_is_target_sampling(num_draft_tokens):
    generator = torch.Generator().manual_seed(20 + num_draft_tokens)
    target = to_float(random_table(generator, VOCAB, num_draft_tokens, min_weight=1))
    prefixes = [prefix for prefix in target if len(prefix) < num_draft_tokens]
    hidden = torch.randn(len(prefixes), 3, generator=generator, dtype=torch.float64)
    draft = dict(zip(prefixes, restricted_draft_probs(hidden, seed=2).tolist(), strict=True))

    emitted = one_step_distribution(target, draft, num_draft_tokens, residual=specdec_residual)

    for length in range(1, num_draft_tokens + 2):
        got = first_tokens_distribution(emitted, target, length)
        expected = target_only_distribution(target, length)
        assert max(abs(got[sequence] - expected[sequence]) for sequence in expected) < 1e-12


def test_speculative_sample_with_a_restricted_draft_draws_the_target():
    """The real function, seeded: the first token emitted follows the target (chi-square, 1e-3 level)."""
    generator = torch.Generator().manual_seed(5)
    target_probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    draft_probs = restricted_draft_probs(torch.randn(1, 3, dtype=torch.float64, generator=generator), seed=3)
    draws = 8000
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    for _ in range(draws):
        draft_token = torch.multinomial(draft_probs[0], 1, generator=generator)
        verdict = speculative_sample(draft_token, draft_probs, target_probs, generator)
        counts[int(draft_token) if verdict.n_accepted else verdict.next_token] += 1
    expected = draws * target_probs[0]
    assert float(((counts - expected) ** 2 / expected).sum()) < CHI2_CRITICAL_1E3[VOCAB - 1]
