"""A cheaper draft: int8 weights, a restricted vocabulary, audio-only encoding, pooled encoder frames.

The draft only proposes and the target verifies every token, so nothing done to the draft can change the
output: only how often its proposals are accepted, and what they cost. `tune_draft(pair, settings)`
returns a pair whose draft is a copy of the loaded draft, changed as `DraftSettings` says:

- int8: the decoder's linear layers (and the output projection) become dynamically quantised int8
  layers (`torch.ao.quantization.quantize_dynamic`: int8 weights per output channel, activations
  quantised per call). A decoder step streams every weight once, so a quarter of the bytes is most of
  the gain. The encoder's linear layers too (a copy; its convolutions stay float32): compute-bound, but
  fbgemm's int8 products beat float32 ones, ~20% off tiny.en's encoder here at the same acceptance
  (docs/benchmarks.md). Not for a draft that reads the target's encoder states (it runs no encoder).
- vocabulary: the output projection computes only the draft's `vocabulary` most frequent text tokens
  and its special tokens, and gives every other token -inf (as FR-Spec does for LLM drafts). The
  draft's softmax is then a distribution over what it can propose, so rejection sampling stays exact.
  A byte-level BPE numbers its tokens in the order it merged them, most frequent pairs first: the
  lowest ids are the most frequent pieces of its training text, and need no corpus to count.
- lean_step: the decoder step runs in plain tensor ops (`engine.lean_decoder.LeanLayers`), not through
  transformers' modules: the same weights, a fraction of the Python per step.
- audio_context: the encoder reads only the window's frames (plus `AUDIO_CONTEXT_MARGIN`), not the
  silence padding them to 30 s, as whisper.cpp's `audio_ctx` does: an 11 s clip costs the draft's
  encoder about a third, and every draft step attends over a third of the positions.
- frame_pooling: the draft's cross-attention reads its encoder states averaged over groups of
  consecutive frames (`pooled_states`; the keys and values are affine in the states, so they are the
  groups' means too). After each target pass a draft step reads its cross-attention keys and values
  from memory the pass evicted: for the self-draft, 12 MB in float32 on a full window, about half of
  its step. Whisper's decoders read the audio broadly: groups of 4 kept the self-draft's and tiny.en's
  acceptance on a tuning set of espeak-ng clips (0.57 -> 0.59 and 0.62 -> 0.64), groups of 8 did not
  (0.39); see docs/benchmarks.md.

The loaded models are never changed: the copy shares the draft's embeddings (and its encoder, unless
int8), and `tune_draft(pair, DraftSettings())` gives the plain draft back. The target is never touched.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import torch
from torch import nn
from torch.nn import functional as F
from transformers import WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from specdec.engine import kernels
from specdec.whisper.models import DraftKind, DraftSettings, ModelPair
from specdec.whisper.tokens import WINDOW_FRAMES
from specdec.whisper.vocabulary import VocabularyMap

AUDIO_CONTEXT_MARGIN = 100  # frames (1 s) the draft encodes past the end of a window's audio
# What a CPU draft runs with unless told otherwise: on the bundled pair's English clips the same
# acceptance as the plain draft, at about half its step cost (docs/benchmarks.md).
CPU_DRAFT = DraftSettings(int8=True, vocabulary=16384, audio_context=True, lean_step=True, frame_pooling=4)


def default_settings(model: nn.Module) -> DraftSettings:
    """The draft settings a pair gets without being told: CPU_DRAFT for float32 on the CPU (where they
    were measured), the plain draft elsewhere."""
    parameter = next(model.parameters())
    return (
        CPU_DRAFT if parameter.device.type == "cpu" and parameter.dtype == torch.float32 else DraftSettings()
    )


def tune_draft(pair: ModelPair, settings: DraftSettings | None = None) -> ModelPair:
    """The pair with its draft running as `settings` say (a copy of the loaded draft; see above); None:
    `default_settings` of the target, as `SpeculativeWhisper` and the app run it unless told.

    audio_context does nothing for a draft that reads the target's encoder states; int8 needs the CPU."""
    plain = pair.plain_draft or pair.draft
    if plain is None:
        return pair
    if settings is None:
        settings = default_settings(pair.target.model)
    if pair.kind is DraftKind.SHARED_ENCODER:
        settings = dataclasses.replace(settings, audio_context=False)
    pooling = settings.frame_pooling
    if not isinstance(pooling, int) or isinstance(pooling, bool) or pooling < 1:
        raise ValueError(f"the draft's frame pooling must be a whole number, at least 1, not {pooling!r}")
    # the loaded draft's weights: neither the step's code nor the pooling of its states changes them
    if dataclasses.replace(settings, lean_step=False, frame_pooling=1) == DraftSettings():
        return dataclasses.replace(pair, draft=plain, draft_settings=settings, plain_draft=None)
    if settings.int8 and (plain.model.device.type != "cpu" or plain.model.dtype != torch.float32):
        raise ValueError("an int8 draft is made from float32 weights on the CPU (dynamic quantisation)")
    if settings.vocabulary is not None and settings.vocabulary < 1:
        raise ValueError("the draft's vocabulary must hold at least one text token")
    int8_encoder = pair.kind is not DraftKind.SHARED_ENCODER  # that draft runs no encoder of its own
    model = _tuned_model(plain.model, settings, pair.vocabulary, int8_encoder)
    draft = dataclasses.replace(plain, model=model)
    return dataclasses.replace(pair, draft=draft, draft_settings=settings, plain_draft=plain)


