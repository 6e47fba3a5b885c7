"""A draft's decoder layers in plain tensor ops (`LeanLayers`, which `engine.step.decoder_step` runs).

Through transformers' decoder layers a small draft's step makes hundreds of operator calls; `LeanLayers`
runs the same layers' weights (int8, packed or restricted ones alike) in about 25 calls and 6 products per
layer, without nn.Module's dispatch: the query, key and value projections are one product (`LeanLayer`, made
once per model: the int8 rows and their per-row scales, or the float rows, concatenated, with the
attention's scaling folded into the query's rows), and `scaled_dot_product_attention` runs on the step's own
cache tensors (docs/benchmarks.md has what it saves).

For a draft only, never the target: its float results may differ from transformers' by rounding (another
order of additions, the scaling folded in), which can change what the draft proposes but never the output,
since the target verifies every proposed token. The cache and the feed are the step's (`engine.step`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import WhisperForConditionalGeneration

from specdec import internals
from specdec.engine.cache import CachedDecoder
from specdec.engine.step import Feed, SelfAttentionCache

Projection = Callable[[torch.Tensor], torch.Tensor]  # (..., in_features) -> (..., out_features)
Norm = tuple[torch.Tensor, torch.Tensor, float]  # a layer norm's weight, bias and eps


@dataclass(frozen=True)
class LeanLayer:
    """One decoder layer's weights as the lean step multiplies by them."""

    self_norm: Norm
    query_key_value: Projection  # the query (scaled) and the new token's key and value, in one product
    self_out: Projection
    cross_norm: Norm
    cross_query: Projection  # scaled
    cross_out: Projection
    mlp_norm: Norm
    fc1: Projection
    activation: Callable[[torch.Tensor], torch.Tensor]
    fc2: Projection


# per model: the weights its LeanLayers were made from (see `_fingerprint`), and the LeanLayers
_LAYERS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, list[LeanLayer]]] = weakref.WeakKeyDictionary()


def lean_layers(model: WhisperForConditionalGeneration) -> list[LeanLayer]:
    """The model's decoder layers as LeanLayers: made on first use, and again once its projections were
    moved, cast, packed, replaced or changed in place."""
    fingerprint = _fingerprint(model)
    if model not in _LAYERS or _LAYERS[model][0] != fingerprint:
        _LAYERS[model] = fingerprint, [_lean_layer(layer) for layer in model.model.decoder.layers]
    return _LAYERS[model][1]


def lean_decoder(model: WhisperForConditionalGeneration, hidden: torch.Tensor) -> CachedDecoder:
    """A draft's decoder over these rows' encoder states (rows, frames, d_model), its step `LeanLayers`'."""
    return CachedDecoder(model, hidden, LeanLayers(model))


