"""The demo checkpoints load like hub ones, carry the hub's token ids, and make a usable test bed:
varied transcripts that depend on the audio, and drafts that agree with the target on some positions only.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
import regex
import torch
from transformers import AutoProcessor, GenerationConfig, WhisperForConditionalGeneration, WhisperProcessor
from transformers.models.whisper.configuration_whisper import NON_SPEECH_TOKENS_MULTI

from specdec.whisper.demo import SPECS, V2, VOCABULARY_FILE, build_models, build_tokenizer, non_speech_tokens

PROMPT = ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
MAX_NEW_TOKENS = 40
# transformers 5 writes the feature extractor's settings into processor_config.json (no preprocessor_config)
CHECKPOINT_FILES = ("model.safetensors", "generation_config.json", "tokenizer.json", "processor_config.json")
# openai/whisper's split pattern (whisper/tokenizer.py), for the reference encoder below
TIKTOKEN_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# (token, id) in openai/whisper-large-v3 (v3) and openai/whisper-tiny (v2)
V3_IDS = {
    "<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259, "<|zh|>": 50260, "<|de|>": 50261,
    "<|su|>": 50357, "<|yue|>": 50358, "<|translate|>": 50359, "<|transcribe|>": 50360,
    "<|startoflm|>": 50361, "<|startofprev|>": 50362, "<|nospeech|>": 50363, "<|notimestamps|>": 50364,
    "<|0.00|>": 50365, "<|0.02|>": 50366, "<|30.00|>": 51865,
}  # fmt: skip
V2_IDS = {
    "<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259, "<|zh|>": 50260, "<|de|>": 50261,
    "<|su|>": 50357, "<|translate|>": 50358, "<|transcribe|>": 50359, "<|startoflm|>": 50360,
    "<|startofprev|>": 50361, "<|nocaptions|>": 50362, "<|notimestamps|>": 50363, "<|0.00|>": 50364,
    "<|0.02|>": 50365, "<|30.00|>": 51864,
}  # fmt: skip


def clips() -> dict[str, np.ndarray]:
    """Varied 16 kHz inputs (random models need no speech): noise, a chirp, bursts, tones."""
    rng = np.random.default_rng(3)
    t = np.arange(6 * 16_000) / 16_000
    tones = sum(np.sin(2 * np.pi * f * t) * (np.abs(t - c) < 0.6) for f, c in [(330, 1), (880, 3), (1500, 5)])
    return {
        "noise-2s": 0.1 * rng.standard_normal(2 * 16_000),
        "chirp-4s": 0.3 * np.sin(2 * np.pi * (200 + 400 * t[: 4 * 16_000]) * t[: 4 * 16_000]),
        "bursts-9s": rng.standard_normal(9 * 16_000) * (np.arange(9 * 16_000) % 8000 < 3000) * 0.2,
        "tones-6s": 0.2 * tones + 0.01 * rng.standard_normal(t.size),
    }


CLIPS = clips()


Loaded = dict[str, tuple[WhisperForConditionalGeneration, WhisperProcessor]]


@pytest.fixture(scope="module")
def loaded(demo_models: dict[str, Path]) -> Loaded:
    """Each demo checkpoint loaded back from disk, as a user would."""
    return {
        name: (
            WhisperForConditionalGeneration.from_pretrained(path).eval(),
            WhisperProcessor.from_pretrained(path),
        )
        for name, path in demo_models.items()
    }


@pytest.fixture(scope="module")
def target_transcripts(loaded) -> dict[str, list[int]]:
    """The target's greedy tokens for each clip."""
    model, processor = loaded["target"]
    return {name: greedy_transcript(model, features(processor, waveform)) for name, waveform in CLIPS.items()}


def features(processor: WhisperProcessor, waveform: np.ndarray) -> torch.Tensor:
    """(1, mel bins, 3000) log-mel features of a 16 kHz waveform, padded to 30 s."""
    inputs = processor.feature_extractor(waveform, sampling_rate=16_000, return_tensors="pt")
    return inputs.input_features


@torch.no_grad()
def greedy_transcript(model: WhisperForConditionalGeneration, input_features: torch.Tensor) -> list[int]:
    """The target's greedy tokens after the English transcription prompt, `<|endoftext|>` included."""
    output = model.generate(
        input_features,
        language="en",
        task="transcribe",
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict_in_generate=True,
    )
    return output.sequences[0, len(PROMPT) :].tolist()


