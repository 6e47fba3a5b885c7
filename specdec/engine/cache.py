"""One model's decoder over a batch of windows, with one KV cache per row: feed, roll back, keep rows.

Every decoding runs on this cache, one clip being a batch of one.

Cache strategy: pad-and-mask with per-row lengths and position ids, on a self-attention cache written at
explicit positions (gpt-fast's KV cache, one write index per row). A feed writes row b's tokens at
positions lengths[b], lengths[b] + 1, ...; shorter rows are padded to the widest, and their padding writes
at the positions right after their real tokens. The attention mask lets each query see exactly the keys at
positions up to its own, so padding, rejected drafts and anything past a row's length are never read:
after a step a row's length is at most what it was fed, and every position from there on is rewritten by a
real token before any real query can reach it. Rolling back is lowering `lengths[b]`; nothing moves.

Why not realign (shift each row's cache so all rows end together, as left padding does): every step with
ragged acceptance would copy every row's whole cache, and the position ids would still be per row. Here a
step costs the widest row's tokens and a mask, and finished rows are dropped with `keep` (one index_select
of the caches, the only copy).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import Cache, DynamicCache, EncoderDecoderCache, WhisperForConditionalGeneration
from transformers.cache_utils import CacheLayerMixin
from transformers.modeling_outputs import BaseModelOutput

from specdec.engine import kernels, target_step

CAPACITY_STEP = 64  # cache positions are allocated in blocks of this many (rows rarely fill 448)


class PositionedLayer(CacheLayerMixin):
    """One decoder layer's self-attention keys/values (batch, heads, capacity, head_dim), written at the
    positions its owner set for this feed; returns the first `kv_length` positions of every row."""

    is_sliding = False

    def __init__(self, owner: CachedDecoder) -> None:
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, head_dim = key_states.shape
        self.keys = key_states.new_zeros(batch, heads, 0, head_dim)
        self.values = value_states.new_zeros(batch, heads, 0, head_dim)
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.owner.end_position > self.keys.shape[2]:
            self._grow(-(-self.owner.end_position // CAPACITY_STEP) * CAPACITY_STEP)
        index = self.owner.write_positions[:, None, :, None].expand_as(
            key_states
        )  # (batch, heads, width, dim)
        self.keys.scatter_(2, index, key_states)
        self.values.scatter_(2, index, value_states)
        kv_length = self.owner.kv_length
        return self.keys[:, :, :kv_length], self.values[:, :, :kv_length]

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.keys.shape[2]
        self.keys = torch.nn.functional.pad(self.keys, (0, 0, 0, extra))
        self.values = torch.nn.functional.pad(self.values, (0, 0, 0, extra))

    def add_rows(self, count: int) -> None:
        if self.is_initialized:
            batch, heads, capacity, head_dim = self.keys.shape
            self.keys = torch.cat([self.keys, self.keys.new_zeros(count, heads, capacity, head_dim)])
            self.values = torch.cat([self.values, self.values.new_zeros(count, heads, capacity, head_dim)])

    def select(self, rows: torch.Tensor) -> None:
        if self.is_initialized:
            self.keys = self.keys.index_select(0, rows)
            self.values = self.values.index_select(0, rows)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.kv_length, 0

    def get_seq_length(self) -> int:
        return self.owner.kv_length

    def get_max_length(self) -> int:
        return -1


@dataclass(frozen=True)
class FeedLayout:
    """Where a feed's tokens go: row b's at positions lengths[b], lengths[b] + 1, ...; shorter rows padded
    (with token 0) to the widest, their padding written at the positions right after their tokens."""

    positions: torch.Tensor  # (batch, width)
    input_ids: torch.Tensor  # (batch, width)
    kv_length: int  # the longest row's length after the feed: the keys to attend over
    end_position: int  # one past the last position written, padding included


def feed_layout(lengths: list[int], token_ids: list[list[int]], device: torch.device) -> FeedLayout:
    width = max(max(len(tokens) for tokens in token_ids), 1)
    positions = torch.tensor(lengths, device=device)[:, None] + torch.arange(width, device=device)
    padded = [tokens + [0] * (width - len(tokens)) for tokens in token_ids]
    kv_length = max(length + len(tokens) for length, tokens in zip(lengths, token_ids, strict=True))
    input_ids = torch.tensor(padded, dtype=torch.long, device=device)
    return FeedLayout(positions, input_ids, kv_length, max(lengths) + width)


class RowLengths:
    """A decoder cache over a batch of rows, row b holding `lengths[b]` tokens (`CachedDecoder`, and
    `engine.lean_decoder.LeanDecoder` for drafts): rolling back is lowering a length."""

    lengths: list[int]

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    def rollback(self, lengths: list[int]) -> None:
        """Row b forgets every cached token from position lengths[b] on (a shorter length only)."""
        self.lengths = [min(old, new) for old, new in zip(self.lengths, lengths, strict=True)]


class CachedDecoder(RowLengths):
    """Incremental decoding of a batch of rows with one model; row b has `lengths[b]` tokens in its cache.

    Uses the packed CPU kernels where `kernels.pack` installed them (it installs nothing itself)."""

    def __init__(self, model: WhisperForConditionalGeneration, encoder_hidden_states: torch.Tensor) -> None:
        """encoder_hidden_states: (batch, 1500, d_model), one row per window."""
        self.model = model
        self.encoder_outputs = BaseModelOutput(last_hidden_state=encoder_hidden_states)
        # cross-attention: sized by decoder layers (config.num_hidden_layers is the encoder's)
        cache_config = copy.copy(model.config)
        cache_config.num_hidden_layers = model.config.decoder_layers
        self.layers = [PositionedLayer(self) for _ in range(model.config.decoder_layers)]
        self.cache = EncoderDecoderCache(Cache(layers=self.layers), DynamicCache(config=cache_config))
        self.lengths = [0] * encoder_hidden_states.shape[0]
        self.max_positions = model.config.max_target_positions
        # set by each feed for the layers: where each token goes, the keys to attend over, the cache end
        self.write_positions = torch.zeros(0, 0, dtype=torch.long)  # (batch, width)
        self.kv_length = 0  # the longest row's length after this feed
        self.end_position = 0  # one past the last position written, padding included

    @torch.inference_mode()
    def feed(self, token_ids: list[list[int]]) -> list[torch.Tensor]:
        """Append each row's tokens (any number, 0 included) to its cache; per row, logits
        (len(token_ids[b]), vocab) predicting the token after each."""
        device = self.model.device
        layout = feed_layout(self.lengths, token_ids, device)
        positions, input_ids = layout.positions, layout.input_ids
        self.write_positions, self.kv_length, self.end_position = (
            positions,
            layout.kv_length,
            layout.end_position,
        )
        key_positions = torch.arange(self.kv_length, device=device)
        hidden = key_positions[None, None, :] > positions[:, :, None]  # (batch, width, kv_length)
        dtype = self.model.dtype
        mask = torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill_(
            hidden, torch.finfo(dtype).min
        )
        position_ids = positions.clamp(max=self.max_positions - 1)  # padding may run past
        with kernels.active():
            if target_step.usable(self.model, self._cross_computed()):
                cross = self.cache.cross_attention_cache.layers
                logits = target_step.decoder_logits(
                    self.model, self.layers, cross, input_ids, position_ids, mask[:, None]
                )
            else:
                logits = self.model(
                    encoder_outputs=self.encoder_outputs,
                    decoder_input_ids=input_ids,
                    decoder_attention_mask=mask[:, None],  # (batch, 1, width, kv_length): used as given
                    decoder_position_ids=position_ids,
                    past_key_values=self.cache,
                    use_cache=True,
                ).logits
        self.lengths = [length + len(tokens) for length, tokens in zip(self.lengths, token_ids, strict=True)]
        return [logits[b, : len(tokens)] for b, tokens in enumerate(token_ids)]

    def _cross_computed(self) -> bool:
        """Every layer's cross-attention keys and values are in the cache (after the first feed)."""
        return all(self.cache.is_updated.get(i) for i in range(len(self.layers)))

    def peek(self, rows: list[int], token_ids: list[int]) -> torch.Tensor:
        """Logits (len(rows), vocab) predicting the token after `token_ids` appended to each of `rows`, the
        cache then as it was (the cross-attention keys and values stay computed, for the rows' decoding)."""
        lengths = list(self.lengths)
        logits = self.feed([token_ids if b in rows else [] for b in range(self.batch_size)])
        self.rollback(lengths)
        return torch.stack([logits[b][-1] for b in rows])

    @torch.inference_mode()
    def add(self, encoder_hidden_states: torch.Tensor) -> None:
        """New rows at the end of the batch, with no tokens yet: encoder_hidden_states (rows, 1500,
        d_model). Their cross-attention keys and values are computed now if the others' already were, as
        the model's attention computes them."""
        hidden = torch.cat([self.encoder_outputs.last_hidden_state, encoder_hidden_states])
        self.encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
        count = encoder_hidden_states.shape[0]
        for layer in self.layers:
            layer.add_rows(count)
        cross = self.cache.cross_attention_cache
        with kernels.active():
            for i, layer in enumerate(self.model.model.decoder.layers):
                if self.cache.is_updated.get(i):
                    keys, values = cross_keys_values(layer.encoder_attn, encoder_hidden_states)
                    cross.layers[i].keys = torch.cat([cross.layers[i].keys, keys])
                    cross.layers[i].values = torch.cat([cross.layers[i].values, values])
        self.lengths += [0] * count

    def cross_keys_values_of(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Row `row`'s cross-attention keys and values per decoder layer, (1, heads, 1500, head_dim) each,
        copied (they outlive the row); None until the first feed has computed them."""
        cross = self.cache.cross_attention_cache
        if not self._cross_computed():
            return None
        rows = slice(row, row + 1)
        return [(layer.keys[rows].clone(), layer.values[rows].clone()) for layer in cross.layers]

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (indices into the current batch, in the order to keep)."""
        if rows == list(range(self.batch_size)):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.model.device)
        for layer in self.layers:
            layer.select(index)
        self.cache.cross_attention_cache.batch_select_indices(index)
        hidden = self.encoder_outputs.last_hidden_state.index_select(0, index)
        self.encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
        self.lengths = [self.lengths[row] for row in rows]


def cross_keys_values(attention, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's cross-attention keys and values (rows, heads, 1500, head_dim), as
    `WhisperAttention` computes them on its first call."""
    rows = encoder_hidden_states.shape[0]
    shape = (rows, -1, attention.num_heads, attention.head_dim)
    keys = attention.k_proj(encoder_hidden_states).view(shape).transpose(1, 2).contiguous()
    values = attention.v_proj(encoder_hidden_states).view(shape).transpose(1, 2).contiguous()
    return keys, values
