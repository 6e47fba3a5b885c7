"""One decoder step for every model and device: tokens at explicit positions in, logits out.

gpt-fast's pattern: each row's self-attention keys and values live in a cache preallocated for its window
(`SelfAttentionCache`: rows, heads, capacity, head_dim), a step writes its tokens' keys and values at the
positions it is given and attends over the first `kv_length` positions through a mask that lets each query
see the keys at positions up to its own, so padding, rejected drafts and anything past a row's length are
never read; rolling back is the caller lowering its length, nothing moves. Everything the step reads is
an argument: no cache reads positions its owner set on it before the call.

Two kinds of layer, one step (`decoder_step`):
- `ExactLayers`, the target's: the model's own modules and transformers' operations in their order (the
  query scaled after its projection, the attention interface the model is configured with), so that its
  logits are the model's forward's bit for bit (`tests/test_step.py`), and the output `generate()`'s;
- `LeanLayers`, a draft's: the query, key and value in one product (int8, packed or restricted weights
  alike, `engine.lean_decoder`), free to differ from transformers by rounding, since the target verifies
  every token a draft proposes.

The linear products are the device's: on a CPU the modules' packed oneDNN layouts where `engine.kernels`
installed them, elsewhere the stock ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import WhisperForConditionalGeneration
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from specdec import internals
from specdec.engine.host import send

CrossKeysValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (rows, heads, frames, head_dim) x2
CAPACITY_STEP = 64  # cache positions are allocated in blocks of this many (rows rarely fill the context)


class SelfAttentionCache:
    """Every decoder layer's self-attention keys and values, (rows, heads, capacity, head_dim): a step
    writes at the positions it is given. Positions run up to `limit`, the model's context; position `limit`
    itself is scratch, where padding that runs past a row's last real position writes (no query reads it).
    Allocated for `capacity` positions and grown in blocks as steps reach further (a device that replays
    captured steps allocates all of them at once: `capacity=limit + 1`)."""

    def __init__(self, layers: int, rows: int, heads: int, head_dim: int, limit: int, like: torch.Tensor,
                 capacity: int = CAPACITY_STEP) -> None:  # fmt: skip
        self.limit = limit
        shape = (rows, heads, min(capacity, limit + 1), head_dim)
        self.keys = [like.new_zeros(shape) for _ in range(layers)]
        self.values = [like.new_zeros(shape) for _ in range(layers)]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def room_for(self, end_position: int) -> None:
        """Positions up to end_position (exclusive, at most the scratch one) allocated."""
        end_position = min(end_position, self.limit + 1)
        if end_position > self.capacity:
            extra = min(-(-end_position // CAPACITY_STEP) * CAPACITY_STEP, self.limit + 1) - self.capacity
            self.keys = [F.pad(keys, (0, 0, 0, extra)) for keys in self.keys]
            self.values = [F.pad(values, (0, 0, 0, extra)) for values in self.values]

    def write(self, layer: int, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """keys, values (rows, heads, width, head_dim) at positions (rows, width), each at most `limit`."""
        index = positions[:, None, :, None].expand_as(keys)
        self.keys[layer].scatter_(2, index, keys)
        self.values[layer].scatter_(2, index, values)

    def read(self, layer: int, kv_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer][:, :, :kv_length], self.values[layer][:, :, :kv_length]

    def add_rows(self, count: int) -> None:
        self.keys = [_with_rows(keys, count) for keys in self.keys]
        self.values = [_with_rows(values, count) for values in self.values]

    def keep(self, rows: torch.Tensor) -> None:
        self.keys = [keys.index_select(0, rows) for keys in self.keys]
        self.values = [values.index_select(0, rows) for values in self.values]


def _with_rows(cache: torch.Tensor, count: int) -> torch.Tensor:
    return torch.cat([cache, cache.new_zeros(count, *cache.shape[1:])])


@dataclass(frozen=True)
class Feed:
    """Where a step's tokens go: row b's at positions lengths[b], lengths[b] + 1, ...; shorter rows padded
    (with token 0) to the widest, their padding written at the positions right after their tokens (or at
    the cache's scratch position, past the context)."""

    input_ids: torch.Tensor  # (rows, width)
    positions: torch.Tensor  # (rows, width): where each token's keys and values are written
    position_ids: torch.Tensor  # (rows, width): each token's learned position (padding's kept in the table)
    kv_length: int  # the keys to attend over: the longest row's length after the feed
    end_position: int  # one past the last position written, padding included
    whole_cache: bool = False  # attends over every position of a cache of fixed capacity (`fixed`)

    @classmethod
    def of(cls, lengths: list[int], token_ids: list[list[int]], limit: int, device: torch.device) -> Feed:
        """Row b's tokens token_ids[b] after its lengths[b] cached ones; `limit`: the context's length."""
        width = max(max(len(tokens) for tokens in token_ids), 1)
        padded = [token for tokens in token_ids for token in tokens + [0] * (width - len(tokens))]
        sent = send([*lengths, *padded], device)  # one copy, not waiting for the device
        starts, input_ids = sent[: len(lengths)], sent[len(lengths) :].view(len(lengths), width)
        positions = starts[:, None] + torch.arange(width, device=device)
        kv_length = max(length + len(tokens) for length, tokens in zip(lengths, token_ids, strict=True))
        end_position = min(max(lengths) + width, limit + 1)
        return cls(
            input_ids, positions.clamp(max=limit), positions.clamp(max=limit - 1), kv_length, end_position
        )

    @classmethod
    def fixed(cls, starts: torch.Tensor, input_ids: torch.Tensor, limit: int) -> Feed:
        """A step of fixed shape (`engine.replay`): row b's tokens input_ids[b] (rows, width) from position
        starts[b] (rows,) on, attending over the whole cache (limit + 1 positions). The positions are computed
        here from tensors, so that a captured step reads them from its input."""
        positions = starts[:, None] + torch.arange(input_ids.shape[1], device=input_ids.device)
        return cls(
            input_ids, positions.clamp(max=limit), positions.clamp(max=limit - 1), limit + 1, limit + 1, True
        )


class Layers(Protocol):
    """A decoder's layers as a step runs them (`ExactLayers`, `LeanLayers`)."""

    def mask(self, feed: Feed, dtype: torch.dtype) -> torch.Tensor | None:
        """What the self-attention adds to (float) or keeps (bool) of each query's scores over kv_length."""
        ...

    def layer(
        self,
        index: int,
        hidden: torch.Tensor,
        feed: Feed,
        cache: SelfAttentionCache,
        cross: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Layer `index` on hidden (rows, width, d_model): its new keys and values written to the cache."""
        ...


def decoder_step(
    model: WhisperForConditionalGeneration,
    layers: Layers,
    cache: SelfAttentionCache,
    cross: CrossKeysValues,
    feed: Feed,
) -> torch.Tensor:
    """Logits (rows, width, vocab) of the decoder fed `feed`, writing its keys and values into `cache`."""
    decoder = model.model.decoder
    hidden = decoder.embed_tokens(feed.input_ids) + decoder.embed_positions.weight[feed.position_ids]
    mask = layers.mask(feed, hidden.dtype)
    for index, layer_cross in enumerate(cross):
        hidden = layers.layer(index, hidden, feed, cache, layer_cross, mask)
    return model.proj_out(decoder.layer_norm(hidden))


class ExactLayers:
    """The target's layers: `WhisperDecoderLayer`'s operations on its own modules, in its order."""

    def __init__(self, model: WhisperForConditionalGeneration) -> None:
        self.decoder_layers = list(model.model.decoder.layers)
        self.implementation = internals.attention_implementation(model.config)

    def mask(self, feed: Feed, dtype: torch.dtype) -> torch.Tensor:
        """transformers' additive mask (rows, 1, width, kv_length): 0 where a query may look, the dtype's
        minimum elsewhere."""
        keys = torch.arange(feed.kv_length, device=feed.positions.device)
        hidden = keys[None, None, :] > feed.positions[:, :, None]
        mask = torch.zeros(hidden.shape, dtype=dtype, device=hidden.device)
        return mask.masked_fill_(hidden, torch.finfo(dtype).min)[:, None]

    def layer(self, index, hidden, feed, cache, cross, mask):
        layer = self.decoder_layers[index]  # pre-norm, residual
        normed = layer.self_attn_layer_norm(hidden)
        hidden = hidden + self._self_attention(layer.self_attn, normed, index, feed, cache, mask)
        normed = layer.encoder_attn_layer_norm(hidden)
        hidden = hidden + self._attend(layer.encoder_attn, _query(layer.encoder_attn, normed), *cross, None)
        return hidden + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden))))

    def _self_attention(self, attention, hidden, index, feed, cache, mask) -> torch.Tensor:
        rows, width, _ = hidden.shape
        kv_shape = (rows, -1, attention.num_heads, attention.head_dim)
        query = _query(attention, hidden)
        keys = attention.k_proj(hidden).view(kv_shape).transpose(1, 2).contiguous()
        values = attention.v_proj(hidden).view(kv_shape).transpose(1, 2).contiguous()
        cache.write(index, feed.positions, keys, values)
        return self._attend(attention, query, *cache.read(index, feed.kv_length), mask)

    def _attend(self, attention, query, keys, values, mask) -> torch.Tensor:
        """The model's attention (scale 1: the query is scaled) and its output projection. For "sdpa",
        transformers' `sdpa_attention_forward`'s one call, made directly (its dispatch costs more than
        the call on a CPU); any other implementation through transformers' own interface."""
        rows, _, width, _ = query.shape
        if self.implementation == "sdpa":
            attended = F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, dropout_p=0.0, scale=1.0, is_causal=False
            )
            attended = attended.transpose(1, 2).contiguous()
        else:
            interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.implementation, _eager_attention)
            attended, _ = interface(attention, query, keys, values, mask, dropout=0.0, scaling=1.0)
        return attention.out_proj(attended.reshape(rows, width, -1).contiguous())


