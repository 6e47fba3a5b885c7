"""Whisper logits processing, exactly as `transformers` `generate()` applies it.

We reuse transformers' own processor classes (built from the target's generation config, in the
order `WhisperGenerationMixin._retrieve_logit_processors` puts them, followed by the sampling warpers
`GenerationMixin._get_logits_processor` appends) so that every verified position sees the same
processing the target alone would apply. The processors are pure functions of (sequence, scores),
which is what lets us apply them to hypothetical sequences (prefix + draft tokens so far).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
    WhisperTimeStampLogitsProcessor,
)


class LogitsPipeline:
    """Turns raw logits into processed scores and sampling probabilities for one decoding window."""

    def __init__(
        self,
        generation_config: GenerationConfig,
        begin_index: int,
        timestamps: bool,
        temperature: float = 0.0,
        top_p: float | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        processors = []  # prepended one by one in generate(): begin-suppress, suppress, timestamps
        if generation_config.begin_suppress_tokens is not None:
            processors.append(
                SuppressTokensAtBeginLogitsProcessor(
                    generation_config.begin_suppress_tokens, begin_index=begin_index, device=device
                )
            )
        if generation_config.suppress_tokens is not None:
            processors.append(SuppressTokensLogitsProcessor(generation_config.suppress_tokens, device=device))
        if timestamps:
            processors.append(WhisperTimeStampLogitsProcessor(generation_config, begin_index=begin_index))
        self.processors = LogitsProcessorList(processors)
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

    def scores_at(self, prefix: list[int], continuation: list[int], logits: torch.Tensor) -> torch.Tensor:
        """Processed scores for consecutive positions.

        Row i of logits (n, vocab) is the model's prediction after prefix + continuation[:i]; it is
        processed as if that were the whole sequence so far. Returns (n, vocab).
        """
        rows = []
        for i in range(logits.shape[0]):
            sequence = torch.tensor([prefix + continuation[:i]], dtype=torch.long, device=self.device)
            rows.append(self.processors(sequence, logits[i : i + 1]))
        return torch.cat(rows, dim=0)

    def probs(self, scores: torch.Tensor) -> torch.Tensor:
        """Sampling distribution (n, vocab) from processed scores: temperature, then top-p, then softmax."""
        warped = self.warpers(None, scores)
        low_precision = warped.dtype in (torch.float16, torch.bfloat16)
        return torch.softmax(warped.float() if low_precision else warped, dim=-1)
