"""Decoder steps of fixed shape, replayed as CUDA graphs.

On a GPU a decoder step costs its kernel launches, not its arithmetic: a large-v3 step is ~600 small
kernels, each launched from Python. A CUDA graph records one step's kernels once and launches them all in
one call. A graph replays exactly the shapes and memory it was recorded with, so a decoder that replays
steps keeps everything a step reads and writes in storage that never moves (`Slots`):
- rows in slots: the batch's rows padded to a power of two (a bucket), rows beyond the batch's fed nothing
  and written at the scratch position;
- the self-attention cache allocated for the whole context (positions 0 to the model's limit, the last one
  scratch), and attended over whole through the mask (each query sees the keys at positions up to its own);
- the feed padded to a captured width (`WIDTHS`), its tokens and each row's start position copied into one
  input tensor, from which the step computes its positions (gpt-fast's fixed-shape verify pass);
- the cross-attention keys and values of each slot's window.
Rolling back is a row's length as before; rows joining and leaving copy rows between slots (and between
buckets as the batch grows or shrinks).

`enable(model)` turns this on for a model (on CUDA; `capture=False` keeps the fixed shapes without graphs,
on any device: how the tests check that these shapes change no output), `disable(model)` turns it off. The
graphs of a bucket and width are captured on first use (`warm` captures them ahead), each with its own
memory pool, and held with the model's shared slots; one decoding at a time uses them (another gets slots
of its own, uncaptured). Where capture fails (a device that forbids it) the step runs uncaptured on the
same storage, with the same output. SPECDEC_CUDA_GRAPHS=0 makes `enable` a no-op.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from dataclasses import dataclass, field

import torch
from transformers import WhisperForConditionalGeneration

from specdec.engine.host import send
from specdec.engine.step import CrossKeysValues, Feed, Layers, SelfAttentionCache, decoder_step

WIDTHS = (1, 2, 4, 8, 16)  # feed widths captured: a draft's one token, a verify pass's k + 1 (wider: eager)
log = logging.getLogger(__name__)


def bucket(rows: int) -> int:
    """Slots for this many rows: the next power of two."""
    return 1 << max(rows - 1, 0).bit_length()


def width_for(width: int) -> int:
    """The captured width a feed this wide is padded to (itself when wider than every captured one)."""
    return next((captured for captured in WIDTHS if captured >= width), width)


@dataclass
class Graph:
    """One captured step: its input (slots, 1 + width) (each row's start position, then its tokens) and
    its output logits (slots, width, vocab), both at fixed addresses."""

    inputs: torch.Tensor
    logits: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None  # None: run uncaptured on the same storage


@dataclass
class Slots:
    """Storage for up to `size` rows of one decoder that never moves: the self-attention cache over the
    whole context, cross-attention keys and values, and the captured steps that read and write them."""

    size: int
    cache: SelfAttentionCache
    cross: CrossKeysValues  # per layer (size, heads, frames, head_dim) x2
    shared: bool  # the model's own (graphs captured) or one decoding's (uncaptured)
    graphs: dict[int, Graph] = field(default_factory=dict)
    busy: bool = False
    pool: tuple | None = None  # the memory pool of this bucket's graphs

    def copy_rows(self, source: Slots, rows: list[int]) -> None:
        """Rows `rows` of `source` (in that order) into this storage's first slots."""
        index = send(rows, self.cross[0][0].device)
        mine = [*self.cache.keys, *self.cache.values, *[tensor for layer in self.cross for tensor in layer]]
        theirs = [
            *source.cache.keys,
            *source.cache.values,
            *[tensor for layer in source.cross for tensor in layer],
        ]
        for to, source_tensor in zip(mine, theirs, strict=True):
            to[: len(rows)].copy_(source_tensor.index_select(0, index))  # selected first: in place is safe


class Replay:
    """One model's fixed-shape storage (shared slots per bucket) and captured steps."""

    def __init__(self, model: WhisperForConditionalGeneration, capture: bool) -> None:
        self.model = model
        self.capture = capture
        self.limit = model.config.max_target_positions
        self.shared: dict[tuple, Slots] = {}
        self.lock = threading.Lock()

    def lease(self, rows: int, frames: int, layers: Layers, like: torch.Tensor) -> Slots:
        """Slots for this many rows of windows `frames` long: the model's shared ones for the bucket when no
        other decoding holds them, else new ones of the decoding's own."""
        size, key = bucket(rows), (bucket(rows), frames, type(layers).__name__, like.dtype)
        with self.lock:
            slots = self.shared.get(key)
            if slots is None:
                slots = self.shared[key] = self._allocate(size, frames, like, shared=True)
            if not slots.busy:
                slots.busy = True
                return slots
        return self._allocate(size, frames, like, shared=False)

    def release(self, slots: Slots) -> None:
        """Slots back to the model: a decoding hands them back when its last row finishes (one that stopped
        early, when it is collected)."""
        with self.lock:
            slots.busy = False

    def _allocate(self, size: int, frames: int, like: torch.Tensor, shared: bool) -> Slots:
        config = self.model.config
        attention = self.model.model.decoder.layers[0].self_attn
        heads, head_dim = attention.num_heads, attention.head_dim
        cache = SelfAttentionCache(
            config.decoder_layers, size, heads, head_dim, self.limit, like, capacity=self.limit + 1
        )
        shape = (size, heads, frames, head_dim)
        cross = [(like.new_zeros(shape), like.new_zeros(shape)) for _ in range(config.decoder_layers)]
        return Slots(size, cache, cross, shared)

    @torch.inference_mode()
    def step(
        self, slots: Slots, layers: Layers, starts: list[int], token_ids: list[list[int]]
    ) -> torch.Tensor:
        """Logits (rows, width, vocab) for row b's tokens token_ids[b] at positions starts[b], ... (the first
        len(token_ids) slots; the rest fed nothing), written into the slots' cache."""
        width = width_for(max((len(tokens) for tokens in token_ids), default=1) or 1)
        graph = self._graph(slots, layers, width)
        padding = [[self.limit, *[0] * width]] * (slots.size - len(token_ids))  # the scratch position
        fed = [
            [start, *tokens, *[0] * (width - len(tokens))]
            for start, tokens in zip(starts, token_ids, strict=True)
        ]
        host = torch.tensor(fed + padding, dtype=torch.long)
        if graph.inputs.device.type == "cuda":
            host = host.pin_memory()  # copied without waiting for the device
        graph.inputs.copy_(host, non_blocking=True)
        if graph.graph is not None:
            graph.graph.replay()
            logits = graph.logits
        else:
            logits = self._run(slots, layers, graph.inputs)
        return logits[: len(token_ids)].clone()  # the captured output is overwritten by the next replay

    def _run(self, slots: Slots, layers: Layers, inputs: torch.Tensor) -> torch.Tensor:
        feed = Feed.fixed(inputs[:, 0], inputs[:, 1:], self.limit)
        return decoder_step(self.model, layers, slots.cache, slots.cross, feed)

    def _graph(self, slots: Slots, layers: Layers, width: int) -> Graph:
        """The slots' step of this width: captured on first use where it can be."""
        graph = slots.graphs.get(width)
        if graph is None:
            inputs = torch.zeros(slots.size, 1 + width, dtype=torch.long, device=self.model.device)
            inputs[:, 0] = self.limit  # capture writes at the scratch position only
            graph = slots.graphs[width] = Graph(inputs)
            if self.capture and slots.shared and width in WIDTHS:
                self._capture(slots, layers, graph)
        return graph

    def _capture(self, slots: Slots, layers: Layers, graph: Graph) -> None:
        """Record the step on the slots' storage (after one run on a side stream, as torch asks); where the
        device refuses, the step stays uncaptured."""
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream), torch.inference_mode():
                self._run(slots, layers, graph.inputs)
            torch.cuda.current_stream().wait_stream(stream)
            slots.pool = slots.pool or torch.cuda.graph_pool_handle()
            captured = torch.cuda.CUDAGraph()
            # thread_local: other threads (a server's requests) may use the device while this one captures
            with torch.cuda.graph(captured, pool=slots.pool, capture_error_mode="thread_local"):
                logits = self._run(slots, layers, graph.inputs)
            graph.graph, graph.logits = captured, logits
        except (RuntimeError, AssertionError) as error:  # e.g. a device whose driver forbids capture
            log.warning("decoder steps run uncaptured: capture failed (%s)", error)
            self.capture = False


