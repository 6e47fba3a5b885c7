"""An English-only draft (whisper-tiny.en: GPT-2's byte-level BPE, 51864 ids) for a multilingual target
(whisper-base: 51865 ids), on the real tokenizers: different text ids mapped by string, text the draft
lacks spelled out, the draft's own prompt, and its logits carried into the target's vocabulary."""

from __future__ import annotations

import pytest
import torch
from transformers import WhisperProcessor

from specdec.whisper.vocabulary import VocabularyMap

TEXTS = [
    " And so my fellow Americans, ask not what your country can do for you.",
    " Der Zug nach Berlin fährt heute um halb neun von Gleis drei.",
    " 今日はいい天気ですね。",
    " Ça coûte 12,50 € 🙂",
]


@pytest.fixture(scope="module")
def tokenizers(real_models):
    return tuple(
        WhisperProcessor.from_pretrained(real_models[name]).tokenizer for name in ("base", "tiny.en")
    )


@pytest.fixture(scope="module")
def vocabulary(tokenizers) -> VocabularyMap:
    target, draft = tokenizers
    return VocabularyMap.from_tokenizers(target, draft, 51865, 51864, draft_multilingual=False)


def test_text_ids_differ_and_are_mapped_by_string(tokenizers, vocabulary):
    target, draft = tokenizers
    assert (
        not vocabulary.is_identity
        and vocabulary.num_target_text == 50257
        and vocabulary.draft_eos_id == 50256
    )
    the_target, the_draft = target.convert_tokens_to_ids("Ġthe"), draft.convert_tokens_to_ids("Ġthe")
    assert the_target != the_draft and vocabulary.to_draft([the_target]) == [the_draft]
    assert vocabulary.to_target([the_draft]) == [the_target]
    for token in ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>", "<|0.00|>", "<|30.00|>"):
        assert vocabulary.to_draft([target.convert_tokens_to_ids(token)]) == [
            draft.convert_tokens_to_ids(token)
        ]


def test_every_target_text_token_reaches_the_draft_whole(tokenizers, vocabulary):
    """Each of the 50257 text tokens maps to draft tokens that spell the same bytes, one token or several."""
    target, draft = tokenizers
    target_strings = target.convert_ids_to_tokens(list(range(vocabulary.num_target_text)))
    spelled = 0
    for target_id, string in enumerate(target_strings):
        draft_ids = vocabulary.to_draft([target_id])
        assert "".join(draft.convert_ids_to_tokens(draft_ids)) == string, f"target id {target_id} {string!r}"
        spelled += len(draft_ids) != 1
    assert spelled > 10_000  # about 21k multilingual text tokens are not in GPT-2's vocabulary


@pytest.mark.parametrize("text", TEXTS, ids=["en", "de", "ja", "fr-symbols"])
def test_text_round_trips_through_the_draft(tokenizers, vocabulary, text):
    target, draft = tokenizers
    target_ids = target.encode(text, add_special_tokens=False)
    draft_ids = vocabulary.to_draft(target_ids)
    assert draft.decode(draft_ids) == target.decode(target_ids) == text
    if text.isascii():
        assert len(draft_ids) == len(target_ids)  # English text maps token for token


def test_the_draft_gets_its_own_prompt(tokenizers, vocabulary):
    target, draft = tokenizers
    t, d = target.convert_tokens_to_ids, draft.convert_tokens_to_ids
    german_text = [t("<|startoftranscript|>"), t("<|de|>"), t("<|transcribe|>"), t("<|notimestamps|>")]
    assert vocabulary.prompt_to_draft(german_text) == [d("<|startoftranscript|>"), d("<|notimestamps|>")]
    with_timestamps = [t("<|startoftranscript|>"), t("<|en|>"), t("<|translate|>")]
    assert vocabulary.prompt_to_draft(with_timestamps) == [d("<|startoftranscript|>")]
    previous = target.encode(" Guten Morgen.", add_special_tokens=False)
    prompt = [t("<|startofprev|>"), *previous, *german_text]
    draft_prompt = vocabulary.prompt_to_draft(prompt)
    assert draft_prompt[0] == d("<|startofprev|>") and draft_prompt[-2:] == [
        d("<|startoftranscript|>"),
        50362,
    ]
    assert draft.decode(draft_prompt[1:-2]) == " Guten Morgen."


def test_draft_logits_land_on_the_same_strings(tokenizers, vocabulary):
    target, draft = tokenizers
    draft_logits = torch.randn(1, 51864, generator=torch.Generator().manual_seed(0))
    target_logits = vocabulary.logits_to_target(draft_logits)[0]
    for token in ("Ġthe", "ĠAmericans", "<|endoftext|>", "<|0.00|>", "<|30.00|>"):
        assert (
            target_logits[target.convert_tokens_to_ids(token)]
            == draft_logits[0, draft.convert_tokens_to_ids(token)]
        )
    lacking = vocabulary.target_to_draft < 0
    assert torch.isneginf(target_logits[lacking]).all() and torch.isfinite(target_logits[~lacking]).all()
    nameless = vocabulary.draft_to_target < 0  # GPT-2 tokens the multilingual vocabulary lacks
    kept = torch.softmax(draft_logits[0, ~nameless], -1)  # the draft's distribution over the rest
    assert torch.allclose(torch.softmax(target_logits, -1)[vocabulary.draft_to_target[~nameless]], kept)
