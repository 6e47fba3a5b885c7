"""Faster CPU matrix products for the decoders: float32 weights in other layouts, used inside our loop only.

A decoder step multiplies a few token vectors by every weight matrix: memory-bound work, where the layout
of the weight decides how close to the machine's bandwidth a product runs. PyTorch's default CPU path
(MKL on the row-major `nn.Linear` weight, one dot product per output) streams a wide matrix such as the
output projection at a fraction of the bandwidth, and 2-10 tokens at once cost about as many one-token
products. A PackedLinear multiplies with its weight reordered once into oneDNN's blocked layout
(oneDNN's packed linear, `specdec.internals`): k+1 tokens cost ~1.1-2x one token instead of k+1 times,
and one token is fastest there too (whisper-base's output projection and its whole decoder step:
docs/benchmarks.md has the measurements).

This changes the model, so it is explicit and reversible: `pack(model)` makes the decoder's `nn.Linear`
layers (and the output projection) `PackedLinear`, a subclass that keeps its parameters (state dicts,
tying and `.to()` are unchanged) and makes the packed layout on first use (memory: one more copy
of the decoder's weights); `unpack(model)` makes them `nn.Linear` again. `SpeculativeWhisper` packs the
models it loads itself; a pair passed in is left as it is. The packed layout is used only inside
`active()`, which the engine's decoder cache enters: anyone else calling the same model (transformers'
`generate()` included) gets the stock kernels. Results differ from the stock kernels by float rounding
only (summation order), as the stock kernels already differ between one token and several; the tests
check that outputs stay identical to `generate()`. SPECDEC_PACKED_KERNELS=0 turns `pack` into a no-op.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from specdec import internals

BATCH_HINT = 8  # rows the packed layout is tuned for: a verify pass of k+1 tokens (1-12 are all fast)

COPIES = ("_packed",)  # the weight's other layouts a PackedLinear may hold
_state = threading.local()  # per thread: is the packed path active (a Gradio server decodes in threads)


def available() -> bool:
    """oneDNN is built in and not switched off with SPECDEC_PACKED_KERNELS=0."""
    enabled = os.environ.get("SPECDEC_PACKED_KERNELS", "1") != "0"
    return enabled and internals.mkldnn_linear_available()


class PackedLinear(nn.Linear):
    """An nn.Linear that, inside `active()`, multiplies with its weight in oneDNN's packed layout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not getattr(_state, "active", False) or x.dtype != torch.float32 or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return F.linear(x, self.weight, self.bias)
        packed = self._copy("_packed", lambda weight: internals.mkldnn_pack_weight(weight, BATCH_HINT))
        return internals.mkldnn_linear(x, packed, self.bias)

    def _copy(self, name: str, make) -> torch.Tensor:
        """The weight in another layout (made on first use), redone if the weight was replaced or changed
        in place since."""
        key = (self.weight.data_ptr(), internals.tensor_version(self.weight))
        if self.__dict__.get(f"{name}_key") != key:
            with torch.no_grad():
                self.__dict__[name] = make(self.weight.detach())
            self.__dict__[f"{name}_key"] = key
        return self.__dict__[name]


def pack(model: nn.Module) -> int:
    """Make the decoder's and output projection's nn.Linear layers PackedLinear; returns how many.

    Only for float32 models on the CPU (elsewhere, and when not available(), nothing changes). Idempotent.
    """
    if not available() or next(model.parameters()).device.type != "cpu":
        return 0
    swapped = 0
    for module in _decoder_modules(model):
        if type(module) is nn.Linear and module.weight.dtype == torch.float32:
            internals.swap_class(module, PackedLinear)  # same parameters, hooks and state dict; new forward
            swapped += 1
    return swapped


def unpack(model: nn.Module) -> int:
    """Undo `pack`: PackedLinear layers become nn.Linear again (their packed copies freed)."""
    restored = 0
    for module in _decoder_modules(model):
        if type(module) is PackedLinear:
            internals.swap_class(module, nn.Linear)
            for name in COPIES:
                module.__dict__.pop(name, None)
                module.__dict__.pop(f"{name}_key", None)
            restored += 1
    return restored


def is_packed(model: nn.Module) -> bool:
    return any(type(module) is PackedLinear for module in model.modules())


def packed_weights(model: nn.Module) -> list[torch.Tensor]:
    """The copies of weights the model's PackedLinear layers hold now (oneDNN's cannot be deep-copied)."""
    return [module.__dict__[name] for module in model.modules() for name in COPIES if name in module.__dict__]


def _decoder_modules(model: nn.Module) -> Iterator[nn.Module]:
    roots = [m for name, m in model.named_modules() if name.endswith("decoder") or name == "proj_out"]
    for root in roots:
        yield from root.modules()


@contextlib.contextmanager
def active() -> Iterator[None]:
    """Use the packed weights of every PackedLinear called in this thread, within the block."""
    previous = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = previous
