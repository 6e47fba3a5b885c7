"""Decoding a clip's log-mel features: forced prompt, language detection, and generate()'s window loop.

`transformers` 5 `generate()` runs its segment-seek loop even for a clip under 30 s: when a window's
output holds a timestamp pair but does not end on a single timestamp, it keeps the tokens up to the
last pair, seeks to the first timestamp of that pair and decodes the rest of the (zero-padded)
features again. It does so with timestamps requested and also without (a model may still emit
timestamp tokens after `<|notimestamps|>`). We reproduce that loop exactly
(`split_window` mirrors `WhisperGenerationMixin._retrieve_segment`), speculative inside each window.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from specdec.models import DraftKind, ModelPair
from specdec.options import DecodeOptions
from specdec.processing import LogitsPipeline
from specdec.runner import DecoderRunner, encode
from specdec.speculative import Drafter, Row, decode_window
from specdec.trace import DecodeResult, Step, TokenRecord, Window

WINDOW_FRAMES = 3000  # 30 s of 10 ms mel frames
INPUT_STRIDE = 2  # mel frames per encoder position (and per timestamp step of 20 ms)
MAX_WINDOWS = 64  # per 30 s of audio: a guard against a window loop that stops advancing
TIMESTAMP_SECONDS = 0.02  # one timestamp token step
FRAME_SECONDS = 0.01  # one mel frame (hop of 160 samples at 16 kHz)

# (model, window features (1, mel_bins, 3000)) -> (encoder output (1, 1500, d_model), seconds)
Encoder = Callable[[WhisperForConditionalGeneration, torch.Tensor], tuple[torch.Tensor, float]]


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


def forced_prompt(
    generation_config: GenerationConfig,
    language_id: int | None,
    options: DecodeOptions,
    previous_text: tuple[int, ...] = (),
) -> list[int]:
    """`[<|startofprev|> previous text]<|startoftranscript|><|lang|><|task|>[<|notimestamps|>]`,
    as generate() builds it (with prompt_ids for the previous text)."""
    prompt = [generation_config.prev_sot_token_id, *previous_text] if previous_text else []
    prompt.append(generation_config.decoder_start_token_id)
    if getattr(generation_config, "is_multilingual", False) and language_id is not None:
        prompt += [language_id, generation_config.task_to_id[options.task]]
    if not options.timestamps:
        prompt.append(generation_config.no_timestamps_token_id)
    return prompt


def detect_language(pair: ModelPair, encoder_hidden_states: torch.Tensor) -> list[int]:
    """Per row of encoder output (batch, 1500, d_model), the target's most likely language token after
    `<|startoftranscript|>` (generate()'s own method)."""
    target = pair.target.model
    with torch.inference_mode():
        language_ids = target.detect_language(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
            generation_config=target.generation_config,
        )
    return [int(language_id) for language_id in language_ids]


def language_ids(pair: ModelPair, options: DecodeOptions, hidden: torch.Tensor) -> list[int | None]:
    """The language token of each row's prompt (hidden: (batch, 1500, d_model)): None for an English-only
    model, options.language if given, else detected by the target."""
    config = pair.target.model.generation_config
    if not getattr(config, "is_multilingual", False):
        return [None] * hidden.shape[0]
    if options.language is not None:
        return [language_token_id(config, options.language)] * hidden.shape[0]
    return detect_language(pair, hidden)


def split_window(tokens: list[int], timestamp_begin: int, window_frames: int) -> tuple[int, int]:
    """(tokens kept, frames to seek forward) after decoding a window with timestamps.

    Mirrors `_retrieve_segment`: a single timestamp at the end (or no timestamp pair at all) keeps
    everything and moves past the window; otherwise the tail after the last timestamp pair is dropped
    and decoding resumes at that pair's first timestamp.
    """
    is_timestamp = [token >= timestamp_begin for token in tokens]
    single_ending = is_timestamp[-2:] == [False, True]
    pair_ends = [i + 1 for i in range(len(tokens) - 1) if is_timestamp[i] and is_timestamp[i + 1]]
    if not pair_ends or single_ending:
        return len(tokens), window_frames
    kept = pair_ends[-1] + 1
    return kept, (tokens[kept - 2] - timestamp_begin) * INPUT_STRIDE


class FeatureWindows(Protocol):
    """Features computed one window at a time (a long file's, see `longform.WindowedFeatures`)."""

    @property
    def shape(self) -> tuple[int, int, int]: ...  # (1, mel_bins, frames) of the whole file

    def window(self, seek: int) -> torch.Tensor: ...  # what window_features gives for a full tensor


Features = torch.Tensor | FeatureWindows


def window_features(features: Features, seek: int) -> torch.Tensor:
    """30 s of features from frame `seek`, zero-padded like generate()'s `_get_input_segment`."""
    if not isinstance(features, torch.Tensor):
        return features.window(seek)
    segment = features[:, :, seek : seek + WINDOW_FRAMES]
    return F.pad(segment, (0, WINDOW_FRAMES - segment.shape[-1]))


@dataclasses.dataclass
class ClipDecoding:
    """One clip's way through generate()'s window loop: where the next window starts and what was kept.

    decode_features runs it one window at a time; batching.decode_batch_features runs many clips' windows
    side by side. Both build each window's prompt and fold its row back in with the same methods.
    """

    features: Features  # (1, mel_bins, frames): the target's log-mel features
    draft_features: Features | None  # the draft's own features (a separate encoder), else None
    generator: torch.Generator
    clock_start: float
    seek: int = 0  # first frame of the next window
    window: int = 0  # index of the next window
    language_id: int | None = None
    first_prompt: list[int] | None = None
    encoder_seconds: float = 0.0
    output: list[int] = dataclasses.field(default_factory=list)
    tokens: list[TokenRecord] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)
    windows: list[Window] = dataclasses.field(default_factory=list)
    done: bool = False
    end_seconds: float | None = None  # clock time when the last window was folded in

    def __post_init__(self) -> None:
        self.done = self.features.shape[-1] == 0

    @property
    def window_frames(self) -> int:
        return min(self.features.shape[-1] - self.seek, WINDOW_FRAMES)

    def prompt(self, config: GenerationConfig, options: DecodeOptions) -> list[int]:
        """This window's forced prompt (the first is the result's prompt_ids); previous text
        (options.prompt_ids) conditions the first window only."""
        previous_text = options.prompt_ids if self.window == 0 else ()
        prompt = forced_prompt(config, self.language_id, options, previous_text)
        self.first_prompt = self.first_prompt or prompt
        return prompt

    def max_new_tokens(self, model_config: WhisperConfig, options: DecodeOptions, prompt: list[int]) -> int:
        """generate()'s budget for a window: options.max_new_tokens within the decoder's positions."""
        limit = model_config.max_target_positions - len(prompt)
        return limit if options.max_new_tokens is None else min(limit, options.max_new_tokens)

    def finish_window(self, row: Row, config: GenerationConfig, eos_token_id: int) -> None:
        """Keep the window's tokens up to generate()'s split and seek on, or stop after the last window."""
        generated = row.generated[:-1] if row.generated[-1:] == [eos_token_id] else row.generated
        # generate() splits on timestamp pairs even without return_timestamps (the model may emit them)
        kept, advance = split_window(generated, timestamp_begin(config), self.window_frames)
        self.output += generated[:kept]
        self.tokens += [
            record if i < kept else dataclasses.replace(record, kept=False)
            for i, record in enumerate(row.tokens)
        ]
        self.steps += row.steps
        self.windows.append(
            Window(
                self.window, round(self.seek * FRAME_SECONDS, 2), round(self.window_frames * FRAME_SECONDS, 2)
            )
        )
        self.seek += advance
        self.window += 1
        # advance <= 0 would decode the same window forever; generate() has no such guard
        max_windows = MAX_WINDOWS * max(1, math.ceil(self.features.shape[-1] / WINDOW_FRAMES))
        self.done = advance <= 0 or self.seek >= self.features.shape[-1] or self.window >= max_windows
        self.end_seconds = time.perf_counter() - self.clock_start

    def result(self, config: GenerationConfig) -> DecodeResult:
        return DecodeResult(
            token_ids=tuple(self.output),
            prompt_ids=tuple(self.first_prompt or ()),
            language=_language_code(config, self.language_id),
            tokens=tuple(self.tokens),
            steps=tuple(self.steps),
            encoder_seconds=self.encoder_seconds,
            total_seconds=self.end_seconds or time.perf_counter() - self.clock_start,
            windows=tuple(self.windows),
        )


