"""Word timestamps for tokens the target has already decoded, one computation whatever the decoding.

A window's token times: the cross-attention of the target's alignment heads (its generation config's
`alignment_heads`) over the window's text tokens, normalised, median-filtered and aligned to the audio
frames by dynamic time warping; the attention comes from one teacher-forced pass of the target's decoder,
never from a draft. The text tokens are aligned as openai-whisper (and faster-whisper) align them: alone,
after `<|startoftranscript|><|lang|><|task|><|notimestamps|>` (no previous text, no timestamp tokens), the
row that predicts the first of them included. So the same words get the same times whether the window was
decoded with timestamp tokens or without. (generate()'s `return_token_timestamps` leaves that row out and
aligns the timestamp tokens too: without them the first word is timed 0.00-0.00, with them the times
shift; docs/usage.md.) Words: the tokens grouped as the ASR pipeline groups them for
`return_timestamps="word"` (punctuation joined to its word), a word running from its first token's start
to its last token's end.

The alignment is transformers' `_extract_token_timestamps`, step for step, with a faster warping
(`whisper.alignment`); the grouping is transformers' own (a private function, `specdec.internals`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, EncoderDecoderCache, WhisperForConditionalGeneration

from specdec import internals
from specdec.whisper import alignment

TIME_DECIMALS = 2  # the pipeline's rounding of token times (the alignment's resolution is 0.02 s)


@dataclass(frozen=True)
class Word:
    start: float  # seconds of the whole file
    end: float
    text: str  # as its tokens spell it, its leading space kept: the words join into the text


class NoAlignmentHeads(ValueError):
    """The target's generation config names no alignment heads, so it cannot time words."""


# per decoder layer, a window's cross-attention keys and values, (1, heads, 1500, head_dim) each
KeysValues = list[tuple[torch.Tensor, torch.Tensor]]


def token_times(
    model: WhisperForConditionalGeneration,
    encoder_states: torch.Tensor,
    sequence: Sequence[int],
    prompt_length: int,
    num_frames: int,
    cross: KeysValues | None = None,
) -> list[float]:
    """One window's token times: len(sequence) times in seconds from the window's start, token i ending at
    times[i] and starting at times[i - 1] (the forced prompt's are 0, but its last: where the first text
    token starts). Only the text tokens are aligned (`alignment_sequence`); a timestamp token takes no time,
    ending where the next text token starts. encoder_states: (1500, d_model), the window's; sequence: its
    forced prompt and generated tokens; num_frames: its mel frames of audio; cross: the window's
    cross-attention keys and values as its decoding computed them (not computed again)."""
    heads = getattr(model.generation_config, "alignment_heads", None)
    if not heads:
        raise NoAlignmentHeads("the target's generation config has no alignment_heads: no word timestamps")
    config, device = model.generation_config, encoder_states.device
    aligned, first = alignment_sequence(config, sequence, prompt_length)
    with torch.inference_mode():  # the end of text's attention is never needed, as in generate()
        input_ids = torch.tensor([aligned[:-1]], device=device)
        layers = {layer for layer, _ in heads}
        attentions = cross_attentions(model, encoder_states[None], input_ids, layers, cross)
        width = model.config.median_filter_width
        # starts[j]: where text token j starts; starts[-1]: where all end
        starts = alignment.token_starts(attentions, heads, num_frames, first, width).tolist()[first:]
    times, text_so_far = [], 0
    for i, token in enumerate(sequence):
        text_so_far += i >= prompt_length and token < config.eos_token_id
        times.append(starts[text_so_far] if i >= prompt_length - 1 else 0.0)
    return times


def alignment_sequence(config, sequence: Sequence[int], prompt_length: int) -> tuple[list[int], int]:
    """(the tokens to align, the index of the first row the alignment reads): the window's text tokens
    after its `<|startoftranscript|>`, language and task and `<|notimestamps|>`, then the end of text
    (whose row gives the last token's end), as openai-whisper aligns them; the row read first is
    `<|notimestamps|>`'s, which predicts the first text token."""
    prompt = list(sequence[:prompt_length])
    start = len(prompt) - 1 - prompt[::-1].index(config.decoder_start_token_id)  # after any previous text
    forced = [token for token in prompt[start:] if token != config.no_timestamps_token_id]
    text = [token for token in sequence[prompt_length:] if token < config.eos_token_id]
    return [*forced, config.no_timestamps_token_id, *text, config.eos_token_id], len(forced)


