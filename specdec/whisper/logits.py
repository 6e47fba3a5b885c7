"""Whisper logits processing, exactly as `transformers` `generate()` applies it.

The processing is that of `WhisperGenerationMixin._retrieve_logit_processors` (begin-suppress,
suppress, timestamp rules, in that order), followed by the sampling warpers that
`GenerationMixin._get_logits_processor` appends (temperature, top-p), so that every verified position
sees the same processing the target alone would apply. The processing is a pure function of
(sequence, scores), which is what lets us apply it to hypothetical sequences (prefix + drafts so far).

`NoSpeechRule` is generate()'s no-speech detection (`WhisperNoSpeechDetection`, then `_need_fallback`):
numbers read off the target's logits, which decide whether a window's text is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
    WhisperTimeStampLogitsProcessor,
)

from specdec.options import NO_SPEECH_NEEDS_LOGPROB, DecodeOptions
from specdec.whisper.fallback import configured


class LogitsPipeline:
    """Turns raw logits into processed scores and sampling probabilities for one decoding window.

    Token suppression is applied with boolean masks built once per window (transformers' suppress
    processors rebuild an `isin` mask over the whole vocabulary on every call, a quarter of the decode
    time on CPU); the timestamp rules are `TimestampRules`, transformers' `WhisperTimeStampLogitsProcessor`
    for several positions at once. `tests/test_processing.py` checks the result is identical to
    transformers' processors.
    """

    def __init__(
        self,
        generation_config: GenerationConfig,
        begin_index: int,
        timestamps: bool,
        temperature: float = 0.0,
        top_p: float | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.begin_index = begin_index
        self.suppress_tokens = list(generation_config.suppress_tokens or [])
        self.begin_suppress_tokens = list(generation_config.begin_suppress_tokens or [])
        self.timestamp_rules = TimestampRules(generation_config, begin_index) if timestamps else None
        warpers = []
        if temperature > 0:
            warpers.append(TemperatureLogitsWarper(temperature))
            if top_p is not None and top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p))
        self.warpers = LogitsProcessorList(warpers)
        self.sampling = temperature > 0
        eos = generation_config.eos_token_id
        self.eos_token_id: int = eos[0] if isinstance(eos, list) else eos
        self.device = torch.device(device)
        self._masks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def scores_at(self, prefix: list[int], continuation: list[int], logits: torch.Tensor) -> torch.Tensor:
        """Processed scores for consecutive positions.

        Row i of logits (n, vocab) is the model's prediction after prefix + continuation[:i]; it is
        processed as if that were the whole sequence so far. Returns (n, vocab).
        """
        suppress, begin_suppress = self._suppress_masks(logits.shape[-1], logits.device)
        scores = logits.masked_fill(
            suppress, float("-inf")
        )  # generate(): begin-suppress, suppress, timestamps
        begin_row = self.begin_index - len(prefix)
        if 0 <= begin_row < scores.shape[0]:
            scores[begin_row] = scores[begin_row].masked_fill(begin_suppress, float("-inf"))
        if self.timestamp_rules is None:
            return scores
        return self.timestamp_rules(prefix, continuation, scores)

    def _suppress_masks(self, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if vocab_size not in self._masks:
            masks = []
            for tokens in (self.suppress_tokens, self.begin_suppress_tokens):
                mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
                mask[[t for t in tokens if 0 <= t < vocab_size]] = True
                masks.append(mask)
            self._masks[vocab_size] = (masks[0], masks[1])
        return self._masks[vocab_size]

    def probs(self, scores: torch.Tensor) -> torch.Tensor:
        """Sampling distribution (n, vocab) from processed scores: temperature, then top-p, then softmax.

        Half-precision scores are warped in float32, as generate() processes every model's logits (top-p's
        cumulative sum in float16 moves tokens in or out of the nucleus)."""
        low_precision = scores.dtype in (torch.float16, torch.bfloat16)
        return torch.softmax(self.warpers(None, scores.float() if low_precision else scores), dim=-1)


class TimestampRules:
    """transformers' `WhisperTimeStampLogitsProcessor`, the same masks from the same float operations,
    applied to consecutive positions in one call.

    The processor takes a batch of rows whose sequences have one length; the positions of a verify pass
    (and a draft's one) have as many lengths, so calling it meant one call per position, each building
    masks over the whole vocabulary, paid at every verified and every drafted token with timestamps on.
    Here the rules that depend on the sequence are read in Python per position and applied to slices,
    and the log-probability rule runs once on every position's row (log-softmax, logsumexp and max along
    each row, as the processor computes them on a batch). `tests/test_processing.py` checks the scores
    are identical to the processor's.
    """

    def __init__(self, generation_config: GenerationConfig, begin_index: int) -> None:
        processor = WhisperTimeStampLogitsProcessor(generation_config, begin_index=begin_index)
        self.begin_index = begin_index
        self.no_timestamps_token_id: int = processor.no_timestamps_token_id
        self.timestamp_begin: int = processor.timestamp_begin
        self.eos_token_id: int = processor.eos_token_id
        self.max_initial_timestamp_index: int | None = processor.max_initial_timestamp_index
        self.from_logprob: bool = processor._detect_timestamp_from_logprob

    def __call__(self, prefix: list[int], continuation: list[int], scores: torch.Tensor) -> torch.Tensor:
        """Row i of scores (n, vocab) follows prefix + continuation[:i]; returns the processed copy."""
        begin = self.timestamp_begin
        processed = scores.clone()
        processed[:, self.no_timestamps_token_id] = float("-inf")
        sequence = prefix + continuation
        for i in range(processed.shape[0]):
            length = len(prefix) + i
            generated = sequence[self.begin_index : length]
            row = processed[i]
            last_was_timestamp = len(generated) >= 1 and generated[-1] >= begin
            penultimate_was_timestamp = len(generated) < 2 or generated[-2] >= begin
            if last_was_timestamp:
                if penultimate_was_timestamp:  # has to be text
                    row[begin:] = float("-inf")
                else:  # cannot be text
                    row[: self.eos_token_id] = float("-inf")
            last_timestamp = next((token for token in reversed(generated) if token >= begin), None)
            if last_timestamp is not None:  # no timestamp below the last (nor the last again, after a pair)
                paired = last_was_timestamp and not penultimate_was_timestamp
                row[begin : last_timestamp if paired else last_timestamp + 1] = float("-inf")
            if length == self.begin_index:
                row[:begin] = float("-inf")
                if self.max_initial_timestamp_index is not None:
                    row[begin + self.max_initial_timestamp_index + 1 :] = float("-inf")
        if self.from_logprob:  # a timestamp where their total probability is above any text token's
            logprobs = torch.nn.functional.log_softmax(processed.float(), dim=-1)
            timestamp_logprob = logprobs[:, begin:].logsumexp(dim=-1)
            max_text_token_logprob = logprobs[:, :begin].amax(dim=-1)  # max's values; 7x faster here
            sample_timestamp = (timestamp_logprob > max_text_token_logprob).unsqueeze(-1)
            processed[:, :begin].masked_fill_(sample_timestamp, float("-inf"))
        return processed


@dataclass(frozen=True)
class NoSpeechRule:
    """generate()'s no-speech rule for one window: judged no speech (its tokens dropped, the seek moved
    past it) when the target's no-speech probability exceeds no_speech_threshold and the average
    log-probability of the window's tokens is below logprob_threshold, both compared in float32.

    The probability is `WhisperNoSpeechDetection`'s: the float32 softmax of the target's raw logits at
    <|startoftranscript|>, at <|nospeech|>. The average is `_retrieve_avg_logprobs`'s: every generated
    token, end-of-text included (and the tail the seek split drops), scored by the log-softmax of the
    scores generate() returns (processed, warped when sampling) times the temperature, summed in order.
    """

    no_speech_token: int  # <|nospeech|> (<|nocaptions|> in older vocabularies): just before <|notimestamps|>
    sot_index: int  # position of <|startoftranscript|> in the window's prompt (after any previous text)
    no_speech_threshold: float | None  # None: nothing is judged (both numbers are still measured)
    logprob_threshold: float | None
    temperature: float  # 0: greedy (generate() rescales by 1)

    @property
    def judges(self) -> bool:
        """Whether it may empty a window (with no thresholds it only measures, for the record)."""
        return self.no_speech_threshold is not None

    @classmethod
    def of(
        cls,
        config: GenerationConfig,
        options: DecodeOptions,
        prompt: Sequence[int],
        temperature: float | None = None,
    ) -> NoSpeechRule:
        """The rule for a window with this forced prompt, decoded at this temperature (None: the options'
        first); an option left None takes the generation config's value, as generate()'s
        `_set_thresholds_and_condition`. With neither threshold, it measures only: every window's numbers
        are reported, as OpenAI's verbose_json gives them."""
        no_speech = configured(config, "no_speech_threshold", options.no_speech_threshold)
        logprob = configured(config, "logprob_threshold", options.logprob_threshold)
        if no_speech is not None and logprob is None:
            raise ValueError(NO_SPEECH_NEEDS_LOGPROB)
        sot_index = list(prompt).index(config.decoder_start_token_id)
        temperature = options.temperatures[0] if temperature is None else temperature
        return cls(config.no_timestamps_token_id - 1, sot_index, no_speech, logprob, temperature)

    def no_speech_prob(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (vocab,): the target's raw logits at <|startoftranscript|>; the probability, (1,) float32,
        left on the device (the loop reads it with the rest of its pass)."""
        return logits.float().softmax(dim=-1)[self.no_speech_token : self.no_speech_token + 1]

    def logprobs_of(
        self, scores: torch.Tensor, tokens: torch.Tensor, pipeline: LogitsPipeline
    ) -> torch.Tensor:
        """scores (n, vocab): processed scores at n consecutive positions; tokens (n,): a token at each.
        Each token's log-probability as generate() counts it, (n,) float32, on the device."""
        scores = scores.float()
        if self.temperature > 0:  # generate() returns warped scores and undoes the temperature
            scores = pipeline.warpers(None, scores) * self.temperature
        return torch.log_softmax(scores, dim=-1).gather(1, tokens[:, None])[:, 0]

    def token_logprobs(
        self, scores: torch.Tensor, tokens: Sequence[int], pipeline: LogitsPipeline
    ) -> list[float]:
        """`logprobs_of` the n tokens taken at n consecutive positions, read (float32 values)."""
        ids = torch.tensor(tokens, dtype=torch.long, device=scores.device)
        return self.logprobs_of(scores, ids, pipeline).tolist()

    def avg_logprob(self, token_logprobs: Sequence[float]) -> float | None:
        """generate()'s average: the float32 log-probabilities summed one by one, over their number (None
        for no token)."""
        if not token_logprobs:
            return None
        return float(sum(torch.tensor(token_logprobs, dtype=torch.float32)) / len(token_logprobs))

    def judge(self, no_speech_prob: float | None, avg_logprob: float | None) -> bool:
        """No speech: both numbers past their thresholds (strictly), as `_need_fallback` compares them."""
        if not self.judges or no_speech_prob is None or avg_logprob is None:
            return False
        quiet = torch.tensor(no_speech_prob, dtype=torch.float32) > self.no_speech_threshold
        unsure = torch.tensor(avg_logprob, dtype=torch.float32) < self.logprob_threshold
        return bool(quiet and unsure)