def _query(attention, hidden: torch.Tensor) -> torch.Tensor:
    """WhisperAttention's query: projected, then scaled (the order transformers keeps), (rows, heads,
    width, head_dim)."""
    rows, width, _ = hidden.shape
    shape = (rows, width, -1, attention.head_dim)
    return (attention.q_proj(hidden) * attention.scaling).view(shape).transpose(1, 2).contiguous()


def _eager_attention(module, query, keys, values, mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' Whisper `eager_attention_forward` (the interface's default), for a model configured
    with "eager"."""
    from transformers.models.whisper.modeling_whisper import eager_attention_forward

    return eager_attention_forward(module, query, keys, values, mask, scaling=scaling, dropout=dropout)


def cross_keys_values(attention, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's cross-attention keys and values (rows, heads, frames, head_dim), as
    `WhisperAttention` computes them on its first call."""
    rows = encoder_hidden_states.shape[0]
    shape = (rows, -1, attention.num_heads, attention.head_dim)
    keys = attention.k_proj(encoder_hidden_states).view(shape).transpose(1, 2).contiguous()
    values = attention.v_proj(encoder_hidden_states).view(shape).transpose(1, 2).contiguous()
    return keys, values


def unsupported(model: WhisperForConditionalGeneration) -> str | None:
    """Why the step cannot run this model as its forward would (None: it can). It calls the decoder's
    products and norms as modules, so their hooks run, but not the model, the decoder, its layers or their
    attention modules: a hook there (a user's, accelerate's device maps and offloading) would be skipped,
    as would a module left in training mode's dropout."""
    decoder = model.model.decoder
    modules = [model, model.model, decoder, *decoder.layers]
    modules += [attention for layer in decoder.layers for attention in (layer.self_attn, layer.encoder_attn)]
    if any(internals.has_forward_hooks(module) for module in modules):
        return "a hook on the model, its decoder, a decoder layer or an attention module"
    if internals.has_global_forward_hooks():
        return "a global module hook"
    if any(module.training for module in modules):  # those that drop out in training mode
        return "a decoder module in training mode (call model.eval())"
    return None