@torch.no_grad()
def teacher_forced_agreement(
    draft: WhisperForConditionalGeneration,
    draft_processor: WhisperProcessor,
    target_processor: WhisperProcessor,
    waveform: np.ndarray,
    target_tokens: list[int],
) -> float:
    """Share of positions where the draft's argmax, fed the target's tokens, is the target's next token."""
    target_vocab = target_processor.tokenizer.get_vocab()
    draft_vocab = draft_processor.tokenizer.get_vocab()
    aliases = {"<|nocaptions|>": "<|nospeech|>"}
    draft_to_target = torch.empty(len(draft_vocab), dtype=torch.long)
    for token, draft_id in draft_vocab.items():
        draft_to_target[draft_id] = target_vocab[aliases.get(token, token)]
    target_to_draft = {int(target_id): draft_id for draft_id, target_id in enumerate(draft_to_target)}

    prompt = [draft_vocab[token] for token in PROMPT]
    decoder_input_ids = torch.tensor([prompt + [target_to_draft[token] for token in target_tokens[:-1]]])
    logits = draft(
        input_features=features(draft_processor, waveform), decoder_input_ids=decoder_input_ids
    ).logits
    logits = logits[0, len(prompt) - 1 :]  # (len(target_tokens), draft vocab)
    logits[:, draft.generation_config.suppress_tokens] = -torch.inf  # as generate() does for the target
    logits[0, draft.generation_config.begin_suppress_tokens] = -torch.inf
    predicted = draft_to_target[logits.argmax(dim=-1)]
    return (predicted == torch.tensor(target_tokens)).float().mean().item()


def reference_encode(text: str, ranks: dict[bytes, int]) -> list[int]:
    """openai/whisper's tiktoken encoding in plain Python: split, then merge the lowest-ranked pair first."""
    ids = []
    for piece in regex.findall(TIKTOKEN_PATTERN, text):
        parts = [bytes([byte]) for byte in piece.encode()]
        while len(parts) > 1:
            rank, index = min(
                (ranks.get(a + b, len(ranks)), i)
                for i, (a, b) in enumerate(zip(parts[:-1], parts[1:], strict=True))
            )
            if rank == len(ranks):
                break
            parts[index : index + 2] = [parts[index] + parts[index + 1]]
        ids += [ranks[part] for part in parts]
    return ids


def test_checkpoints_load_with_from_pretrained_like_hub_ones(demo_models):
    for name, path in demo_models.items():
        assert isinstance(AutoProcessor.from_pretrained(path), WhisperProcessor), name
        generation_config = GenerationConfig.from_pretrained(path)
        assert generation_config.decoder_start_token_id == 50258
        assert generation_config.eos_token_id == generation_config.pad_token_id == 50257
        assert generation_config.begin_suppress_tokens == [220, 50257]
        assert generation_config.max_length == 448 and generation_config.max_initial_timestamp_index == 50
        assert generation_config.is_multilingual
        for file in CHECKPOINT_FILES:
            assert (path / file).is_file(), (name, file)


def test_architectures(loaded):
    target, draft_separate, draft_shared = (
        loaded[name][0] for name in ("target", "draft-separate", "draft-shared")
    )
    assert (target.config.num_mel_bins, target.config.vocab_size) == (128, 51866)
    assert (draft_separate.config.num_mel_bins, draft_separate.config.vocab_size) == (80, 51865)
    assert (draft_shared.config.num_mel_bins, draft_shared.config.vocab_size) == (128, 51866)
    for name, (model, processor) in loaded.items():
        assert processor.feature_extractor.feature_size == model.config.num_mel_bins, name
        assert model.config.max_source_positions == 1500 and model.config.max_target_positions == 448
        assert model.config.decoder_start_token_id == 50258 and model.config.eos_token_id == 50257
    for draft in (draft_separate, draft_shared):
        assert draft.config.decoder_layers < target.config.decoder_layers
        assert draft.num_parameters() < target.num_parameters()
    assert draft_separate.config.encoder_layers < target.config.encoder_layers

    target_encoder = target.model.encoder.state_dict()
    shared_encoder = draft_shared.model.encoder.state_dict()
    assert target_encoder.keys() == shared_encoder.keys()
    assert all(torch.equal(target_encoder[key], shared_encoder[key]) for key in target_encoder)


@pytest.mark.parametrize(("name", "expected"), [("target", V3_IDS), ("draft-separate", V2_IDS)])
def test_special_tokens_sit_at_the_hub_ids(loaded, name, expected):
    model, processor = loaded[name]
    tokenizer = processor.tokenizer
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in expected} == expected
    assert len(tokenizer) == model.config.vocab_size
    generation_config = model.generation_config
    assert generation_config.no_timestamps_token_id == expected["<|notimestamps|>"]
    assert generation_config.prev_sot_token_id == expected["<|startofprev|>"]
    assert generation_config.task_to_id == {
        "translate": expected["<|translate|>"],
        "transcribe": expected["<|transcribe|>"],
    }
    assert len(generation_config.lang_to_id) == (100 if "<|yue|>" in expected else 99)
    assert all(
        tokenizer.convert_tokens_to_ids(token) == i for token, i in generation_config.lang_to_id.items()
    )
    assert ("<|yue|>" in tokenizer.get_vocab()) == ("<|yue|>" in expected)


