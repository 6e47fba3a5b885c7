"""The target's step without transformers' modules (`engine.target_step`) gives the model's forward's logits
bit for bit: ragged batched feeds of 0-5 tokens a row, rollbacks and rows leaving, on the real whisper-base
(packed kernels, as the engine runs it) and on a demo model in float64."""

from __future__ import annotations

import pytest
import torch

from specdec.engine import kernels, target_step
from specdec.engine.cache import CachedDecoder


def through_the_model(monkeypatch) -> None:
    monkeypatch.setattr(target_step, "usable", lambda model, cross_updated: False)


def feed_both(model, hidden: torch.Tensor, monkeypatch, steps: int = 12) -> int:
    """The same feeds into two caches, one stepped here and one through the model's forward; returns
    how many logits rows were compared (each equal bit for bit)."""
    exact, reference = CachedDecoder(model, hidden), CachedDecoder(model, hidden)
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
        found = exact.feed(feeds)
        with monkeypatch.context() as patch:
            through_the_model(patch)
            expected = reference.feed(feeds)
        for mine, theirs in zip(found, expected, strict=True):
            assert torch.equal(mine, theirs), f"step {step}: logits differ from the model's forward"
            compared += mine.shape[0]
        lengths = [max(1, n - int(torch.randint(0, 3, (1,), generator=generator))) for n in exact.lengths]
        for decoder in (exact, reference):
            decoder.rollback(lengths)
    return compared


def test_the_real_target_step_equals_the_models_forward(real_pair, monkeypatch):
    model = real_pair.pair.target.model
    assert kernels.is_packed(model)  # as the engine runs it
    hidden = torch.randn(3, 1500, model.config.d_model, generator=torch.Generator().manual_seed(1))
    with kernels.active():
        assert feed_both(model, hidden, monkeypatch) > 50


def test_a_demo_target_in_float64(float64_pair, monkeypatch):
    model = float64_pair.pair.target.model
    hidden = torch.randn(2, 1500, model.config.d_model, dtype=torch.float64).to(model.device)
    assert feed_both(model, hidden, monkeypatch) > 20


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_only_steps_it_reproduces(separate_pair, attention, monkeypatch):
    model = separate_pair.pair.target.model
    monkeypatch.setattr(model.config, "_attn_implementation", attention)
    assert not target_step.usable(model, cross_updated=False)  # the first feed computes them
    assert target_step.usable(model, cross_updated=True) == (attention == "sdpa")


def test_hooks_and_training_modules_go_through_the_model(separate_pair):
    """A hook on any decoder module (a user's, accelerate's device map) would not run in this step, nor
    would a module left in training mode drop out: the model's forward serves those feeds."""
    model = separate_pair.pair.target.model
    assert target_step.usable(model, cross_updated=True)
    handle = model.model.decoder.layers[0].encoder_attn.register_forward_hook(lambda *args: None)
    assert not target_step.usable(model, cross_updated=True)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda *args: None)
    assert not target_step.usable(model, cross_updated=True)
    handle.remove()
    model.proj_out._hf_hook = object()  # as accelerate's add_hook_to_module marks a module
    assert not target_step.usable(model, cross_updated=True)
    del model.proj_out._hf_hook
    model.model.decoder.layers[-1].train()
    try:
        assert not target_step.usable(model, cross_updated=True)
    finally:
        model.model.decoder.layers[-1].eval()
    assert target_step.usable(model, cross_updated=True)
