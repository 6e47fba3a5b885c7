"""The decoder step (`engine.step`) gives the model's own forward's logits bit for bit: ragged batched
feeds of 0-5 tokens a row, rollbacks and a row leaving, on the real whisper-base (packed kernels, as the
engine runs it), on a demo model in float64 and with transformers' eager attention; a model the step cannot
reproduce (hooks where it does not call modules, training mode) is refused by name."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Cache, DynamicCache, EncoderDecoderCache
from transformers.cache_utils import CacheLayerMixin
from transformers.modeling_outputs import BaseModelOutput

from specdec.engine import kernels
from specdec.engine.cache import CachedDecoder
from specdec.engine.step import Feed, unsupported


class ReferenceDecoder:
    """Test double: the model's own forward over the same feeds, through a transformers cache whose layers
    write each feed's keys and values at its positions (`_PositionedLayer`), so that both see the same
    padded batch."""

    def __init__(self, model, encoder_hidden_states: torch.Tensor) -> None:
        self.model = model
        self.encoder_outputs = BaseModelOutput(last_hidden_state=encoder_hidden_states)
        config = copy.copy(model.config)
        config.num_hidden_layers = model.config.decoder_layers
        self.layers = [_PositionedLayer(self) for _ in range(model.config.decoder_layers)]
        self.cache = EncoderDecoderCache(Cache(layers=self.layers), DynamicCache(config=config))
        self.lengths = [0] * encoder_hidden_states.shape[0]
        self.feed_now: Feed | None = None

    @torch.inference_mode()
    def feed(self, token_ids: list[list[int]]) -> list[torch.Tensor]:
        self.feed_now = feed = Feed.of(self.lengths, token_ids, 10**6, self.model.device)
        keys = torch.arange(feed.kv_length, device=self.model.device)
        hidden = keys[None, None, :] > feed.positions[:, :, None]
        dtype = self.model.dtype
        mask = torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, torch.finfo(dtype).min)
        limit = self.model.config.max_target_positions
        logits = self.model(
            encoder_outputs=self.encoder_outputs, decoder_input_ids=feed.input_ids,
            decoder_attention_mask=mask[:, None], decoder_position_ids=feed.positions.clamp(max=limit - 1),
            past_key_values=self.cache, use_cache=True,
        ).logits  # fmt: skip
        self.lengths = [length + len(tokens) for length, tokens in zip(self.lengths, token_ids, strict=True)]
        return [logits[b, : len(tokens)] for b, tokens in enumerate(token_ids)]

    def rollback(self, lengths: list[int]) -> None:
        self.lengths = [min(old, new) for old, new in zip(self.lengths, lengths, strict=True)]

    def keep(self, rows: list[int]) -> None:
        index = torch.tensor(rows)
        for layer in self.layers:
            layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        self.cache.cross_attention_cache.batch_select_indices(index)
        hidden = self.encoder_outputs.last_hidden_state.index_select(0, index)
        self.encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
        self.lengths = [self.lengths[row] for row in rows]


class _PositionedLayer(CacheLayerMixin):
    is_sliding = False

    def __init__(self, owner: ReferenceDecoder) -> None:
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.keys = key_states.new_zeros(*key_states.shape[:2], 0, key_states.shape[-1])
        self.values = value_states.new_zeros(*value_states.shape[:2], 0, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        feed = self.owner.feed_now
        extra = feed.end_position - self.keys.shape[2]
        if extra > 0:
            self.keys = torch.nn.functional.pad(self.keys, (0, 0, 0, extra))
            self.values = torch.nn.functional.pad(self.values, (0, 0, 0, extra))
        index = feed.positions[:, None, :, None].expand_as(key_states)
        self.keys.scatter_(2, index, key_states)
        self.values.scatter_(2, index, value_states)
        return self.keys[:, :, : feed.kv_length], self.values[:, :, : feed.kv_length]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.feed_now.kv_length, 0

    def get_seq_length(self) -> int:
        return self.owner.feed_now.kv_length if self.owner.feed_now else 0

    def get_max_length(self) -> int:
        return -1


def feed_both(model, hidden: torch.Tensor, steps: int = 12) -> int:
    """The same feeds into the engine's decoder and the reference; returns how many logits rows were
    compared (each equal bit for bit)."""
    exact, reference = CachedDecoder(model, hidden), ReferenceDecoder(model, hidden)
    rows = hidden.shape[0]
    generator = torch.Generator().manual_seed(0)
    start = model.generation_config.decoder_start_token_id
    compared = 0
    for step in range(steps):
        feeds = [[start]] * rows
        if step:
            widths = torch.randint(0, 6, (rows,), generator=generator).tolist()
            feeds = [torch.randint(0, 50_000, (w,), generator=generator).tolist() for w in widths]
        if step == 8 and rows > 2:  # the middle row leaves
            for decoder in (exact, reference):
                decoder.keep([0, 2])
            rows, feeds = 2, [feeds[0], feeds[2]]
        for mine, theirs in zip(exact.feed(feeds), reference.feed(feeds), strict=True):
            assert torch.equal(mine, theirs), f"step {step}: logits differ from the model's forward"
            compared += mine.shape[0]
        lengths = [max(1, n - int(torch.randint(0, 3, (1,), generator=generator))) for n in exact.lengths]
        for decoder in (exact, reference):
            decoder.rollback(lengths)
    return compared


def test_the_real_target_step_equals_the_models_forward(real_pair):
    model = real_pair.pair.target.model
    assert kernels.is_packed(model)  # as the engine runs it
    hidden = torch.randn(3, 1500, model.config.d_model, generator=torch.Generator().manual_seed(1))
    with kernels.active():
        assert feed_both(model, hidden) > 50


def test_a_demo_target_in_float64(float64_pair):
    model = float64_pair.pair.target.model
    hidden = torch.randn(2, 1500, model.config.d_model, dtype=torch.float64).to(model.device)
    assert feed_both(model, hidden) > 20


def test_eager_attention_through_transformers_own_interface(separate_pair, monkeypatch):
    model = separate_pair.pair.target.model
    monkeypatch.setattr(model.config, "_attn_implementation", "eager")
    hidden = torch.randn(3, 1500, model.config.d_model, generator=torch.Generator().manual_seed(2))
    with kernels.active():  # the engine's decoder runs the packed products: the reference too
        assert feed_both(model, hidden, steps=6) > 10


def test_a_model_the_step_cannot_reproduce_is_refused_by_name(separate_pair):
    """A hook where the step calls no module (a user's, accelerate's device map) would not run, nor would a
    module in training mode drop out: such a model is refused, saying why; hooks on the modules it calls
    (its products and norms) run."""
    model = separate_pair.pair.target.model
    hidden = torch.zeros(1, 1500, model.config.d_model)
    assert unsupported(model) is None
    handle = model.model.decoder.layers[0].encoder_attn.register_forward_hook(lambda *args: None)
    with pytest.raises(ValueError, match="a hook on the model, its decoder, a decoder layer or an attention"):
        CachedDecoder(model, hidden)
    handle.remove()
    model.model.decoder.layers[-1].train()
    try:
        assert "training mode" in unsupported(model)
    finally:
        model.model.decoder.layers[-1].eval()
    calls = []
    handle = model.model.decoder.layers[0].fc1.register_forward_hook(lambda *args: calls.append(1))
    try:
        CachedDecoder(model, hidden).feed([[model.generation_config.decoder_start_token_id]])
    finally:
        handle.remove()
    assert calls == [1]


def test_padding_past_the_context_writes_scratch_and_changes_no_row(separate_pair):
    """A row near the end of the context beside a long feed: its padding runs past the last position, into
    the scratch one, and neither row's logits change."""
    model = separate_pair.pair.target.model
    limit = model.config.max_target_positions
    hidden = torch.randn(2, 1500, model.config.d_model, generator=torch.Generator().manual_seed(3))
    together, first, second = CachedDecoder(model, hidden), CachedDecoder(model, hidden[:1]), None
    second = CachedDecoder(model, hidden[1:])
    long_row = [11] * (limit - 3)
    together.feed([long_row, [12]])
    first.feed([long_row])
    second.feed([[12]])
    mine = together.feed([[13], [14] * 8])
    assert together.cache.capacity == limit + 1
    assert torch.allclose(mine[0], first.feed([[13]])[0], atol=1e-3)
    assert torch.allclose(mine[1], second.feed([[14] * 8])[0], atol=1e-3)
