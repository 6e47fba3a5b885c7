"""The token view on scripts whose characters span several byte-level tokens (Thai, Korean, emoji), on the
bundled multilingual Whisper tokenizer: one span per character, coloured by its worst piece, never "�"."""

from __future__ import annotations

import pytest
from transformers.convert_slow_tokenizer import bytes_to_unicode

from specdec.app import highlight
from specdec.trace import ACCEPTED, BONUS, CORRECTED, DRAFT_MODEL, TARGET, DecodeResult, Step, TokenRecord
from specdec.whisper import demo

THAI = " สวัสดีครับ"


@pytest.fixture(scope="module")
def tokenizer():
    return demo.build_tokenizer(demo.V2)


def byte_tokens(tokenizer, text: str) -> list[int]:
    """The text as one token per UTF-8 byte: a spelling the model may give (or a draft propose)."""
    return tokenizer.convert_tokens_to_ids([bytes_to_unicode()[byte] for byte in text.encode()])


def decoded(tokenizer, token_ids: list[int]) -> str:
    return tokenizer.decode(token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def planted_thai(tokenizer) -> tuple[DecodeResult, list[int]]:
    """THAI one byte a token. Step 0 drafts the space, ส and the first byte of ว, then a wrong byte that
    with a second would make เ; the target corrects it to ว's second byte. Step 1 drafts the rest but the
    last byte, all accepted, and the target adds that as its bonus; step 2 is the target's end-of-text."""
    kept = byte_tokens(tokenizer, THAI)  # space, then 3 bytes a character
    wrong = byte_tokens(tokenizer, "เ")  # e0 b9 80: its first byte is ว's too
    eos = tokenizer.eos_token_id
    steps = (
        Step(0, 0, 0, DRAFT_MODEL, (*kept[:5], *wrong[1:]), 5, kept[5]),
        Step(1, 0, 1, DRAFT_MODEL, tuple(kept[6:-1]), len(kept) - 7, kept[-1]),
        Step(2, 0, 2, DRAFT_MODEL, (), 0, eos),
    )
    tokens = (
        *(TokenRecord(token_id, ACCEPTED, 0, 0, 0.9, 0.8) for token_id in kept[:5]),
        TokenRecord(kept[5], CORRECTED, 0, 0, 0.7, 0.1),
        *(TokenRecord(token_id, ACCEPTED, 1, 0, 0.9, 0.8) for token_id in kept[6:-1]),
        TokenRecord(kept[-1], BONUS, 1, 0, 0.9, None),
        TokenRecord(eos, TARGET, 2, 0, 0.9, None, kept=False),
    )
    return DecodeResult(tuple(kept), (), "th", tokens, steps, (), (), 0.0), kept


def test_thai_split_over_byte_tokens_is_shown_a_character_a_span(tokenizer):
    result, kept = planted_thai(tokenizer)
    spans = highlight.token_spans(result, tokenizer, timestamp_begin=10**9)
    assert not any("\ufffd" in span.text for span in spans)
    shown = [span for span in spans if span.kept and span.label != highlight.REJECTED]
    assert "".join(span.text for span in shown) == decoded(tokenizer, kept) == THAI
    assert [span.text for span in shown] == [" ", *"สวัสดีครับ"]
    # ว's first byte was accepted, its second corrected, its third accepted: the correction colours it
    assert [span.label for span in shown] == [ACCEPTED, ACCEPTED, CORRECTED, *[ACCEPTED] * 7, BONUS]
    assert shown[2].step == 0 and shown[2].target_prob == 0.7
    rejected = [span.text for span in spans if span.label == highlight.REJECTED]
    assert rejected == ["เ"]  # ว's first byte, kept, then the draft's: the character it proposed instead
    assert [span.text for span in spans][2:4] == ["เ", "ว"]  # before the character it corrects
    assert spans[-1].text == highlight.END_OF_TEXT and not spans[-1].kept


def test_a_rejected_draft_that_stops_inside_a_character_ends_unfinished(tokenizer):
    kept = byte_tokens(tokenizer, " ส")
    drafted = (*kept[:2], *byte_tokens(tokenizer, "เ")[1:2])  # the draft stops after two of เ's bytes
    steps = (Step(0, 0, 0, DRAFT_MODEL, drafted, 2, kept[2]), Step(1, 0, 1, DRAFT_MODEL, (), 0, kept[3]))
    tokens = (
        TokenRecord(kept[0], ACCEPTED, 0, 0, 0.9, 0.8),
        TokenRecord(kept[1], ACCEPTED, 0, 0, 0.9, 0.8),
        TokenRecord(kept[2], CORRECTED, 0, 0, 0.7, 0.1),
        TokenRecord(kept[3], TARGET, 1, 0, 0.9, None),
    )
    result = DecodeResult(tuple(kept), (), "th", tokens, steps, (), (), 0.0)
    spans = highlight.token_spans(result, tokenizer, timestamp_begin=10**9)
    assert not any("\ufffd" in span.text for span in spans)
    assert [(span.text, span.label) for span in spans] == [
        (" ", ACCEPTED), (highlight.UNFINISHED, highlight.REJECTED), ("ส", CORRECTED),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text", [THAI, " 👍🏽 ok 🎉", " 👨‍👩‍👧‍👦 家族", " ภาษาไทยเป็นภาษาที่มีเสียงวรรณยุกต์", " ሰላም ዓለም"]
)
def test_token_texts_of_the_tokenizers_own_spelling_join_to_the_text(tokenizer, text):
    token_ids = tokenizer.encode(text, add_special_tokens=False)
    texts = highlight.token_texts(token_ids, tokenizer, timestamp_begin=10**9)
    assert len(texts) == len(token_ids) and "".join(texts) == text
    assert not any("\ufffd" in piece for piece in texts)
    groups = highlight.character_groups(token_ids, tokenizer, timestamp_begin=10**9)
    assert sum(size for size, _ in groups) == len(token_ids)
    assert [piece for piece in texts if piece] == [text for _, text in groups if text]


def test_characters_chained_over_many_tokens_are_not_cut(tokenizer):
    """다 is eb 8b a4, and Whisper has a token a4 eb (the end of one Hangul syllable, the start of the
    next): 다다다다 can come as nine tokens, none of which ends a character until the last."""
    single = byte_tokens(tokenizer, "다")
    bridge = tokenizer.convert_tokens_to_ids("".join(bytes_to_unicode()[byte] for byte in b"\xa4\xeb"))
    token_ids = [*single[:2], *[bridge, single[1]] * 3, single[2]]
    assert decoded(tokenizer, token_ids) == "다다다다"
    assert highlight.token_texts(token_ids, tokenizer, timestamp_begin=10**9) == [""] * 8 + ["다다다다"]
    assert highlight.character_groups(token_ids, tokenizer, timestamp_begin=10**9) == [(9, "다다다다")]


def test_a_character_left_unfinished_does_not_swallow_the_next_token(tokenizer):
    """A model may end a character early: its lone bytes are "�" (as in the decoded text), on their own."""
    token_ids = [*byte_tokens(tokenizer, "ส")[:2], *tokenizer.encode(" clay", add_special_tokens=False)]
    groups = highlight.character_groups(token_ids, tokenizer, timestamp_begin=10**9)
    assert groups == [(2, "\ufffd"), (1, " clay")]
    assert "".join(text for _, text in groups) == decoded(tokenizer, token_ids)


def test_a_rejected_draft_that_starts_its_own_character_shows_no_kept_bytes(tokenizer):
    """The target finished ส where the draft, one byte into it, proposed a word instead."""
    kept = byte_tokens(tokenizer, "ส")
    word = tokenizer.encode(" clay", add_special_tokens=False)
    steps = (
        Step(0, 0, 0, DRAFT_MODEL, (kept[0], *word), 1, kept[1]),
        Step(1, 0, 1, DRAFT_MODEL, (), 0, kept[2]),
    )
    tokens = (
        TokenRecord(kept[0], ACCEPTED, 0, 0, 0.9, 0.8),
        TokenRecord(kept[1], CORRECTED, 0, 0, 0.7, 0.1),
        TokenRecord(kept[2], TARGET, 1, 0, 0.9, None),
    )
    result = DecodeResult(tuple(kept), (), "th", tokens, steps, (), (), 0.0)
    spans = highlight.token_spans(result, tokenizer, timestamp_begin=10**9)
    assert [(span.text, span.label) for span in spans] == [(" clay", highlight.REJECTED), ("ส", CORRECTED)]