def cross_attentions(
    model: WhisperForConditionalGeneration,
    encoder_states: torch.Tensor,
    input_ids: torch.Tensor,
    layers: set[int],
    cross: KeysValues | None = None,
) -> tuple[torch.Tensor, ...]:
    """Per decoder layer, the cross-attention probabilities (1, heads, tokens, frames) that eager attention
    computes, for `layers` (zeros for the others): one decoder pass as the model runs it (any attention
    implementation), its cross-attention inputs read on the way and the probabilities computed from them.
    encoder_states: (1, 1500, d_model); input_ids: (1, tokens); cross: the keys and values to attend to
    (`KeysValues`; None: computed from encoder_states)."""
    decoder, caller = model.model.decoder, threading.get_ident()
    inputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def reader(layer: int):
        def read(module, args, kwargs) -> None:
            if threading.get_ident() == caller:  # not another thread's pass through the same model
                hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
                inputs[layer] = (hidden, kwargs["key_value_states"])

        return read

    hooks = [
        decoder.layers[layer].encoder_attn.register_forward_pre_hook(reader(layer), with_kwargs=True)
        for layer in layers
    ]
    cache = None
    if cross is not None:  # the decoding's own: the pass reads them instead of projecting the states again
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        for layer, (keys, values) in enumerate(cross):
            cache.cross_attention_cache.update(keys, values, layer)
            internals.mark_cross_attention_computed(cache, layer)
    try:
        decoder(input_ids=input_ids, encoder_hidden_states=encoder_states, past_key_values=cache)
    finally:
        for hook in hooks:
            hook.remove()
    found = []
    for layer, attention in enumerate(decoder.layers):
        attention = attention.encoder_attn
        heads, head_dim = attention.num_heads, attention.head_dim
        if layer not in inputs:
            found.append(encoder_states.new_zeros(1, heads, input_ids.shape[1], encoder_states.shape[1]))
            continue
        hidden, states = inputs[layer]
        query = (attention.q_proj(hidden) * attention.scaling).view(1, -1, heads, head_dim).transpose(1, 2)
        if cross is not None:
            key = cross[layer][0]
        else:
            key = attention.k_proj(states).view(1, -1, heads, head_dim).transpose(1, 2)
        found.append(torch.softmax(query @ key.transpose(2, 3), dim=-1))  # eager's, scaled as it scales
    return tuple(found)


def token_spans(times: Sequence[float], prompt_length: int, offset: float) -> list[tuple[float, float]]:
    """Each generated token's (start, end) in seconds of the file, as the pipeline pairs them: a token starts
    where the one before it ends. times: `token_times`; offset: the window's start in the file."""
    return [
        (round(times[i - 1] + offset, TIME_DECIMALS), round(times[i] + offset, TIME_DECIMALS))
        for i in range(prompt_length, len(times))
    ]


def words(
    tokenizer, token_ids: Sequence[int], spans: Sequence[tuple[float, float]], language: str
) -> tuple[Word, ...]:
    """The words of a decoding's text tokens (special and timestamp tokens left out), timed by their tokens'
    spans (one per token id); language: its code, which says how words split (spaces, or characters)."""
    special = set(tokenizer.all_special_ids)
    first_timestamp = tokenizer.convert_tokens_to_ids("<|notimestamps|>") + 1
    text = [i for i, token in enumerate(token_ids) if token not in special and token < first_timestamp]
    tokens = [token_ids[i] for i in text]
    found, _, indices = internals.combine_tokens_into_words(tokenizer, tokens, language)
    return tuple(
        Word(spans[text[group[0]]][0], spans[text[group[-1]]][1], word)
        for word, group in zip(found, indices, strict=True)
    )
