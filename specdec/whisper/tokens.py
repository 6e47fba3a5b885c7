"""Whisper's token conventions, as transformers' `generate()` follows them: the forced decoder prompt,
language tokens and detection, timestamps, and how a window's tokens split for the seek loop.

`transformers` 5 `generate()` runs its segment-seek loop even for a clip under 30 s: when a window's
output holds a timestamp pair but does not end on a single timestamp, it keeps the tokens up to the
last pair, seeks to the first timestamp of that pair and decodes the rest of the (zero-padded)
features again. It does so with timestamps requested and also without (a model may still emit
timestamp tokens after `<|notimestamps|>`). `split_window` mirrors `WhisperGenerationMixin._retrieve_segment`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import GenerationConfig
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from specdec.options import DecodeOptions

WINDOW_FRAMES = 3000  # 30 s of 10 ms mel frames
INPUT_STRIDE = 2  # mel frames per encoder position (and per timestamp step of 20 ms)
TIMESTAMP_SECONDS = 0.02  # one timestamp token step
FRAME_SECONDS = 0.01  # one mel frame (hop of 160 samples at 16 kHz)


def timestamp_begin(generation_config: GenerationConfig) -> int:
    """The id of `<|0.00|>`; every id from it on is a timestamp."""
    return generation_config.no_timestamps_token_id + 1


def language_token_id(generation_config: GenerationConfig, language: str) -> int:
    """'de', 'german' or '<|de|>' -> the id of `<|de|>`; a clear error for anything else."""
    name = language.lower().strip()
    code = name.strip("<|>") if name.startswith("<|") else TO_LANGUAGE_CODE.get(name, name)
    token = f"<|{code}|>"
    lang_to_id = getattr(generation_config, "lang_to_id", None) or {}
    if code not in LANGUAGES or token not in lang_to_id:
        raise ValueError(f"unsupported language {language!r}; use a code such as 'en', 'de', 'fr' or a name")
    return lang_to_id[token]


def text_ids(tokenizer, text: str) -> list[int]:
    """Text as Whisper's text tokens only (a transformers Whisper tokenizer's byte-level BPE): a control
    token's spelling in it (`<|endoftext|>`, `<|en|>`, `<|0.00|>`) is its characters, as in a transcript,
    never the token itself, which `encode` would give. Any other text gets `encode`'s ids."""
    backend = tokenizer.backend_tokenizer
    text = backend.normalizer.normalize_str(text) if backend.normalizer is not None else text
    pieces = backend.pre_tokenizer.pre_tokenize_str(text)
    return [token.id for piece, _ in pieces for token in backend.model.tokenize(piece)]


def check_previous_text(generation_config: GenerationConfig, previous_text: tuple[int, ...]) -> None:
    """A prompt's previous text holds text tokens only (ValueError otherwise): a control token there
    would steer the decoding (end the prompt, set another language or task, a timestamp)."""
    eos = generation_config.eos_token_id
    first_special = min(eos) if isinstance(eos, list) else eos  # Whisper's specials follow its text ids
    if any(not 0 <= token < first_special for token in previous_text):
        raise ValueError(f"prompt_ids must be text tokens (ids below <|endoftext|>, {first_special})")


def forced_prompt(
    generation_config: GenerationConfig,
    language_id: int | None,
    options: DecodeOptions,
    previous_text: Sequence[int] = (),
    conditioned: bool = False,
) -> list[int]:
    """`[<|startofprev|> previous text]<|startoftranscript|><|lang|><|task|>[<|notimestamps|>]`,
    as generate() builds it (with prompt_ids for the previous text); a window conditioned on earlier ones
    has <|startofprev|> even when their text is empty (`whisper.fallback.previous_text`). A caller's previous
    text holds text tokens only (ValueError); a conditioned window's holds the earlier windows' timestamps
    too, as generate()'s."""
    if not conditioned:
        check_previous_text(generation_config, previous_text)
    has_previous = conditioned or bool(previous_text)
    prompt = [generation_config.prev_sot_token_id, *previous_text] if has_previous else []
    prompt.append(generation_config.decoder_start_token_id)
    if getattr(generation_config, "is_multilingual", False) and language_id is not None:
        prompt += [language_id, generation_config.task_to_id[options.task]]
    if not options.timestamps:
        prompt.append(generation_config.no_timestamps_token_id)
    return prompt


def needs_detection(generation_config: GenerationConfig, options: DecodeOptions) -> bool:
    """The target detects the language: a multilingual model, and no language given."""
    return bool(getattr(generation_config, "is_multilingual", False)) and options.language is None


def given_language_id(generation_config: GenerationConfig, options: DecodeOptions) -> int | None:
    """The prompt's language token when none is detected: options.language's (a clear error for an unknown
    one); None for an English-only model, whose prompt has none."""
    if not getattr(generation_config, "is_multilingual", False) or options.language is None:
        return None
    return language_token_id(generation_config, options.language)


def detected_languages(generation_config: GenerationConfig, logits: torch.Tensor) -> list[int]:
    """Per row of the target's logits after `<|startoftranscript|>` alone (rows, vocab), its most likely
    language token: what `generate()`'s `detect_language` picks (the other tokens masked, then argmax)."""
    language = torch.tensor(sorted(generation_config.lang_to_id.values()), device=logits.device)
    return language[logits[:, language].argmax(-1)].tolist()


def split_window(tokens: list[int], timestamp_begin: int, window_frames: int) -> tuple[int, int]:
    """(tokens kept, frames to seek forward) after decoding a window with timestamps.

    Mirrors `_retrieve_segment`: a single timestamp at the end (or no timestamp pair at all) keeps
    everything and moves past the window; otherwise the tail after the last timestamp pair is dropped
    and decoding resumes at that pair's first timestamp.
    """
    is_timestamp = [token >= timestamp_begin for token in tokens]
    single_ending = is_timestamp[-2:] == [False, True]
    pair_ends = timestamp_pair_ends(tokens, timestamp_begin)
    if not pair_ends or single_ending:
        return len(tokens), window_frames
    kept = pair_ends[-1]
    return kept, (tokens[kept - 2] - timestamp_begin) * INPUT_STRIDE


def timestamp_pair_ends(tokens: list[int], timestamp_begin: int) -> list[int]:
    """Where each pair of timestamp tokens in a row ends: the index just past its second timestamp."""
    return [i + 2 for i in range(len(tokens) - 1) if min(tokens[i : i + 2]) >= timestamp_begin]


def language_code(config: GenerationConfig, language_id: int | None) -> str:
    """The code of a language token id ('de' for the id of `<|de|>`); 'en' for an English-only model."""
    if language_id is None:
        return "en"
    id_to_lang = {i: token.strip("<|>") for token, i in config.lang_to_id.items()}
    return id_to_lang.get(language_id, "unknown")
