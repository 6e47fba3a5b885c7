"""Whisper's temperature fallback and its conditioning on previous text, as transformers' `generate()` does
them (`WhisperGenerationMixin.generate_with_fallback`, `_need_fallback`, `_prepare_decoder_input_ids`).

Each window is decoded at the first temperature; a window that fails a threshold (its tokens compress too
well under zlib: a loop; or their average log-probability is too low) is decoded again at the next one,
unless the no-speech rule judges it silence. If every temperature fails, the last decoding is kept. With
`condition_on_prev_tokens`, a window's prompt holds the text kept so far, unless the window before ended at
a temperature of 0.5 or more (a sampled, unsure text would mislead the next window). These are pure
functions of a window's tokens and the numbers the target gave them (`logits.NoSpeechRule` measures them).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from specdec.options import DecodeOptions

CONDITION_BELOW_TEMPERATURE = 0.5  # a window that ended at this temperature or above conditions no other


def configured(config: GenerationConfig, name: str, value):
    """An option's value, or when None the generation config's (`_set_thresholds_and_condition`)."""
    return value if value is not None else getattr(config, name, None)


def compression_ratio(tokens: Sequence[int], vocab_size: int) -> float:
    """`_retrieve_compression_ratio`: the tokens as little-endian bytes (as many bytes as the vocabulary
    needs), over their zlib-compressed length."""
    width = int(math.log2(vocab_size) / 8) + 1
    data = b"".join(token.to_bytes(width, "little") for token in tokens)
    return len(data) / len(zlib.compress(data))


@dataclass(frozen=True)
class Verdict:
    """What generate() decides about one decoded window."""

    compression_ratio: float  # of its generated tokens, end-of-text included
    avg_logprob: float | None  # of the same tokens, as generate() averages them (None: no token)
    needs_fallback: bool  # decode it again at the next temperature (if there is one)
    no_speech: bool  # judged no speech: nothing kept, the seek moved past it


@dataclass(frozen=True)
class Fallback:
    """generate()'s temperature fallback for a clip: the temperatures and the thresholds that send a
    window to the next one (None: that test is off), and whether windows are conditioned on earlier text."""

    temperatures: tuple[float, ...]
    compression_ratio_threshold: float | None
    logprob_threshold: float | None
    condition_on_prev_tokens: bool  # generate()'s resolved value
    vocab_size: int  # the target's (the width of a token's bytes)

    @classmethod
    def of(cls, config: GenerationConfig, options: DecodeOptions, vocab_size: int) -> Fallback:
        """Options left None take the generation config's values, as in generate()."""
        return cls(
            options.temperatures,
            configured(config, "compression_ratio_threshold", options.compression_ratio_threshold),
            configured(config, "logprob_threshold", options.logprob_threshold),
            bool(configured(config, "condition_on_prev_tokens", options.condition_on_prev_tokens)),
            vocab_size,
        )

    def has_next(self, attempt: int) -> bool:
        """A window decoded at temperatures[attempt] may still be decoded again."""
        tests = self.compression_ratio_threshold is not None or self.logprob_threshold is not None
        return tests and attempt + 1 < len(self.temperatures)

    def verdict(self, tokens: Sequence[int], avg_logprob: float | None, no_speech: bool) -> Verdict:
        """`_need_fallback` for a window's generated tokens (end-of-text included), the average
        log-probability generate() computes for them (`NoSpeechRule.avg_logprob`) and the no-speech
        rule's judgement (`NoSpeechRule.judge`: it overrides the fallback). The average compares in
        float32, as generate()'s tensor does."""
        ratio = compression_ratio(tokens, self.vocab_size)
        needs = self.compression_ratio_threshold is not None and ratio > self.compression_ratio_threshold
        if self.logprob_threshold is not None and avg_logprob is not None:
            average = torch.tensor(avg_logprob, dtype=torch.float32)
            needs = needs or bool(average < self.logprob_threshold)
        return Verdict(ratio, avg_logprob, needs and not no_speech, no_speech)

    def conditions_next(self, temperature: float) -> bool:
        """Whether the window after one that ended at this temperature is conditioned on earlier text."""
        return self.condition_on_prev_tokens and temperature < CONDITION_BELOW_TEMPERATURE


def window_segments(tokens: Sequence[int], timestamp_begin: int) -> list[list[int]]:
    """A window's generated tokens (end-of-text removed) as `_retrieve_segment` cuts them into segments:
    after each timestamp pair's first timestamp, the last pair kept whole and what follows it dropped
    (unless a single timestamp ends the window); no pair: one segment. Together: the tokens kept."""
    is_timestamp = [token >= timestamp_begin for token in tokens]
    slices = [i + 1 for i in range(len(tokens) - 1) if is_timestamp[i] and is_timestamp[i + 1]]
    if not slices:
        return [list(tokens)]
    if is_timestamp[-2:] == [False, True]:  # a single timestamp at the end
        slices.append(len(tokens))
    else:
        slices[-1] += 1
    return [list(tokens[start:end]) for start, end in zip([0, *slices], slices, strict=False)]


def previous_text(
    segments: Sequence[Sequence[int]], timestamp_begin: int, max_target_positions: int
) -> list[int]:
    """The text a conditioned window's prompt holds after <|startofprev|> (`_pad_to_max_length` as
    `_prepare_decoder_input_ids` calls it): every segment so far (the prompt's text first), a segment that
    ends on a timestamp pair without its last timestamp, the last max_target_positions // 2 - 1 tokens."""
    text = []
    for segment in segments:
        double_ending = len(segment) > 2 and segment[-2] >= timestamp_begin
        text += segment[:-1] if double_ending else segment
    return text[-(max_target_positions // 2 - 1) :]