_REPLAYS: weakref.WeakKeyDictionary[torch.nn.Module, Replay] = weakref.WeakKeyDictionary()


def available(model: torch.nn.Module) -> bool:
    """Capture is possible: the model is on a CUDA device, and SPECDEC_CUDA_GRAPHS is not 0."""
    device = next(model.parameters()).device
    return os.environ.get("SPECDEC_CUDA_GRAPHS", "1") != "0" and device.type == "cuda"


def enable(model: WhisperForConditionalGeneration, capture: bool | None = None) -> bool:
    """Decode with this model in fixed shapes, its steps replayed as CUDA graphs (capture=None: where
    `available`; False: the fixed shapes uncaptured, on any device). Returns whether it is on."""
    if capture is None:
        if not available(model):
            return False
        capture = True
    if model not in _REPLAYS or _REPLAYS[model].capture != capture:
        _REPLAYS[model] = Replay(model, capture)
    return True


def disable(model: torch.nn.Module) -> bool:
    """Back to steps of the feed's own shape (the storage and graphs freed); returns whether it was on."""
    return _REPLAYS.pop(model, None) is not None


def replay_of(model: torch.nn.Module) -> Replay | None:
    return _REPLAYS.get(model)


def is_enabled(model: torch.nn.Module) -> bool:
    return model in _REPLAYS


def is_captured(model: torch.nn.Module) -> bool:
    """Steps of this model are replayed as CUDA graphs (not only in fixed shapes)."""
    replay = _REPLAYS.get(model)
    return replay is not None and replay.capture