def decode_features(
    pair: ModelPair,
    features: Features,
    draft_features: Features | None,
    options: DecodeOptions,
    use_draft: bool = True,
    wrap_drafter: Callable[[Drafter | None], Drafter] | None = None,
    encoder: Encoder = encode,
    on_window: Callable[[ClipDecoding], None] | None = None,
) -> DecodeResult:
    """Decode one clip (features: (1, mel_bins, frames)); speculative when use_draft and a draft exists.

    wrap_drafter, if given, replaces each window's drafter (None without a draft) with its own, e.g. live
    hypothesis reuse. options.prompt_ids condition the first window only, as generate()'s prompt_ids do.
    encoder runs a model's encoder on one window; the benchmark passes a memo so that each clip is encoded
    once per model (its seconds count as encoder time, never as decode time). on_window is called after
    each window is folded in (progress of a long file).
    """
    clock_start = time.perf_counter()
    config = pair.target.model.generation_config
    use_draft = use_draft and pair.draft is not None
    clip = ClipDecoding(features, draft_features, make_generator(options, features.device), clock_start)
    while not clip.done:
        hidden, seconds = encoder(pair.target.model, window_features(features, clip.seek))
        clip.encoder_seconds += seconds
        if clip.first_prompt is None:
            clip.language_id = language_ids(pair, options, hidden)[0]
        prompt = clip.prompt(config, options)
        pipeline = LogitsPipeline(
            config, len(prompt), options.timestamps, options.temperature, options.top_p, hidden.device
        )
        drafter = None
        if use_draft:
            drafter, seconds = _drafter(pair, hidden, draft_features, clip.seek, prompt, pipeline, encoder)
            clip.encoder_seconds += seconds
        if wrap_drafter is not None:
            drafter = wrap_drafter(drafter)
        row = Row(list(prompt), len(prompt), options.num_draft_tokens)
        max_new_tokens = clip.max_new_tokens(pair.target.model.config, options, prompt)
        decode_window(
            DecoderRunner(pair.target.model, hidden), drafter, row, pipeline, options, max_new_tokens,
            clip.window, clip.generator, clock_start, len(clip.steps),
        )  # fmt: skip
        clip.finish_window(row, config, pipeline.eos_token_id)
        if on_window is not None:
            on_window(clip)
    return clip.result(config)


