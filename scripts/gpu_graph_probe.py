"""How much of a decoder step on a GPU is launch overhead: the same step run eagerly and replayed as a CUDA
graph, at large-v3's shape (32 layers, d_model 1280, 20 heads, a 448-position self-attention cache, the
cross-attention keys and values of 1500 frames), for batches of 1, 4 and 8 rows of 1 or 6 tokens each.

A probe, not the engine: random weights, the step written here with static shapes so that it can be
captured (the engine's cache grows with each token), to size what graph capture would save before the
engine gets such a path. Prints milliseconds per step for each shape; on a machine without CUDA it runs the
eager step only, with a smaller shape (--tiny), to check the script itself.

    python scripts/gpu_graph_probe.py [--dtype float16] [--steps 50] [--tiny]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F


@dataclass(frozen=True)
class Shape:
    layers: int = 32
    d_model: int = 1280
    heads: int = 20
    ffn: int = 5120
    vocab: int = 51866
    context: int = 448
    frames: int = 1500


TINY = Shape(layers=2, d_model=64, heads=4, ffn=128, vocab=1000, context=64, frames=100)


class StaticStep:
    """One decoder step over fixed-size buffers: inputs are written into them, `run` reads them."""

    def __init__(self, shape: Shape, batch: int, width: int, device: torch.device, dtype: torch.dtype):
        def weight(*size: int) -> torch.Tensor:
            return torch.randn(*size, device=device, dtype=dtype) * size[0] ** -0.5

        d, head_dim = shape.d_model, shape.d_model // shape.heads
        cache = (batch, shape.heads, shape.context, head_dim)
        self.shape, self.batch, self.width = shape, batch, width
        self.embed = weight(shape.vocab, d)
        self.positions_embed = weight(shape.context, d)
        self.layers = [
            {
                "qkv": weight(d, 3 * d), "out": weight(d, d),
                "cross_q": weight(d, d), "cross_out": weight(d, d),
                "fc1": weight(d, shape.ffn), "fc2": weight(shape.ffn, d),
                "self_k": torch.zeros(cache, device=device, dtype=dtype),
                "self_v": torch.zeros(cache, device=device, dtype=dtype),
                "cross_k": weight(batch, shape.heads, shape.frames, head_dim),
                "cross_v": weight(batch, shape.heads, shape.frames, head_dim),
            }
            for _ in range(shape.layers)
        ]  # fmt: skip
        self.input_ids = torch.zeros(batch, width, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, width, dtype=torch.long, device=device)
        self.mask = torch.zeros(batch, 1, width, shape.context, dtype=torch.bool, device=device)

    def place(self, length: int) -> None:
        """Every row's next `width` tokens at positions length.. (its cache holding `length` before them)."""
        positions = length + torch.arange(self.width, device=self.positions.device)
        self.positions.copy_(positions.expand(self.batch, -1))
        keys = torch.arange(self.shape.context, device=self.mask.device)
        self.mask.copy_((keys[None, :] <= positions[:, None])[None, None].expand_as(self.mask))

    def run(self) -> torch.Tensor:
        shape, batch, width = self.shape, self.batch, self.width
        heads, head_dim = shape.heads, shape.d_model // shape.heads
        hidden = self.embed[self.input_ids] + self.positions_embed[self.positions]
        where = self.positions[:, None, :, None].expand(batch, heads, width, head_dim)
        for layer in self.layers:
            x = F.layer_norm(hidden, (shape.d_model,))
            q, k, v = (x @ layer["qkv"]).view(batch, width, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            layer["self_k"].scatter_(2, where, k)
            layer["self_v"].scatter_(2, where, v)
            keys, values = layer["self_k"], layer["self_v"]
            attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask)
            hidden = hidden + attended.transpose(1, 2).reshape(batch, width, -1) @ layer["out"]
            x = F.layer_norm(hidden, (shape.d_model,))
            q = (x @ layer["cross_q"]).view(batch, width, heads, head_dim).transpose(1, 2)
            attended = F.scaled_dot_product_attention(q, layer["cross_k"], layer["cross_v"])
            hidden = hidden + attended.transpose(1, 2).reshape(batch, width, -1) @ layer["cross_out"]
            x = F.layer_norm(hidden, (shape.d_model,))
            hidden = hidden + F.gelu(x @ layer["fc1"]) @ layer["fc2"]
        return F.layer_norm(hidden, (shape.d_model,)) @ self.embed.T


def milliseconds(call, steps: int, device: torch.device) -> float:
    """Mean wall-clock milliseconds of `call` over `steps` calls, the device synchronised around them."""
    for _ in range(3):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps * 1e3


def graphed(step: StaticStep):
    """The step captured as a CUDA graph: a call replays it over the same buffers."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as capture requires
            step.run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.run()
    return graph.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="a small shape, to check the script itself")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype) if device.type == "cuda" else torch.float32
    shape = TINY if args.tiny or device.type != "cuda" else Shape()
    print(f"{device} {dtype} {shape}")
    print("batch  tokens/row  eager ms  graph ms  eager/graph")
    with torch.inference_mode():
        for batch in (1, 4, 8):
            for width in (1, 6):
                step = StaticStep(shape, batch, width, device, dtype)
                step.place(length=100 % shape.context)
                eager = milliseconds(step.run, args.steps, device)
                if device.type == "cuda":
                    graph = milliseconds(graphed(step), args.steps, device)
                    print(f"{batch:5d}  {width:10d}  {eager:8.2f}  {graph:8.2f}  {eager / graph:10.2f}x")
                else:
                    print(f"{batch:5d}  {width:10d}  {eager:8.2f}         -")
                del step


if __name__ == "__main__":
    main()
