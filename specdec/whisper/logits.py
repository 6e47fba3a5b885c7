"""Whisper logits processing, exactly as `transformers` `generate()` applies it.

The processing is that of `WhisperGenerationMixin._retrieve_logit_processors` (begin-suppress,
suppress, timestamp rules, in that order), followed by the sampling warpers that
`GenerationMixin._get_logits_processor` appends (temperature, top-p), so that every verified position
sees the same processing the target alone would apply. The processing is a pure function of
(sequence, scores), which is what lets us apply it to hypothetical sequences (prefix + drafts so far).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
    WhisperTimeStampLogitsProcessor,
)


class LogitsPipeline:
    """Turns raw logits into processed scores and sampling probabilities for one decoding window.

    Token suppression is applied with boolean masks built once per window (transformers' suppress
    processors rebuild an `isin` mask over the whole vocabulary on every call, a quarter of the decode
    time on CPU); `tests/test_processing.py` checks the result is identical to transformers' processors.
    The timestamp rules are transformers' `WhisperTimeStampLogitsProcessor` itself.
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
        self.timestamp_processor = (
            WhisperTimeStampLogitsProcessor(generation_config, begin_index=begin_index)
            if timestamps
            else None
        )
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
        if self.timestamp_processor is None:
            return scores
        rows = []
        for i in range(scores.shape[0]):
            sequence = torch.tensor([prefix + continuation[:i]], dtype=torch.long, device=scores.device)
            rows.append(self.timestamp_processor(sequence, scores[i : i + 1]))
        return torch.cat(rows, dim=0)

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
        """Sampling distribution (n, vocab) from processed scores: temperature, then top-p, then softmax."""
        warped = self.warpers(None, scores)
        low_precision = warped.dtype in (torch.float16, torch.bfloat16)
        return torch.softmax(warped.float() if low_precision else warped, dim=-1)
