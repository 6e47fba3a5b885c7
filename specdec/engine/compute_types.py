"""Compute types as faster-whisper names them, applied where they pay on a CPU: the target's encoder.

A short request on a CPU is mostly the target's encoder, which the target alone and speculation both pay.
`apply(model, compute_type)` gives the model an encoder that computes in bfloat16 (oneDNN's AVX512-BF16 or
AMX kernels) or with int8 matrix products (dynamic quantisation), its input and output in float32. The
decoder is untouched, and everything that reads the model (the target alone, the verify passes,
`generate()` on the same model) reads the same encoder states: speculation stays exact within each compute
type. float32 leaves the pair as loaded. On CUDA the models' dtype (float16) is the compute type.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch
from torch import nn

from specdec.options import COMPUTE_TYPES
from specdec.whisper.models import ModelPair

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bfloat16 matrix products


def cpu_has_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (elsewhere torch emulates it, slower than
    float32)."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return False
    return any(flag in flags for flag in BF16_FLAGS)


def resolve(compute_type: str, device: torch.device) -> str:
    """The compute type `compute_type` means on `device`: "default" is float32 on a CPU, "auto" bfloat16
    on a CPU that runs it natively, else float32; on CUDA both are the loaded dtype (float16), and a CPU
    compute type is refused there."""
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, not {compute_type!r}")
    if device.type != "cpu":
        if compute_type not in ("default", "auto"):
            raise ValueError(f"compute_type {compute_type!r} is for a CPU; on {device.type} pass dtype=")
        return "float16"
    if compute_type == "default":
        return "float32"
    if compute_type == "auto":
        return "bfloat16" if cpu_has_bfloat16() else "float32"
    return compute_type


class CastEncoder(nn.Module):
    """An encoder run in its own compute type, read and written in float32 (`inner`: a converted copy)."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype, compute_type: str) -> None:
        super().__init__()
        self.inner, self.compute_dtype, self.compute_type = inner, dtype, compute_type

    def forward(self, input_features: torch.Tensor, *args: object, **kwargs: object):
        output = self.inner(input_features.to(self.compute_dtype), *args, **kwargs)
        output.last_hidden_state = output.last_hidden_state.to(torch.float32)
        return output

    def __getattr__(self, name: str):  # what transformers reads of an encoder (its config, layers, ...)
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)


def apply(pair: ModelPair, compute_type: str) -> ModelPair:
    """The pair with its target's encoder in `compute_type` (resolved), the rest as it was. The target is a
    new model object sharing every module of the loaded one but the encoder (a converted copy): the loaded
    model stays float32 for what reads it as loaded (a self-draft built around it, another pair)."""
    target = pair.target.model
    compute_type = resolve(compute_type, target.device)
    if compute_type in ("float32", "float16") or compute_type == pair.compute_type:
        return dataclasses.replace(pair, compute_type=compute_type)
    if pair.compute_type != "float32" or target.dtype != torch.float32:
        raise ValueError(f"a {compute_type} encoder is made from a float32 one, not {pair.compute_type}")
    inner = copy.deepcopy(target.model.encoder).eval()
    if compute_type == "bfloat16":
        inner, dtype = inner.to(torch.bfloat16), torch.bfloat16
    else:
        inner, dtype = (
            torch.ao.quantization.quantize_dynamic(inner, {nn.Linear}, dtype=torch.qint8),
            torch.float32,
        )
    model = _with_encoder(target, CastEncoder(inner, dtype, compute_type))
    loaded = dataclasses.replace(pair.target, model=model)
    return dataclasses.replace(pair, target=loaded, compute_type=compute_type)


def _with_encoder(model: nn.Module, encoder: nn.Module) -> nn.Module:
    """A model sharing every module of `model` but its encoder (`model.model.encoder`), with hooks of its
    own (a shallow copy: no weight is copied)."""
    inner = _shallow(model.model)
    inner._modules["encoder"] = encoder
    found = _shallow(model)
    found._modules["model"] = inner
    return found


def _shallow(module: nn.Module) -> nn.Module:
    found = copy.copy(module)
    found.__dict__.update({k: type(v)(v) for k, v in vars(module).items() if isinstance(v, dict)})
    return found


def encoder_compute_type(model: nn.Module) -> str:
    """The compute type a model's encoder runs in."""
    encoder = model.model.encoder
    if isinstance(encoder, CastEncoder):
        return encoder.compute_type
    return str(next(encoder.parameters()).dtype).removeprefix("torch.")
