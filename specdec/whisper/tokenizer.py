"""Whisper tokenizers laid out as the hub's: byte-level BPE text tokens, `<|endoftext|>`, the special tokens,
then 1501 timestamp tokens `<|0.00|>` ... `<|30.00|>`.

Used for the demo checkpoints (from openai/whisper's `.tiktoken` vocabulary) and for imported CTranslate2
checkpoints (from their `tokenizer.json`, which stops before the timestamps).
"""

from __future__ import annotations

from tokenizers import AddedToken
from transformers import WhisperTokenizer

NUM_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>, the last ids of every Whisper vocabulary
END_OF_TEXT = "<|endoftext|>"


def timestamp_tokens() -> list[str]:
    """`<|0.00|>`, `<|0.02|>`, ... `<|30.00|>`."""
    return [f"<|{i * 0.02:.2f}|>" for i in range(NUM_TIMESTAMPS)]


def whisper_tokenizer(
    vocab: dict[str, int], merges: list[tuple[str, str]], special_tokens: list[str]
) -> WhisperTokenizer:
    """A WhisperTokenizer: `vocab` (byte-level BPE strings -> ids, `<|endoftext|>` included or appended next),
    then `special_tokens` in id order, then the timestamps (added but not special, like the hub tokenizers:
    decode() filters them itself)."""
    tokenizer = WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": special_tokens})
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in timestamp_tokens()])
    tokenizer.set_prefix_tokens()  # the prefix template was built before the special tokens existed
    return tokenizer