def make_generator(options: DecodeOptions, device: torch.device) -> torch.Generator:
    """A clip's own sampling generator: seeded with options.seed, else from fresh entropy."""
    generator = torch.Generator(device=device)
    if options.seed is None:
        generator.seed()
    else:
        generator.manual_seed(options.seed)
    return generator


def _language_code(config: GenerationConfig, language_id: int | None) -> str:
    if language_id is None:
        return "en"
    id_to_lang = {i: token.strip("<|>") for token, i in config.lang_to_id.items()}
    return id_to_lang.get(language_id, "unknown")


def _drafter(
    pair: ModelPair,
    target_hidden: torch.Tensor,
    draft_features: Features | None,
    seek: int,
    prompt: list[int],
    pipeline: LogitsPipeline,
    encoder: Encoder = encode,
) -> tuple[Drafter, float]:
    """The draft's runner for this window: the target's encoder output if shared, else its own encoding."""
    seconds = 0.0
    if pair.kind is DraftKind.SHARED_ENCODER:
        hidden = target_hidden
    else:
        hidden, seconds = encoder(pair.draft.model, window_features(draft_features, seek))
    runner = DecoderRunner(pair.draft.model, hidden)
    return Drafter(runner, pair.vocabulary, pair.vocabulary.prompt_to_draft(prompt), pipeline), seconds
