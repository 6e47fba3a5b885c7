"""One Whisper decoder and its KV cache over one 30 s window: feed tokens, get logits, roll back.

The self-attention cache holds keys/values for the first `length` tokens of the sequence; rolling
back a rejected draft is cropping it to a shorter length (transformers' `DynamicCache.crop`). The
cross-attention keys/values are computed from the encoder output on the first feed and reused.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import DynamicCache, EncoderDecoderCache, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from specdec import kernels


@torch.inference_mode()
def encode(model: WhisperForConditionalGeneration, features: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Encoder output (batch, 1500, d_model) for log-mel features (batch, mel_bins, 3000), and seconds."""
    start = time.perf_counter()
    hidden = model.model.encoder(features.to(model.device, model.dtype)).last_hidden_state
    if hidden.device.type == "cuda":
        torch.cuda.synchronize(hidden.device)
    return hidden, time.perf_counter() - start


class DecoderRunner:
    """Incremental decoding with one model; `length` tokens of the sequence are in the cache."""

    def __init__(self, model: WhisperForConditionalGeneration, encoder_hidden_states: torch.Tensor) -> None:
        self.model = model
        kernels.install(model)  # oneDNN-packed decoder weights on CPU float32, used by feed() only
        self.encoder_outputs = BaseModelOutput(last_hidden_state=encoder_hidden_states)
        # as WhisperDecoder does: size the cache by decoder layers (config.num_hidden_layers is the encoder's)
        cache_config = copy.copy(model.config)
        cache_config.num_hidden_layers = model.config.decoder_layers
        self.cache = EncoderDecoderCache(DynamicCache(config=cache_config), DynamicCache(config=cache_config))
        self.length = 0

    @torch.inference_mode()
    def feed(self, token_ids: list[int]) -> torch.Tensor:
        """Append tokens to the cache; logits (len(token_ids), vocab) predicting the token after each."""
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.model.device)
        with kernels.active():
            output = self.model(
                encoder_outputs=self.encoder_outputs,
                decoder_input_ids=input_ids,
                past_key_values=self.cache,
                use_cache=True,
            )
        self.length += len(token_ids)
        return output.logits[0]

    def rollback(self, length: int) -> None:
        """Forget every cached token from position `length` on."""
        if length < self.length:
            self.cache.crop(length - self.length)
            self.length = length
