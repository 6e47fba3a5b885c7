"""Id translation between the v2-style draft vocabulary (51865) and the v3 target vocabulary (51866), on the
demo tokenizers; English-only drafts (GPT-2's text ids) are tested on the real tokenizers in
tests/test_real_vocabulary.py."""

from __future__ import annotations

import pytest
import torch
from transformers import WhisperProcessor

from specdec.whisper.vocabulary import VocabularyError, VocabularyMap

EOT, SOT, FIRST_LANGUAGE = 50257, 50258, 50259
V2_SIZE, V3_SIZE = 51865, 51866
V2_TRANSLATE, V3_TRANSLATE = 50358, 50359  # first special token after the language block
V3_YUE = 50358


@pytest.fixture(scope="module")
def vocabulary(demo_models) -> VocabularyMap:
    target = WhisperProcessor.from_pretrained(demo_models["target"]).tokenizer
    draft = WhisperProcessor.from_pretrained(demo_models["draft-separate"]).tokenizer
    return VocabularyMap(target.get_vocab(), draft.get_vocab(), V3_SIZE, V2_SIZE)


def test_text_tokens_and_first_specials_are_identical(vocabulary):
    same = torch.arange(FIRST_LANGUAGE + 99)  # text, <|endoftext|>, <|startoftranscript|>, 99 languages
    assert torch.equal(vocabulary.draft_to_target[same], same)
    assert torch.equal(vocabulary.target_to_draft[same], same)
    assert not vocabulary.is_identity


def test_yue_has_no_draft_token(vocabulary):
    assert vocabulary.target_vocab["<|yue|>"] == V3_YUE
    assert vocabulary.target_to_draft[V3_YUE] == -1
    assert vocabulary.to_draft([SOT, V3_YUE, 400]) == [SOT, 400]  # a special the draft lacks is left out


def test_every_special_after_the_language_block_shifts_by_one(vocabulary):
    draft_ids = torch.arange(
        V2_TRANSLATE, V2_SIZE
    )  # translate, transcribe, ..., notimestamps, 1501 timestamps
    assert torch.equal(vocabulary.draft_to_target[draft_ids], draft_ids + 1)
    assert torch.equal(vocabulary.target_to_draft[draft_ids + 1], draft_ids)
    for token in ("<|translate|>", "<|transcribe|>", "<|notimestamps|>", "<|0.00|>", "<|30.00|>"):
        assert vocabulary.target_vocab[token] == vocabulary.draft_vocab[token] + 1
    assert vocabulary.to_target([V2_SIZE - 1]) == [V3_SIZE - 1]  # <|30.00|>


def test_prompt_translation_with_language_fallback(vocabulary):
    target, draft = vocabulary.target_vocab, vocabulary.draft_vocab
    german = [SOT, target["<|de|>"], target["<|transcribe|>"], target["<|notimestamps|>"]]
    assert vocabulary.prompt_to_draft(german) == [
        SOT,
        draft["<|de|>"],
        draft["<|transcribe|>"],
        draft["<|notimestamps|>"],
    ]
    cantonese = [SOT, V3_YUE, target["<|translate|>"]]
    assert vocabulary.prompt_to_draft(cantonese) == [SOT, draft["<|zh|>"], draft["<|translate|>"]]


def test_draft_logits_land_on_the_same_tokens(vocabulary):
    draft_logits = torch.randn(2, V2_SIZE, generator=torch.Generator().manual_seed(0))
    target_logits = vocabulary.logits_to_target(draft_logits)
    assert target_logits.shape == (2, V3_SIZE)
    assert torch.equal(target_logits[:, :V3_YUE], draft_logits[:, :V3_YUE])
    assert torch.isneginf(target_logits[:, V3_YUE]).all()
    assert torch.equal(target_logits[:, V3_TRANSLATE:], draft_logits[:, V2_TRANSLATE:])


def test_identity_for_the_same_vocabulary(vocabulary):
    same = VocabularyMap(vocabulary.target_vocab, vocabulary.target_vocab, V3_SIZE, V3_SIZE)
    assert same.is_identity
    logits = torch.randn(1, V3_SIZE)
    assert same.logits_to_target(logits) is logits


def test_text_tokens_at_other_ids_are_mapped_by_string(vocabulary):
    draft = dict(vocabulary.target_vocab)
    by_id = {i: token for token, i in draft.items()}
    draft[by_id[100]], draft[by_id[200]] = 200, 100  # two text tokens swapped
    swapped = VocabularyMap(vocabulary.target_vocab, draft, V3_SIZE, V3_SIZE)
    assert not swapped.is_identity
    assert swapped.to_draft([100, 150, 200]) == [200, 150, 100]
    assert swapped.to_target([200, 150, 100]) == [100, 150, 200]
    logits = torch.randn(1, V3_SIZE)
    assert swapped.logits_to_target(logits)[0, 100] == logits[0, 200]


def test_missing_text_needs_a_byte_level_draft(vocabulary):
    draft = {token: i for token, i in vocabulary.target_vocab.items() if i != 300}  # one text token gone
    with pytest.raises(VocabularyError, match="no way to be spelled"):
        VocabularyMap(vocabulary.target_vocab, draft, V3_SIZE, V3_SIZE)
    not_byte_level = {token: i for token, i in draft.items() if len(token) > 1}
    with pytest.raises(VocabularyError, match="not byte-level BPE"):
        VocabularyMap(vocabulary.target_vocab, not_byte_level, V3_SIZE, V3_SIZE, spell=lambda token: [])


def test_a_tokenizer_without_end_of_text_is_refused(vocabulary):
    draft = {token: i for token, i in vocabulary.target_vocab.items() if token != "<|endoftext|>"}
    with pytest.raises(VocabularyError, match="endoftext"):
        VocabularyMap(vocabulary.target_vocab, draft, V3_SIZE, V3_SIZE)
