"""The target's decoder step without transformers' module machinery: the same operations in the same order.

`CachedDecoder` feeds the target through `WhisperForConditionalGeneration.forward`, which for a step of a
few tokens spends about a millisecond in Python around its products (module calls, the attention
interface's dispatch and checks, the mask preprocessing, the cache wrappers, the output dataclasses);
one step of whisper-base is ~7 ms on the development machine. `decoder_logits` computes what that
forward computes from the same cache, calling the same kernels on the same tensors in the same order
(the query scaled after its projection, `scaled_dot_product_attention` with transformers' arguments,
the same reshapes and copies), so its logits are equal bit for bit: `tests/test_target_step.py` compares
them with the model's forward over ragged batched feeds and rollbacks, and the parity tests with
`generate()` run through it. Unlike `engine.lean_decoder` (a draft's step, free to differ by rounding),
this one must not differ at all, so it fuses nothing.

It serves only steps it can reproduce: `usable` is False (and the feed goes through the model) before the
cross-attention keys and values are computed (the first feed of a batch), for an attention implementation
other than transformers' "sdpa", when any decoder module is in training mode, and when the model's
modules carry hooks (accelerate's device maps and offloading, a user's hooks), which calling the modules
would run and this step would not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import WhisperForConditionalGeneration


def usable(model: WhisperForConditionalGeneration, cross_updated: bool) -> bool:
    """Whether `decoder_logits` reproduces the model's forward for the next feed."""
    if not cross_updated or model.config._attn_implementation != "sdpa":
        return False
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return False
    modules = [model, model.model, *model.model.decoder.modules(), model.proj_out]
    return not any(module.training or _hooked(module) for module in modules)


def _hooked(module: nn.Module) -> bool:
    """Forward hooks of torch's, or an accelerate hook (device maps, offloading: accelerate sets `_hf_hook`
    on the module itself). Read from the module's own dict: `hasattr` on an nn.Module without it goes
    through its `__getattr__` and an exception, ~1 µs a module on every target pass."""
    return bool(module._forward_hooks or module._forward_pre_hooks) or "_hf_hook" in module.__dict__


def decoder_logits(
    model: WhisperForConditionalGeneration,
    self_layers: list,
    cross_layers: list,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Logits (batch, width, vocab) of the decoder fed input_ids (batch, width) at position_ids, as the
    model's forward computes them: self_layers[i].update(keys, values, i) stores layer i's new keys and
    values and returns those to attend over (`engine.cache.PositionedLayer`); cross_layers[i].keys and
    .values are layer i's cross-attention ones; mask (batch, 1, width, keys), added to the scores."""
    decoder = model.model.decoder
    hidden = decoder.embed_tokens(input_ids) + decoder.embed_positions.weight[position_ids]
    for i, layer in enumerate(decoder.layers):  # WhisperDecoderLayer: pre-norm, residual
        normed = layer.self_attn_layer_norm(hidden)
        hidden = hidden + _self_attention(layer.self_attn, normed, self_layers[i], i, mask)
        normed = layer.encoder_attn_layer_norm(hidden)
        hidden = hidden + _cross_attention(layer.encoder_attn, normed, cross_layers[i])
        hidden = hidden + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden))))
    return model.proj_out(decoder.layer_norm(hidden))


def _self_attention(attention, hidden: torch.Tensor, cache_layer, index: int, mask: torch.Tensor):
    batch, width, _ = hidden.shape
    kv_shape = (batch, -1, attention.num_heads, attention.head_dim)
    query = _query(attention, hidden)
    keys = attention.k_proj(hidden).view(kv_shape).transpose(1, 2).contiguous()
    values = attention.v_proj(hidden).view(kv_shape).transpose(1, 2).contiguous()
    keys, values = cache_layer.update(keys, values, index)
    return _attend(attention, query, keys, values, mask)


def _cross_attention(attention, hidden: torch.Tensor, cross_layer) -> torch.Tensor:
    return _attend(attention, _query(attention, hidden), cross_layer.keys, cross_layer.values, None)


def _query(attention, hidden: torch.Tensor) -> torch.Tensor:
    """WhisperAttention's query: projected, then scaled (the order transformers keeps), (batch, heads,
    width, head_dim)."""
    batch, width, _ = hidden.shape
    shape = (batch, width, -1, attention.head_dim)
    return (attention.q_proj(hidden) * attention.scaling).view(shape).transpose(1, 2).contiguous()


def _attend(attention, query, keys, values, mask) -> torch.Tensor:
    """transformers' `sdpa_attention_forward` (no dropout, scale 1: the query is scaled) and
    WhisperAttention's output projection."""
    batch, _, width, _ = query.shape
    attended = F.scaled_dot_product_attention(
        query, keys, values, attn_mask=mask, dropout_p=0.0, scale=1.0, is_causal=False
    )
    attended = attended.reshape(batch, -1, width, values.shape[-1]).transpose(1, 2).contiguous()
    return attention.out_proj(attended.reshape(batch, width, -1).contiguous())