def draft_frames(settings: DraftSettings, windows: torch.Tensor, window_frames: int) -> int:
    """Feature frames the draft's encoder reads of a batch of windows (batch, mel_bins, 3000) that hold
    at most `window_frames` frames of audio: all of them, or with audio_context up to the last frame
    that holds any sound, plus AUDIO_CONTEXT_MARGIN."""
    if not settings.audio_context:
        return WINDOW_FRAMES
    frames = min(window_frames, sounding_frames(windows)) + AUDIO_CONTEXT_MARGIN
    frames = min(frames, WINDOW_FRAMES)
    return frames + frames % 2  # the encoder's second convolution halves the frames


def pooled_states(hidden: torch.Tensor, frame_pooling: int) -> torch.Tensor:
    """The draft's encoder states (rows, positions, d_model) as its cross-attention reads them: averaged
    over groups of frame_pooling consecutive positions (`DraftSettings.frame_pooling`), the last group over
    what is left."""
    if frame_pooling == 1:
        return hidden
    pooled = F.avg_pool1d(hidden.transpose(1, 2), frame_pooling, ceil_mode=True)
    return pooled.transpose(1, 2).contiguous()


def pooled_positions(positions: int, frame_pooling: int) -> int:
    """How many positions `pooled_states` makes of `positions`."""
    return -(-positions // frame_pooling)


def sounding_frames(windows: torch.Tensor) -> int:
    """Frames up to the last one that holds any sound in a batch of windows (batch, mel_bins, frames).

    The feature extractor pads a clip to 30 s with zeros, whose every mel bin sits at the window's floor
    (its lowest value): frames at the floor in every bin are silence, padded or recorded."""
    floor = windows.amin(dim=(1, 2), keepdim=True)
    sounding = (windows > floor).any(dim=1).any(dim=0).nonzero()  # (frames with sound, 1)
    return int(sounding[-1]) + 1 if sounding.numel() else 0


def frequent_draft_ids(vocabulary: VocabularyMap, draft_size: int, num_text_tokens: int) -> torch.Tensor:
    """Draft ids the restricted projection computes, ascending: `proposable_ids`, of those the target has
    (the others are never proposed)."""
    ids = proposable_ids(draft_size, num_text_tokens, vocabulary.draft_eos_id)
    return ids if vocabulary.is_identity else ids[vocabulary.draft_to_target[ids] >= 0]


def proposable_ids(draft_size: int, num_text_tokens: int, eos_id: int) -> torch.Tensor:
    """Text ids below num_text_tokens and every special id (end-of-text and after, the timestamps among
    them), ascending: the ids a draft with a restricted vocabulary may propose, and is trained on."""
    ids = torch.arange(draft_size)
    return ids[(ids < num_text_tokens) | (ids >= eos_id)]


class RestrictedProjection(nn.Module):
    """The output projection over a subset of the vocabulary: logits (..., vocab) with -inf elsewhere."""

    MAX_RUNS = 8  # a subset in at most this many runs of consecutive ids is laid out by copying the runs

    def __init__(self, projection: nn.Linear, rows: torch.Tensor, int8: bool) -> None:
        super().__init__()
        self.vocab_size = projection.out_features
        # each id's column in the subset's logits, or len(rows): a column of -inf appended to them
        columns = torch.full((self.vocab_size,), len(rows), dtype=torch.long)
        columns[rows] = torch.arange(len(rows))
        self.register_buffer("columns", columns.to(projection.weight.device), persistent=False)
        self.runs = _runs(rows.tolist())
        bias = projection.bias is not None
        weight = projection.weight
        subset = nn.Linear(
            projection.in_features, len(rows), bias=bias, device=weight.device, dtype=weight.dtype
        )
        with torch.no_grad():
            subset.weight.copy_(projection.weight[rows])
            if bias:
                subset.bias.copy_(projection.bias[rows])
        self.subset = _quantized(subset) if int8 else subset

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.subset(hidden)
        if len(self.runs) <= self.MAX_RUNS:  # a few copies (the CPU draft's ids: two runs)
            return self._from_runs(logits)
        padded = nn.functional.pad(logits, (0, 1), value=float("-inf"))
        return padded.index_select(-1, self.columns)  # one gather: faster than filling and writing

    def _from_runs(self, logits: torch.Tensor) -> torch.Tensor:
        """The subset's logits, run by run, with -inf between the runs: a gather over the whole vocabulary
        reads its index, memory the target's pass has just evicted, at every draft token; copying a few
        runs reads only the logits."""

        def masked(width: int) -> torch.Tensor:
            return logits.new_full((*logits.shape[:-1], width), float("-inf"))

        pieces, end, column = [], 0, 0
        for start, stop in self.runs:
            pieces += [masked(start - end), logits[..., column : column + stop - start]]
            column, end = column + stop - start, stop
        return torch.cat([*pieces, masked(self.vocab_size - end)], dim=-1)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Ascending ids as runs of consecutive ones, (start, stop) each."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


class AudioContextEncoder(nn.Module):
    """A Whisper encoder over features of any length up to its window (batch, mel_bins, frames <= 3000):
    the positions past them are not computed. The same layers and weights as `encoder`."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features: torch.Tensor, **kwargs) -> BaseModelOutput:
        encoder = self.encoder
        hidden = nn.functional.gelu(encoder.conv1(input_features))
        hidden = nn.functional.gelu(encoder.conv2(hidden)).permute(0, 2, 1)  # (batch, frames / 2, d_model)
        hidden = hidden + encoder.embed_positions.weight[: hidden.shape[1]]
        for layer in encoder.layers:
            hidden = layer(hidden, None)
        return BaseModelOutput(last_hidden_state=encoder.layer_norm(hidden))


def _tuned_model(
    model: WhisperForConditionalGeneration,
    settings: DraftSettings,
    vocabulary: VocabularyMap,  # a pair with a draft always has one
    int8_encoder: bool,
) -> WhisperForConditionalGeneration:
    """A copy of the draft with its own decoder layers and projection, and its own int8 encoder if
    int8_encoder; the embeddings (and a float32 encoder) are shared with the loaded draft, not copied."""
    encoder, decoder = model.model.encoder, model.model.decoder
    shared = [encoder, decoder.embed_tokens.weight, decoder.embed_positions.weight]
    shared += kernels.packed_weights(model)  # oneDNN's opaque tensors cannot be copied; unpacked below
    tuned = copy.deepcopy(model, memo={id(part): part for part in shared})
    kernels.unpack(tuned)  # a packed draft's copy: its layers are replaced or packed again below
    if settings.vocabulary is not None:
        rows = frequent_draft_ids(vocabulary, model.config.vocab_size, settings.vocabulary)
        tuned.proj_out = RestrictedProjection(tuned.proj_out, rows, settings.int8)
    elif settings.int8:
        tuned.proj_out = _quantized(tuned.proj_out)
    if settings.int8:
        _quantize_linears(tuned.model.decoder)
    elif kernels.is_packed(model):
        kernels.pack(tuned)
    if settings.int8 and int8_encoder:
        encoder = copy.deepcopy(encoder)  # the loaded draft keeps its own
        _quantize_linears(encoder)
        tuned.model.encoder = encoder
    if settings.audio_context:
        tuned.model.encoder = AudioContextEncoder(encoder)
    return tuned


def _quantize_linears(module: nn.Module) -> None:
    """Every nn.Linear inside module becomes its dynamically quantised int8 counterpart, in place."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, _quantized(child))


def _quantized(linear: nn.Linear) -> nn.Module:
    """An int8 dynamically quantised copy of an nn.Linear (weights per output channel)."""
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        wrapper = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(linear), {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
        )
    return wrapper[0]
