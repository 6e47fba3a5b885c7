"""The draft's decoder step in plain tensor ops: what a Whisper decoder layer computes, without the modules.

Through transformers' decoder a whisper-tiny.en draft step makes ~711 operator calls and 33 products;
`LeanDecoder` runs the same layers' weights (int8, packed or restricted ones alike) in about 25 calls
and 6 products per layer, without nn.Module's dispatch: the query, key and value projections are one
product (`LeanLayer`, made once per model: the int8 rows and their per-row scales, or the float rows,
concatenated, with the attention's scaling folded into the query's rows), `scaled_dot_product_attention`
runs on the decoder's own key and value tensors, and the cross-attention keys and values are computed
once when the decoder is made. Measured on the bundled tiny.en with the CPU default settings (2 threads,
jfk's 601 encoder positions): 6.4 ms per step against 9.7 ms through transformers' decoder in
`python -m benchmarks cpu` (passive OpenMP waiting); alone, 3.6 ms against 5.0 ms with one product per
projection and the modules called (docs/benchmarks.md).

For a draft only, never the target: its float results may differ from transformers' by rounding (another
attention kernel, another order of additions), which can change what the draft proposes but never the
output, since the target verifies every proposed token. It keeps `CachedDecoder`'s interface and cache
strategy (per-row lengths, writes at explicit positions, a mask; see `engine.cache`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import WhisperForConditionalGeneration

from specdec.engine import kernels
from specdec.engine.cache import CAPACITY_STEP, RowLengths, feed_layout

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


class LeanDecoder(RowLengths):
    """Incremental decoding of a batch of rows with a draft model; row b has `lengths[b]` cached tokens."""

    def __init__(self, model: WhisperForConditionalGeneration, encoder_hidden_states: torch.Tensor) -> None:
        """encoder_hidden_states: (batch, positions, d_model), one row per window."""
        self.model = model
        self.decoder = model.model.decoder
        self.layers = lean_layers(model)
        config = model.config
        self.num_heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.num_heads
        self.max_positions = config.max_target_positions
        self.lengths = [0] * encoder_hidden_states.shape[0]
        self.cross = self._cross(encoder_hidden_states)
        empty = encoder_hidden_states.new_zeros(self.batch_size, self.num_heads, 0, self.head_dim)
        self.keys = [empty] * len(self.layers)
        self.values = [empty] * len(self.layers)

    def add(self, encoder_hidden_states: torch.Tensor) -> None:
        """New rows at the end of the batch, with no tokens yet: encoder_hidden_states (rows, positions,
        d_model), as many positions as the others'."""
        cross = self._cross(encoder_hidden_states)
        self.cross = [
            (torch.cat([keys, new_keys]), torch.cat([values, new_values]))
            for (keys, values), (new_keys, new_values) in zip(self.cross, cross, strict=True)
        ]
        count = encoder_hidden_states.shape[0]
        self.keys = [_with_empty_rows(keys, count) for keys in self.keys]
        self.values = [_with_empty_rows(values, count) for values in self.values]
        self.lengths += [0] * count

    def _cross(self, encoder_hidden_states: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's cross-attention keys and values, (rows, heads, positions, head_dim)."""
        with torch.inference_mode(), kernels.active():
            return [
                (
                    self._heads(layer.encoder_attn.k_proj(encoder_hidden_states)),
                    self._heads(layer.encoder_attn.v_proj(encoder_hidden_states)),
                )
                for layer in self.decoder.layers
            ]

    @torch.inference_mode()
    def feed(self, token_ids: list[list[int]]) -> list[torch.Tensor]:
        """Append each row's tokens (any number, 0 included) to its cache; per row, logits
        (len(token_ids[b]), vocab) predicting the token after each."""
        device = self.model.device
        layout = feed_layout(self.lengths, token_ids, device)
        positions, input_ids, kv_length = layout.positions, layout.input_ids, layout.kv_length
        self._grow(layout.end_position)
        # each query sees the keys at positions up to its own (padding and stale positions never); one
        # row's one token sees every key
        mask = None
        if positions.numel() > 1:
            mask = (torch.arange(kv_length, device=device)[None, None, :] <= positions[:, :, None])[:, None]
        index = positions[:, None, :, None].expand(-1, self.num_heads, -1, self.head_dim)
        decoder = self.decoder
        hidden = (
            decoder.embed_tokens(input_ids)
            + decoder.embed_positions.weight[positions.clamp(max=self.max_positions - 1)]
        )
        with kernels.active():
            for i, layer in enumerate(self.layers):
                hidden = self._layer(i, layer, hidden, index, mask, kv_length)
            logits = self.model.proj_out(_norm(hidden, _norm_of(decoder.layer_norm)))
        self.lengths = [length + len(tokens) for length, tokens in zip(self.lengths, token_ids, strict=True)]
        return [logits[b, : len(tokens)] for b, tokens in enumerate(token_ids)]

    def _layer(
        self,
        i: int,
        layer: LeanLayer,
        hidden: torch.Tensor,
        index: torch.Tensor,
        mask: torch.Tensor | None,
        kv_length: int,
    ) -> torch.Tensor:
        """One decoder layer: self-attention over the cache, cross-attention, the MLP (pre-norm, residual)."""
        batch, tokens, _ = hidden.shape
        query_key_value = layer.query_key_value(_norm(hidden, layer.self_norm))
        query, key, value = query_key_value.view(batch, tokens, 3, self.num_heads, self.head_dim).permute(
            2, 0, 3, 1, 4
        )  # each (batch, heads, tokens, head_dim)
        self.keys[i].scatter_(2, index, key)
        self.values[i].scatter_(2, index, value)
        keys, values = self.keys[i][:, :, :kv_length], self.values[i][:, :, :kv_length]
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=1.0)
        hidden = hidden + layer.self_out(self._merge(attended))

        query = self._heads(layer.cross_query(_norm(hidden, layer.cross_norm)))
        attended = F.scaled_dot_product_attention(query, *self.cross[i], scale=1.0)
        hidden = hidden + layer.cross_out(self._merge(attended))

        return hidden + layer.fc2(layer.activation(layer.fc1(_norm(hidden, layer.mlp_norm))))

    def _heads(self, states: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, d_model) -> (batch, heads, tokens, head_dim)."""
        batch, tokens, _ = states.shape
        return states.view(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge(self, states: torch.Tensor) -> torch.Tensor:
        """(batch, heads, tokens, head_dim) -> (batch, tokens, d_model)."""
        batch, _, tokens, _ = states.shape
        return states.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim)

    def _grow(self, end_position: int) -> None:
        """Room in every layer's cache for positions up to end_position (in blocks of CAPACITY_STEP)."""
        capacity = self.keys[0].shape[2]
        if end_position <= capacity:
            return
        extra = -(-end_position // CAPACITY_STEP) * CAPACITY_STEP - capacity
        self.keys = [F.pad(keys, (0, 0, 0, extra)) for keys in self.keys]
        self.values = [F.pad(values, (0, 0, 0, extra)) for values in self.values]

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (indices into the current batch, in the order to keep)."""
        if rows == list(range(self.batch_size)):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.model.device)
        self.keys = [keys.index_select(0, index) for keys in self.keys]
        self.values = [values.index_select(0, index) for values in self.values]
        self.cross = [
            (keys.index_select(0, index), values.index_select(0, index)) for keys, values in self.cross
        ]
        self.lengths = [self.lengths[row] for row in rows]


def _with_empty_rows(cache: torch.Tensor, count: int) -> torch.Tensor:
    return torch.cat([cache, cache.new_zeros(count, *cache.shape[1:])])


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
        if _is_int8(module):
            return type(module), id(module._packed_params._packed_params)
        weight = module.weight
        return type(module), weight.data_ptr(), weight._version, weight.dtype, weight.device

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


def _is_int8(module: nn.Module) -> bool:
    """A dynamically quantised int8 linear layer (`engine.fast_draft`'s)."""
    return hasattr(module, "_packed_params")


def _projection(module: nn.Module) -> Projection:
    """The layer's product; an int8 layer's operator called directly (as its module would call it)."""
    return _int8_product(module._packed_params._packed_params, module) if _is_int8(module) else module


def _int8_product(packed: torch.ScriptObject, layer: nn.Module) -> Projection:
    """The int8 product of packed weights, with the activation range the layer's version uses."""
    reduce_range = layer.version is not None and layer.version >= 4
    return lambda states: torch.ops.quantized.linear_dynamic(states, packed, reduce_range=reduce_range)


def _fused(modules: list[nn.Module], scales: list[float]) -> Projection:
    """One product computing every module's output (each times its scale), concatenated.

    Float layers: their rows concatenated (same class, so a PackedLinear stays packed). Int8 layers
    (per-channel): their int8 rows and per-row scales concatenated, so each output is what its own layer
    computes (the scale folded in exactly where it is a power of two, as 1 / sqrt(head_dim) is for 64)."""
    if _is_int8(modules[0]):
        weights = [module.weight() for module in modules]
        int8 = torch.cat([weight.int_repr() for weight in weights])
        row_scales = torch.cat([w.q_per_channel_scales() * s for w, s in zip(weights, scales, strict=True)])
        zero_points = torch.cat([weight.q_per_channel_zero_points() for weight in weights])
        weight = torch._make_per_channel_quantized_tensor(int8, row_scales, zero_points, 0)
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
    fused.__class__ = type(first)
    return fused


def _bias(bias: torch.Tensor | None, size: int, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """A layer's bias times scale, on the CPU (a fused float layer copies it to its device); zeros for a
    layer without one (a key projection)."""
    if bias is None:
        return torch.zeros(size, dtype=dtype)
    return bias.detach().cpu() * scale
