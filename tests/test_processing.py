"""LogitsPipeline == transformers' own Whisper logits processors, position by position."""

from __future__ import annotations

import pytest
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

from specdec.whisper.logits import LogitsPipeline

VOCAB = 51866
EOS = 50257
NO_TIMESTAMPS = 50364
TIMESTAMP_BEGIN = NO_TIMESTAMPS + 1


def generation_config() -> GenerationConfig:
    return GenerationConfig(
        decoder_start_token_id=50258,
        eos_token_id=EOS,
        pad_token_id=EOS,
        no_timestamps_token_id=NO_TIMESTAMPS,
        max_initial_timestamp_index=50,
        suppress_tokens=[
            1,
            2,
            7,
            8,
            9,
            10,
            14,
            25,
            26,
            27,
            28,
            29,
            31,
            58,
            59,
            60,
            61,
            62,
            63,
            90,
            91,
            92,
            93,
        ],
        begin_suppress_tokens=[220, EOS],
    )


def transformers_processors(
    config: GenerationConfig, begin_index: int, timestamps: bool
) -> LogitsProcessorList:
    """The list generate() builds (WhisperGenerationMixin._retrieve_logit_processors)."""
    processors = [
        SuppressTokensAtBeginLogitsProcessor(config.begin_suppress_tokens, begin_index=begin_index),
        SuppressTokensLogitsProcessor(config.suppress_tokens),
    ]
    if timestamps:
        processors.append(WhisperTimeStampLogitsProcessor(config, begin_index=begin_index))
    return LogitsProcessorList(processors)


def random_continuation(generator: torch.Generator, length: int, timestamps: bool) -> list[int]:
    """Text tokens mixed with timestamp tokens (in increasing order) when timestamps are on."""
    tokens = torch.randint(0, 50000, (length,), generator=generator).tolist()
    if timestamps:
        for i in range(0, length, 3):
            tokens[i] = TIMESTAMP_BEGIN + 5 * i
    return tokens


@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("already_generated", [0, 1, 4])
def test_scores_match_transformers_at_every_position(timestamps, already_generated):
    config = generation_config()
    prompt = [50258, 50259, 50360] + ([] if timestamps else [NO_TIMESTAMPS])
    generator = torch.Generator().manual_seed(already_generated + 10 * timestamps)
    for _ in range(5):
        prefix = prompt + random_continuation(generator, already_generated, timestamps)
        continuation = random_continuation(generator, 5, timestamps)
        logits = 4 * torch.randn(len(continuation) + 1, VOCAB, generator=generator)
        if timestamps:  # make timestamps likely so their rules matter
            logits[:, TIMESTAMP_BEGIN:] += 3
        pipeline = LogitsPipeline(config, len(prompt), timestamps)
        reference = transformers_processors(config, len(prompt), timestamps)
        expected = torch.cat(
            [
                reference(torch.tensor([prefix + continuation[:i]]), logits[i : i + 1].clone())
                for i in range(logits.shape[0])
            ]
        )
        assert torch.equal(pipeline.scores_at(prefix, continuation, logits), expected)


def expected_scores(config, prompt, prefix, continuation, logits, timestamps=True):
    """transformers' processors, one call per position (as generate() sees each one)."""
    reference = transformers_processors(config, len(prompt), timestamps)
    return torch.cat(
        [
            reference(torch.tensor([prefix + continuation[:i]]), logits[i : i + 1].clone())
            for i in range(logits.shape[0])
        ]
    )


def test_timestamp_rules_match_transformers_on_each_rule():
    """Positions after a timestamp pair (text must follow), after a lone timestamp (no text), at the first
    position (a timestamp up to max_initial_timestamp_index), and rows on both sides of the rule that
    forces a timestamp when their total probability beats every text token's."""
    config = generation_config()
    prompt = [50258, 50259, 50360]
    generator = torch.Generator().manual_seed(7)
    ts = TIMESTAMP_BEGIN
    cases = [
        ([], [ts, 400, 401, ts + 20, ts + 20, ts + 20, 402]),  # from the first position: pair, then text
        ([ts, 300, ts + 10], [ts + 10, 403, ts + 30, 404, 405]),  # a lone timestamp, then its pair
        ([ts + 3, 300, 301, ts + 8, ts + 8], [500, 501, ts + 12, ts + 12, 502, ts + 40]),
        ([300, 301], [302, ts + 5, 303]),  # text before any timestamp
    ]
    for prefix_tail, continuation in cases:
        prefix = prompt + prefix_tail
        logits = 4 * torch.randn(len(continuation) + 1, VOCAB, generator=generator)
        # each row's timestamps raised by another amount: the log-probability rule falls both ways
        logits[:, TIMESTAMP_BEGIN:] += torch.linspace(-2.0, 9.0, logits.shape[0])[:, None]
        pipeline = LogitsPipeline(config, len(prompt), True)
        found = pipeline.scores_at(prefix, continuation, logits)
        expected = expected_scores(config, prompt, prefix, continuation, logits)
        assert torch.equal(found, expected)
        forced = torch.isinf(expected[:, :EOS]).all(-1) & ~torch.isinf(expected[:, TIMESTAMP_BEGIN:]).all(-1)
        assert 0 < int(forced.sum()) <= logits.shape[0]  # some rows must take a timestamp


def test_probs_match_transformers_warpers():
    config = generation_config()
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(0))
    pipeline = LogitsPipeline(config, 4, False, temperature=0.7, top_p=0.9)
    scores = pipeline.scores_at([50258, 50259, 50360, NO_TIMESTAMPS], [11, 12], logits)
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.9)])
    expected = torch.softmax(warpers(None, scores.clone()), dim=-1)
    assert torch.allclose(pipeline.probs(scores), expected, atol=0, rtol=0)
    assert torch.allclose(pipeline.probs(scores).sum(-1), torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_probs_are_warped_as_generate_warps_them(dtype):
    """generate() casts every model's logits to float32 before its processors: a float16 or bfloat16
    model's sampling distribution is the float32 warping of its logits (top-p's cumulative sum in half
    precision would move tokens in or out of the nucleus)."""
    config = generation_config()
    logits = torch.randn(50, VOCAB, generator=torch.Generator().manual_seed(1)).to(dtype)
    pipeline = LogitsPipeline(config, 4, False, temperature=0.7, top_p=0.9)
    scores = pipeline.scores_at([50258, 50259, 50360, NO_TIMESTAMPS], list(range(11, 60)), logits)
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.9)])
    expected = torch.softmax(warpers(None, scores.float()), dim=-1)
    assert torch.equal(pipeline.probs(scores), expected)
