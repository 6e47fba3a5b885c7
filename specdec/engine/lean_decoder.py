"""The draft's decoder step in plain tensor ops: what a Whisper decoder layer computes, without the modules.

Through transformers' decoder a whisper-tiny.en draft step makes ~711 operator calls; `LeanDecoder` runs
the same layers' weights (their own modules: int8, packed or restricted ones alike) in about 35 calls per
layer: layer norms, the projections, `scaled_dot_product_attention` on its own key/value tensors, and the
cross-attention keys and values computed once when the decoder is made. Measured on the bundled
tiny.en with the CPU default settings (2 threads, interleaved, 300 steps each): 8.2 ms against 9.2 ms
per step (1.14x; docs/benchmarks.md).

For a draft only, never the target: its float results may differ from transformers' by rounding (another
attention kernel, another order of additions), which can change what the draft proposes but never the
output, since the target verifies every proposed token. It keeps `CachedDecoder`'s interface and cache
strategy (per-row lengths, writes at explicit positions, a mask; see `engine.cache`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import WhisperForConditionalGeneration

from specdec.engine import kernels
from specdec.engine.cache import CAPACITY_STEP, RowLengths, feed_layout


class LeanDecoder(RowLengths):
    """Incremental decoding of a batch of rows with a draft model; row b has `lengths[b]` cached tokens."""

    def __init__(self, model: WhisperForConditionalGeneration, encoder_hidden_states: torch.Tensor) -> None:
        """encoder_hidden_states: (batch, positions, d_model), one row per window."""
        self.model = model
        self.decoder = model.model.decoder
        config = model.config
        self.num_heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.num_heads
        self.max_positions = config.max_target_positions
        self.lengths = [0] * encoder_hidden_states.shape[0]
        with torch.inference_mode(), kernels.active():
            self.cross = [
                (
                    self._heads(layer.encoder_attn.k_proj(encoder_hidden_states)),
                    self._heads(layer.encoder_attn.v_proj(encoder_hidden_states)),
                )
                for layer in self.decoder.layers
            ]
        empty = encoder_hidden_states.new_zeros(self.batch_size, self.num_heads, 0, self.head_dim)
        self.keys = [empty] * len(self.decoder.layers)
        self.values = [empty] * len(self.decoder.layers)

    @torch.inference_mode()
    def feed(self, token_ids: list[list[int]]) -> list[torch.Tensor]:
        """Append each row's tokens (any number, 0 included) to its cache; per row, logits
        (len(token_ids[b]), vocab) predicting the token after each."""
        device = self.model.device
        layout = feed_layout(self.lengths, token_ids, device)
        positions, input_ids, kv_length = layout.positions, layout.input_ids, layout.kv_length
        self._grow(layout.end_position)
        # each query sees the keys at positions up to its own (padding and stale positions never)
        mask = torch.arange(kv_length, device=device)[None, None, :] <= positions[:, :, None]
        index = positions[:, None, :, None].expand(-1, self.num_heads, -1, self.head_dim)
        decoder = self.decoder
        hidden = (
            decoder.embed_tokens(input_ids)
            + decoder.embed_positions.weight[positions.clamp(max=self.max_positions - 1)]
        )
        with kernels.active():
            for i, layer in enumerate(decoder.layers):
                hidden = self._layer(i, layer, hidden, index, mask[:, None], kv_length)
            logits = self.model.proj_out(decoder.layer_norm(hidden))
        self.lengths = [length + len(tokens) for length, tokens in zip(self.lengths, token_ids, strict=True)]
        return [logits[b, : len(tokens)] for b, tokens in enumerate(token_ids)]

    def _layer(
        self,
        i: int,
        layer: nn.Module,
        hidden: torch.Tensor,
        index: torch.Tensor,
        mask: torch.Tensor,
        kv_length: int,
    ) -> torch.Tensor:
        """One decoder layer: self-attention over the cache, cross-attention, the MLP (pre-norm, residual)."""
        attention = layer.self_attn
        normed = layer.self_attn_layer_norm(hidden)
        query = self._heads(attention.q_proj(normed) * attention.scaling)
        self.keys[i].scatter_(2, index, self._heads(attention.k_proj(normed)))
        self.values[i].scatter_(2, index, self._heads(attention.v_proj(normed)))
        keys, values = self.keys[i][:, :, :kv_length], self.values[i][:, :, :kv_length]
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=1.0)
        hidden = hidden + attention.out_proj(self._merge(attended))

        cross = layer.encoder_attn
        query = self._heads(cross.q_proj(layer.encoder_attn_layer_norm(hidden)) * cross.scaling)
        attended = F.scaled_dot_product_attention(query, *self.cross[i], scale=1.0)
        hidden = hidden + cross.out_proj(self._merge(attended))

        return hidden + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden))))

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
