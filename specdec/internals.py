"""The private torch and transformers APIs specdec relies on, in one place, each with why it is needed.

Every other module reaches them through the functions here, never directly, so that an upgrade that moves or
changes one shows in one file, and `tests/test_internals.py` names the one that broke (with the installed
torch and transformers versions) instead of a decoding going wrong elsewhere.

torch:
- oneDNN's packed linear (`torch.ops.mkldnn._reorder_linear_weight`, `_linear_pointwise`): a weight reordered
  once into oneDNN's blocked layout, so that a verify pass of k+1 tokens costs about one token's product
  (`engine.kernels`). `F.linear` has no way to keep a weight in that layout between calls.
- A dynamically quantised int8 layer's packed weights (`module._packed_params._packed_params`) and
  `torch._make_per_channel_quantized_tensor`: the lean draft decoder calls the int8 operator on them
  directly and fuses a layer's q, k and v products into one (`engine.lean_decoder`).
- Module hooks (`_forward_hooks`, `_forward_pre_hooks`, the global ones, accelerate's `_hf_hook`): the
  decoder step calls a model's layers itself, so it refuses a model whose hooks it would skip
  (`engine.step`).
- A tensor's version counter (`tensor._version`): a weight changed in place must not keep a stale packed or
  fused copy.
- A module's class swapped in place (`module.__class__ = ...`): `kernels.pack` makes a decoder's
  `nn.Linear` a `PackedLinear` (same parameters, hooks and state dict, a new forward), reversibly.

transformers:
- `config._attn_implementation`: the attention function transformers chose for the model at load time,
  which the decoder step calls as the model would.
- `EncoderDecoderCache.is_updated`: a cross-attention cache filled with the decoding's own keys and values
  is marked as computed, so that the alignment pass does not project the encoder states again.
- `_combine_tokens_into_words` (the ASR pipeline's grouping of tokens into words) and `_median_filter`
  (generate()'s word-timestamp filter): words split and timed as transformers splits and times them.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.whisper import generation_whisper, tokenization_whisper


def mkldnn_linear_available() -> bool:
    """oneDNN is built in and has the packed linear operators."""
    mkldnn = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and all(
        hasattr(mkldnn, name) for name in ("_linear_pointwise", "_reorder_linear_weight")
    )


def mkldnn_pack_weight(weight: torch.Tensor, batch_hint: int) -> torch.Tensor:
    """A float32 (out, in) weight in oneDNN's blocked layout, tuned for `batch_hint` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)


def mkldnn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias with the weight packed by `mkldnn_pack_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def is_dynamic_int8(module: nn.Module) -> bool:
    """A dynamically quantised int8 linear layer (`torch.ao.nn.quantized.dynamic.Linear`)."""
    return hasattr(module, "_packed_params")


def dynamic_int8_weights(module: nn.Module) -> torch.ScriptObject:
    """Such a layer's packed weights, as `torch.ops.quantized.linear_dynamic` takes them."""
    return module._packed_params._packed_params


def per_channel_int8(
    values: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, axis: int
) -> torch.Tensor:
    """A per-channel quantised int8 tensor from its integer values, scales and zero points."""
    return torch._make_per_channel_quantized_tensor(values, scales, zero_points, axis)


def has_forward_hooks(module: nn.Module) -> bool:
    """Forward hooks of torch's on this module, or an accelerate hook (it sets `_hf_hook` on the module)."""
    return bool(module._forward_hooks or module._forward_pre_hooks) or "_hf_hook" in module.__dict__


def has_global_forward_hooks() -> bool:
    """A forward hook registered for every module (`nn.modules.module.register_module_forward_hook`)."""
    hooks = nn.modules.module
    return bool(hooks._global_forward_hooks or hooks._global_forward_pre_hooks)


def tensor_version(tensor: torch.Tensor) -> int:
    """A counter that grows with every in-place change of the tensor."""
    return tensor._version


def swap_class(module: nn.Module, cls: type[nn.Module]) -> None:
    """Give a module another class with the same state (a subclass of its own, or back)."""
    module.__class__ = cls


def attention_implementation(config) -> str:
    """The attention function transformers chose for a model ("eager", "sdpa", ...)."""
    return config._attn_implementation


def mark_cross_attention_computed(cache, layer: int) -> None:
    """An `EncoderDecoderCache` whose cross-attention keys and values for `layer` are filled: not to be
    projected again from the encoder states."""
    cache.is_updated[layer] = True


def combine_tokens_into_words(tokenizer, tokens: list[int], language: str) -> tuple[list, list, list]:
    """(words, their token ids, their token indices), the tokens grouped as the ASR pipeline groups them
    for word timestamps (punctuation joined to its word; characters for languages without spaces).
    language: a code ("en") or a name ("english")."""
    name = tokenization_whisper.LANGUAGES.get(language, language)
    return tokenization_whisper._combine_tokens_into_words(tokenizer, tokens, name)


def median_filter(values: torch.Tensor, width: int) -> torch.Tensor:
    """generate()'s median filter over the last dimension (word timestamps' attention weights)."""
    return generation_whisper._median_filter(values, width)
