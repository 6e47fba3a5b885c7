"""One model's decoder over a batch of windows, with one KV cache per row: feed, roll back, keep rows.

Every decoding runs on this cache, one clip being a batch of one; the step itself is `engine.step`'s (the
target's exact layers, or a draft's lean ones).

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

import weakref

import torch
from transformers import WhisperForConditionalGeneration

from specdec.engine import kernels, replay
from specdec.engine.host import send
from specdec.engine.step import (
    CAPACITY_STEP,
    CrossKeysValues,
    ExactLayers,
    Feed,
    Layers,
    SelfAttentionCache,
    cross_keys_values,
    decoder_step,
    unsupported,
)


class RowLengths:
    """A decoder cache over a batch of rows, row b holding `lengths[b]` tokens: rolling back is lowering a
    length."""

    lengths: list[int]

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    def rollback(self, lengths: list[int]) -> None:
        """Row b forgets every cached token from position lengths[b] on (a shorter length only)."""
        self.lengths = [min(old, new) for old, new in zip(self.lengths, lengths, strict=True)]


class CachedDecoder(RowLengths):
    """Incremental decoding of a batch of rows with one model; row b has `lengths[b]` tokens in its cache.

    Uses the packed CPU kernels where `kernels.pack` installed them, and fixed shapes (steps replayed as
    CUDA graphs) where `replay.enable` turned them on for the model (it turns on neither itself)."""

    def __init__(
        self,
        model: WhisperForConditionalGeneration,
        encoder_hidden_states: torch.Tensor,
        layers: Layers | None = None,
        capacity: int = CAPACITY_STEP,
    ) -> None:
        """encoder_hidden_states: (batch, frames, d_model), one row per window; layers: how the step runs the
        model's layers (default: the target's exact ones, refused for a model they cannot reproduce);
        capacity: cache positions allocated at first (grown as needed; fixed shapes hold the whole
        context)."""
        self.model = model
        self.layers = layers or ExactLayers(model)
        if isinstance(self.layers, ExactLayers) and (problem := unsupported(model)) is not None:
            raise ValueError(f"the decoder step cannot reproduce this model's forward: {problem}")
        config = model.config
        attention = model.model.decoder.layers[0].self_attn
        rows = encoder_hidden_states.shape[0]
        self.limit = config.max_target_positions
        self.lengths = [0] * rows
        self.replay = replay.replay_of(model)
        self._held: list[replay.Slots | None] = [None]  # fixed shapes: the slots the rows live in
        if self.replay is None:
            self.cache = SelfAttentionCache(
                config.decoder_layers, rows, attention.num_heads, attention.head_dim, self.limit,
                encoder_hidden_states, capacity,
            )  # fmt: skip
            self.cross = self._cross(encoder_hidden_states)
            return
        self._like = encoder_hidden_states.new_empty(0)  # the storage's dtype and device
        self._frames = encoder_hidden_states.shape[1]
        weakref.finalize(self, _release, self.replay, self._held)  # the shared slots, for the next decoding
        self._arrange(list(range(0)), rows)
        self._write_cross(0, encoder_hidden_states)

    @torch.inference_mode()
    def _cross(self, encoder_hidden_states: torch.Tensor) -> CrossKeysValues:
        """Each layer's cross-attention keys and values for these rows, once for their window."""
        with kernels.active():
            layers = self.model.model.decoder.layers
            return [cross_keys_values(layer.encoder_attn, encoder_hidden_states) for layer in layers]

    @torch.inference_mode()
    def feed(self, token_ids: list[list[int]]) -> list[torch.Tensor]:
        """Append each row's tokens (any number, 0 included) to its cache; per row, logits
        (len(token_ids[b]), vocab) predicting the token after each."""
        with kernels.active():
            if self.replay is not None:
                logits = self.replay.step(self._held[0], self.layers, self.lengths, token_ids)
            else:
                feed = Feed.of(self.lengths, token_ids, self.limit, self.model.device)
                self.cache.room_for(feed.end_position)
                logits = decoder_step(self.model, self.layers, self.cache, self.cross, feed)
        self.lengths = [length + len(tokens) for length, tokens in zip(self.lengths, token_ids, strict=True)]
        return [logits[b, : len(tokens)] for b, tokens in enumerate(token_ids)]

    def peek(self, rows: list[int], token_ids: list[int]) -> torch.Tensor:
        """Logits (len(rows), vocab) predicting the token after `token_ids` appended to each of `rows`, the
        cache then as it was."""
        lengths = list(self.lengths)
        logits = self.feed([token_ids if b in rows else [] for b in range(self.batch_size)])
        self.rollback(lengths)
        return torch.stack([logits[b][-1] for b in rows])

    def add(self, encoder_hidden_states: torch.Tensor) -> None:
        """New rows at the end of the batch, with no tokens yet: encoder_hidden_states (rows, frames,
        d_model), as many frames as the others'."""
        count, first = encoder_hidden_states.shape[0], self.batch_size
        if self.replay is not None:
            self._arrange(list(range(first)), first + count)
            self._write_cross(first, encoder_hidden_states)
        else:
            self.cache.add_rows(count)
            self.cross = [
                (torch.cat([keys, new_keys]), torch.cat([values, new_values]))
                for (keys, values), (new_keys, new_values) in zip(
                    self.cross, self._cross(encoder_hidden_states), strict=True
                )
            ]
        self.lengths += [0] * count

    def cross_keys_values_of(self, row: int) -> CrossKeysValues:
        """Row `row`'s cross-attention keys and values per decoder layer, (1, heads, frames, head_dim) each,
        copied (they outlive the row)."""
        rows = slice(row, row + 1)
        return [(keys[rows].clone(), values[rows].clone()) for keys, values in self.cross]

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (indices into the current batch, in the order to keep)."""
        if rows == list(range(self.batch_size)):
            return
        if self.replay is not None:
            self._arrange(rows, len(rows))
        else:
            index = send(rows, self.model.device)
            self.cache.keep(index)
            self.cross = [
                (keys.index_select(0, index), values.index_select(0, index)) for keys, values in self.cross
            ]
        self.lengths = [self.lengths[row] for row in rows]

    def _arrange(self, rows: list[int], total: int) -> None:
        """Fixed shapes: rows `rows` of the slots (in that order) in the first slots of storage for `total`
        rows: the same slots while the bucket fits, else the bucket's (released when no row is left)."""
        held = self._held[0]
        if held is not None and total and replay.bucket(total) == held.size:
            if rows != list(range(len(rows))):
                held.copy_rows(held, rows)
            return
        slots = self.replay.lease(total, self._frames, self.layers, self._like) if total else None
        if held is not None:
            if slots is not None:
                slots.copy_rows(held, rows)
            self.replay.release(held)
        self._held[0] = slots
        if slots is not None:
            self.cache, self.cross = slots.cache, slots.cross

    @torch.inference_mode()
    def _write_cross(self, first: int, encoder_hidden_states: torch.Tensor) -> None:
        """Fixed shapes: the cross-attention keys and values of new rows into slots first, first + 1, ..."""
        rows = slice(first, first + encoder_hidden_states.shape[0])
        for (keys, values), (new_keys, new_values) in zip(
            self.cross, self._cross(encoder_hidden_states), strict=True
        ):
            keys[rows].copy_(new_keys)
            values[rows].copy_(new_values)


def _release(replay_of_model: replay.Replay, held: list) -> None:
    if held[0] is not None:
        replay_of_model.release(held[0])
        held[0] = None