class LeanLayers:
    """A draft's layers as `engine.step.decoder_step` runs them: LeanLayers' products, a boolean mask."""

    def __init__(self, model: WhisperForConditionalGeneration) -> None:
        self.layers = lean_layers(model)
        attention = model.model.decoder.layers[0].self_attn
        self.num_heads, self.head_dim = attention.num_heads, attention.head_dim

    def mask(self, feed: Feed, dtype: torch.dtype) -> torch.Tensor | None:
        """Each query sees the keys at positions up to its own (padding and stale positions never); one
        row's one token sees every key, so it needs none (unless the cache is read whole)."""
        if feed.positions.numel() == 1 and not feed.whole_cache:
            return None
        keys = torch.arange(feed.kv_length, device=feed.positions.device)
        return (keys[None, None, :] <= feed.positions[:, :, None])[:, None]

    def layer(
        self,
        index: int,
        hidden: torch.Tensor,
        feed: Feed,
        cache: SelfAttentionCache,
        cross: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """One decoder layer: self-attention over the cache, cross-attention, the MLP (pre-norm, residual)."""
        layer = self.layers[index]
        rows, tokens, _ = hidden.shape
        query_key_value = layer.query_key_value(_norm(hidden, layer.self_norm))
        query, key, value = query_key_value.view(rows, tokens, 3, self.num_heads, self.head_dim).permute(
            2, 0, 3, 1, 4
        )  # each (rows, heads, tokens, head_dim)
        cache.write(index, feed.positions, key, value)
        attended = F.scaled_dot_product_attention(
            query, *cache.read(index, feed.kv_length), attn_mask=mask, scale=1.0
        )
        hidden = hidden + layer.self_out(self._merge(attended))

        query = self._heads(layer.cross_query(_norm(hidden, layer.cross_norm)))
        attended = F.scaled_dot_product_attention(query, *cross, scale=1.0)
        hidden = hidden + layer.cross_out(self._merge(attended))

        return hidden + layer.fc2(layer.activation(layer.fc1(_norm(hidden, layer.mlp_norm))))

    def _heads(self, states: torch.Tensor) -> torch.Tensor:
        """(rows, tokens, d_model) -> (rows, heads, tokens, head_dim)."""
        rows, tokens, _ = states.shape
        return states.view(rows, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge(self, states: torch.Tensor) -> torch.Tensor:
        """(rows, heads, tokens, head_dim) -> (rows, tokens, d_model)."""
        rows, _, tokens, _ = states.shape
        return states.transpose(1, 2).reshape(rows, tokens, self.num_heads * self.head_dim)


def _norm(hidden: torch.Tensor, norm: Norm) -> torch.Tensor:
    weight, bias, eps = norm
    return F.layer_norm(hidden, weight.shape, weight, bias, eps)


def _lean_layer(layer: nn.Module) -> LeanLayer:
    attention, cross = layer.self_attn, layer.encoder_attn
    return LeanLayer(
        self_norm=_norm_of(layer.self_attn_layer_norm),
        query_key_value=_fused(
            [attention.q_proj, attention.k_proj, attention.v_proj], [attention.scaling, 1.0, 1.0]
        ),
        self_out=_projection(attention.out_proj),
        cross_norm=_norm_of(layer.encoder_attn_layer_norm),
        cross_query=_fused([cross.q_proj], [cross.scaling]),
        cross_out=_projection(cross.out_proj),
        mlp_norm=_norm_of(layer.final_layer_norm),
        fc1=_projection(layer.fc1),
        activation=layer.activation_fn,
        fc2=_projection(layer.fc2),
    )


def _fingerprint(model: WhisperForConditionalGeneration) -> tuple:
    """Each projection a LeanLayer holds: its class and its weight's storage (an int8 layer's packed
    weights), so that any change to them shows."""

    def mark(module: nn.Module) -> tuple:
        if internals.is_dynamic_int8(module):  # engine.fast_draft's int8 layers
            return type(module), id(internals.dynamic_int8_weights(module))
        weight = module.weight
        return type(module), weight.data_ptr(), internals.tensor_version(weight), weight.dtype, weight.device

    return tuple(
        mark(module)
        for layer in model.model.decoder.layers
        for attention in (layer.self_attn, layer.encoder_attn)
        for module in (
            attention.q_proj,
            attention.k_proj,
            attention.v_proj,
            attention.out_proj,
            layer.fc1,
            layer.fc2,
        )
    )


def _norm_of(module: nn.LayerNorm) -> Norm:
    return module.weight, module.bias, module.eps


def _projection(module: nn.Module) -> Projection:
    """The layer's product; an int8 layer's operator called directly (as its module would call it)."""
    return (
        _int8_product(internals.dynamic_int8_weights(module), module)
        if internals.is_dynamic_int8(module)
        else module
    )


def _int8_product(packed: torch.ScriptObject, layer: nn.Module) -> Projection:
    """The int8 product of packed weights, with the activation range the layer's version uses."""
    reduce_range = layer.version is not None and layer.version >= 4
    return lambda states: torch.ops.quantized.linear_dynamic(states, packed, reduce_range=reduce_range)


def _fused(modules: list[nn.Module], scales: list[float]) -> Projection:
    """One product computing every module's output (each times its scale), concatenated.

    Float layers: their rows concatenated (same class, so a PackedLinear stays packed). Int8 layers
    (per-channel): their int8 rows and per-row scales concatenated, so each output is what its own layer
    computes (the scale folded in exactly where it is a power of two, as 1 / sqrt(head_dim) is for 64)."""
    if internals.is_dynamic_int8(modules[0]):
        weights = [module.weight() for module in modules]
        int8 = torch.cat([weight.int_repr() for weight in weights])
        row_scales = torch.cat([w.q_per_channel_scales() * s for w, s in zip(weights, scales, strict=True)])
        zero_points = torch.cat([weight.q_per_channel_zero_points() for weight in weights])
        weight = internals.per_channel_int8(int8, row_scales, zero_points, 0)
        biases = [
            _bias(m.bias(), m.out_features, s, torch.float32) for m, s in zip(modules, scales, strict=True)
        ]
        bias = torch.cat(biases)
        return _int8_product(torch.ops.quantized.linear_prepack(weight, bias), modules[0])
    first = modules[0]
    with torch.no_grad():
        fused = nn.utils.skip_init(  # no random initialisation: it would draw from the global generator
            nn.Linear,
            first.in_features,
            sum(module.out_features for module in modules),
            device=first.weight.device,
            dtype=first.weight.dtype,
        )
        fused.weight.copy_(torch.cat([module.weight * s for module, s in zip(modules, scales, strict=True)]))
        biases = [
            _bias(m.bias, m.out_features, s, fused.bias.dtype) for m, s in zip(modules, scales, strict=True)
        ]
        fused.bias.copy_(torch.cat(biases))
    internals.swap_class(fused, type(first))
    return fused


def _bias(bias: torch.Tensor | None, size: int, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """A layer's bias times scale, on the CPU (a fused float layer copies it to its device); zeros for a
    layer without one (a key projection)."""
    if bias is None:
        return torch.zeros(size, dtype=dtype)
    return bias.detach().cpu() * scale
