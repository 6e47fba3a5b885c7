"""Each private torch and transformers API of `specdec.internals` still does what specdec needs of it.

An upgrade that moves or changes one fails here by name, with the installed versions, before it shows as a
wrong decoding somewhere else.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn
from transformers import (
    DynamicCache,
    EncoderDecoderCache,
    WhisperConfig,
    WhisperForConditionalGeneration,
    WhisperTokenizer,
)

from specdec import internals

VERSIONS = f"torch {torch.__version__}, transformers {transformers.__version__}"


def broke(name: str, error: Exception | str) -> str:
    return f"specdec.internals.{name} no longer works with {VERSIONS}: {error}"


def check(name: str, condition: bool, detail: str) -> None:
    assert condition, broke(name, detail)


def run(name: str, work):
    try:
        return work()
    except Exception as error:  # noqa: BLE001 - reported by name
        pytest.fail(broke(name, f"{type(error).__name__}: {error}"))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_mkldnn_packed_linear_is_the_linear_product():
    check("mkldnn_linear_available", internals.mkldnn_linear_available(), "the operators are gone")
    generator = torch.Generator().manual_seed(0)
    layer = nn.Linear(64, 96)
    x = torch.randn(7, 64, generator=generator)
    packed = run("mkldnn_pack_weight", lambda: internals.mkldnn_pack_weight(layer.weight.detach(), 8))
    found = run("mkldnn_linear", lambda: internals.mkldnn_linear(x, packed, layer.bias.detach()))
    expected = nn.functional.linear(x, layer.weight, layer.bias).detach()
    check("mkldnn_linear", torch.allclose(found, expected, atol=1e-5), "its product differs from F.linear")


def test_dynamic_int8_layers_expose_their_packed_weights():
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(32, 16)), {nn.Linear})[0]
    check("is_dynamic_int8", internals.is_dynamic_int8(quantized), "a quantised layer is not recognised")
    check(
        "is_dynamic_int8", not internals.is_dynamic_int8(nn.Linear(4, 4)), "a float layer is taken for int8"
    )
    weights = run("dynamic_int8_weights", lambda: internals.dynamic_int8_weights(quantized))
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))
    direct = run(
        "dynamic_int8_weights",
        lambda: torch.ops.quantized.linear_dynamic(x, weights, reduce_range=quantized.version >= 4),
    )
    check("dynamic_int8_weights", torch.equal(direct, quantized(x)), "its operator differs from the layer")


def test_per_channel_int8_keeps_values_and_scales():
    values = torch.tensor([[1, -2], [3, 4]], dtype=torch.int8)
    scales = torch.tensor([0.5, 0.25], dtype=torch.float64)
    zero_points = torch.zeros(2, dtype=torch.int64)
    tensor = run("per_channel_int8", lambda: internals.per_channel_int8(values, scales, zero_points, 0))
    check("per_channel_int8", torch.equal(tensor.int_repr(), values), "the int8 values changed")
    check("per_channel_int8", torch.equal(tensor.q_per_channel_scales(), scales), "the scales changed")


def test_hooks_are_seen_on_a_module_and_globally():
    layer = nn.Linear(2, 2)
    check("has_forward_hooks", not internals.has_forward_hooks(layer), "a plain module reads as hooked")
    handle = layer.register_forward_pre_hook(lambda module, args: None)
    check("has_forward_hooks", internals.has_forward_hooks(layer), "a forward pre-hook is not seen")
    handle.remove()
    layer.__dict__["_hf_hook"] = object()  # what accelerate sets on a module it hooks
    check("has_forward_hooks", internals.has_forward_hooks(layer), "an accelerate hook is not seen")
    check("has_global_forward_hooks", not internals.has_global_forward_hooks(), "none were registered")
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        check("has_global_forward_hooks", internals.has_global_forward_hooks(), "a global hook is not seen")
    finally:
        handle.remove()


def test_tensor_versions_count_in_place_changes_and_classes_swap_back():
    weight = torch.zeros(3)
    before = run("tensor_version", lambda: internals.tensor_version(weight))
    weight.add_(1)
    check("tensor_version", internals.tensor_version(weight) > before, "an in-place change is not counted")

    class Louder(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    layer, x = nn.Linear(2, 2), torch.ones(1, 2)
    plain = layer(x)
    internals.swap_class(layer, Louder)
    check("swap_class", torch.equal(layer(x), 2 * plain), "the swapped class's forward did not run")
    internals.swap_class(layer, nn.Linear)
    check("swap_class", torch.equal(layer(x), plain) and type(layer) is nn.Linear, "the swap did not undo")


def test_a_whisper_models_attention_choice_and_cross_attention_cache():
    config = WhisperConfig(
        vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_source_positions=8,
        max_target_positions=8, num_mel_bins=8, pad_token_id=1, bos_token_id=2, eos_token_id=2,
        decoder_start_token_id=3,
    )  # fmt: skip
    model = WhisperForConditionalGeneration(config)
    implementation = run("attention_implementation", lambda: internals.attention_implementation(model.config))
    check("attention_implementation", isinstance(implementation, str), f"got {implementation!r}")
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    run("mark_cross_attention_computed", lambda: internals.mark_cross_attention_computed(cache, 0))
    check("mark_cross_attention_computed", cache.is_updated.get(0) is True, "the mark was not kept")


def test_tokens_group_into_words_and_the_median_filter_filters(real_models):
    tokenizer = WhisperTokenizer.from_pretrained(str(real_models["base"]))
    tokens = tokenizer.encode(" Ask not, what", add_special_tokens=False)
    words, _, indices = run(
        "combine_tokens_into_words", lambda: internals.combine_tokens_into_words(tokenizer, tokens, "en")
    )
    check("combine_tokens_into_words", words == [" Ask", " not,", " what"], f"got {words!r}")
    check("combine_tokens_into_words", sum(map(len, indices)) == len(tokens), "tokens were lost")
    values = torch.tensor([[[1.0, 9.0, 2.0, 3.0, 8.0, 4.0]]])
    filtered = run("median_filter", lambda: internals.median_filter(values, 3))
    check("median_filter", filtered.shape == values.shape, f"shape {tuple(filtered.shape)}")
    check(
        "median_filter",
        filtered[0, 0, 2].item() == 3.0,
        f"the median of 9, 2, 3 came out {filtered[0, 0, 2]}",
    )