def test_text_tokens_agree_between_the_two_vocabularies(loaded):
    target_vocab = loaded["target"][1].tokenizer.get_vocab()
    draft_vocab = loaded["draft-separate"][1].tokenizer.get_vocab()
    target_text = {token: i for token, i in target_vocab.items() if i <= 50257}
    assert len(target_text) == 50258
    assert {token: i for token, i in draft_vocab.items() if i <= 50257} == target_text


@pytest.mark.parametrize(
    "text", ["Hello world", " Grüß Gott!", "你好，世界", "It's 3.14 -- isn't it?", "Привет ♪ (laughs)\n  ok"]
)
def test_text_encodes_like_openai_whisper_and_round_trips(loaded, text):
    with open(VOCABULARY_FILE, "rb") as lines:
        ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines)}
    tokenizer = loaded["target"][1].tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == reference_encode(text, ranks)
    assert tokenizer.decode(ids) == text
    with_specials = tokenizer.encode(text)  # <|startoftranscript|><|notimestamps|> ... <|endoftext|>
    assert with_specials[:2] == [50258, 50364] and with_specials[-1] == 50257
    assert tokenizer.decode(with_specials + [50365], skip_special_tokens=True) == text


def test_suppress_tokens_are_whispers_non_speech_list():
    tokenizer = build_tokenizer(V2)
    # transformers' copy of the hub list (a v2 vocabulary) leaves out <|translate|> and <|transcribe|>
    assert non_speech_tokens(tokenizer) == [i for i in NON_SPEECH_TOKENS_MULTI if i < 50257]


@pytest.mark.parametrize(
    ("name", "control_tokens"),  # sot, translate, transcribe, startoflm, startofprev, nospeech/nocaptions
    [
        ("target", [50258, 50359, 50360, 50361, 50362, 50363]),
        ("draft-separate", [50258, *range(50358, 50363)]),
    ],
)
def test_generation_configs_suppress_what_the_hub_configs_do(loaded, name, control_tokens):
    suppress_tokens = loaded[name][0].generation_config.suppress_tokens
    assert suppress_tokens == [i for i in NON_SPEECH_TOKENS_MULTI if i < 50257] + control_tokens


def test_target_transcripts_are_varied_and_depend_on_the_audio(loaded, target_transcripts):
    tokenizer = loaded["target"][1].tokenizer
    transcripts = list(target_transcripts.values())
    for tokens in transcripts:
        text_tokens = [token for token in tokens if token < 50257]
        assert len(text_tokens) >= 10
        assert len(set(text_tokens)) >= 0.8 * len(text_tokens)  # not one token over and over
        assert tokenizer.decode(tokens, skip_special_tokens=True).strip()
    assert len({tuple(tokens) for tokens in transcripts}) == len(transcripts)
    assert len({tokens[0] for tokens in transcripts}) >= 2  # the audio matters from the first token on
    assert sum(tokens[-1] == 50257 for tokens in transcripts) >= 1  # some end before the limit


def test_generate_with_timestamps_emits_timestamps_and_ends(loaded):
    model, processor = loaded["target"]
    with torch.no_grad():
        tokens = model.generate(
            features(processor, CLIPS["tones-6s"]), language="de", task="transcribe", return_timestamps=True
        )[0].tolist()
    assert any(token >= 50365 for token in tokens)
    assert len(tokens) < 200  # ended with <|endoftext|>, long before max_length
    assert "<|" in processor.tokenizer.decode(tokens, decode_with_timestamps=True)


@pytest.mark.parametrize("draft_name", ["draft-separate", "draft-shared"])
def test_drafts_agree_with_the_target_on_some_positions_only(loaded, target_transcripts, draft_name):
    target_processor = loaded["target"][1]
    draft, draft_processor = loaded[draft_name]
    rates = [
        teacher_forced_agreement(draft, draft_processor, target_processor, CLIPS[name], tokens)
        for name, tokens in target_transcripts.items()
    ]
    assert all(0.1 < rate < 0.95 for rate in rates), rates
    assert 0.3 < np.mean(rates) < 0.9, rates


def test_build_is_deterministic_and_leaves_the_global_rng_alone(loaded):
    rng_state = torch.get_rng_state()
    rebuilt = build_models(seed=0)
    assert torch.equal(torch.get_rng_state(), rng_state)
    assert set(rebuilt) == set(SPECS) == set(loaded)
    for name, demo in rebuilt.items():
        built, saved = demo.model.state_dict(), loaded[name][0].state_dict()
        assert all(torch.equal(built[key], saved[key]) for key in saved), name
    other_seed = build_models(seed=1)["target"].model.state_dict()
    key = "model.decoder.layers.0.fc1.weight"
    assert not torch.equal(other_seed[key], loaded["target"][0].state_dict()[key])
