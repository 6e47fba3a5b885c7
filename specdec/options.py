"""Decoding options: one frozen dataclass, a comment per field."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import typing
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

TASKS = ("transcribe", "translate")
LONG_FORM_MODES = ("sequential", "chunked")
# what a CPU pair's target encoder computes in, as faster-whisper names it (`engine.compute_types`); a
# load-time choice (SpeculativeWhisper, the commands' and the app's --compute-type), not a request's
# ("default": as loaded, float32 on a CPU and float16 on CUDA; "auto": the fastest this CPU runs natively)
COMPUTE_TYPES = ("default", "auto", "float32", "bfloat16", "int8")
DEFAULT_COMPUTE_TYPE = "default"  # docs/models.md: how each compares
# (fraction done in [0, 1], a short message); long-form decoding calls it as the work advances
Progress = Callable[[float, str], None]
# Whisper's own values of generate()'s no-speech rule (openai-whisper's transcribe() defaults)
WHISPER_NO_SPEECH_THRESHOLD, WHISPER_LOGPROB_THRESHOLD = 0.6, -1.0
# and of its temperature fallback: a window fails when its tokens compress more than this (a loop) or its
# average log-probability is below WHISPER_LOGPROB_THRESHOLD, and is decoded again at the next temperature
WHISPER_COMPRESSION_RATIO_THRESHOLD = 2.4
WHISPER_TEMPERATURE_STEP = 0.2  # openai-whisper's temperature_increment_on_fallback
# generate() judges a window by both numbers (with no_speech_threshold alone it fails: UnboundLocalError)
NO_SPEECH_NEEDS_LOGPROB = (
    "no_speech_threshold needs logprob_threshold too: a window is judged no speech by both "
    "(Whisper's values: no_speech_threshold=0.6, logprob_threshold=-1.0)"
)


# The least temperature that samples: scores / temperature stays finite in float32 for any logit up to
# 3e36 (a smaller one overflows them and the sampling probabilities turn to NaN), and below it sampling is
# greedy in all but name (a token 0.1 logit behind the best is e^10 times less likely). See docs/usage.md.
MIN_TEMPERATURE = 0.01
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds both take this range
DRAFT_TOKENS = (1, 12)  # the least and the largest k of the adaptive draft length, by default


def check_temperature(temperature: float) -> None:
    """0 (greedy), or a finite number from MIN_TEMPERATURE up (ValueError otherwise)."""
    is_number = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
    if not (is_number and (temperature == 0 or MIN_TEMPERATURE <= temperature < math.inf)):
        raise ValueError(f"temperature must be 0 (greedy) or a finite number from {MIN_TEMPERATURE} up")


def whisper_temperatures(start: float = 0.0) -> tuple[float, ...]:
    """openai-whisper's fallback temperatures from `start` up to 1.0 by 0.2 (its transcribe CLI's rule):
    (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) from 0."""
    steps = math.floor((1.0 - start) / WHISPER_TEMPERATURE_STEP + 1e-6)
    return tuple(round(start + i * WHISPER_TEMPERATURE_STEP, 6) for i in range(max(steps, 0) + 1))


def whisper_fallback(start: float = 0.0) -> dict:
    """DecodeOptions fields for Whisper's temperature fallback with its own values, from `start`."""
    return {
        "temperature": whisper_temperatures(start),
        "compression_ratio_threshold": WHISPER_COMPRESSION_RATIO_THRESHOLD,
        "logprob_threshold": WHISPER_LOGPROB_THRESHOLD,
    }


def check_long_form(long_form: str) -> None:
    if long_form not in LONG_FORM_MODES:
        raise ValueError(f"long_form must be {' or '.join(LONG_FORM_MODES)}, not {long_form!r}")


def option(default, help: str, **door) -> dataclasses.Field:
    """A request option's one declaration: its default and help, and how each door shows it (`flags`:
    its command-line names, first the main one, none: not on the command line; `nargs`, `metavar`,
    `choices`; `label`: its name on the page; `bounds`: (least, most, step) of the page's slider).
    `specdec.request` builds the command line and /v1's fields from these, `specdec.app.controls` the
    page's controls; the checks are `__post_init__`'s."""
    return field(default=default, metadata={"help": help, **door})


@dataclass(frozen=True)
class DecodeOptions:
    language: str | None = option(None, "e.g. en, de, or a name (german); default: detected by the target")
    task: str = option("transcribe", "transcribe, or translate (to English)", choices=TASKS, label="Task")
    timestamps: bool = option(
        False,
        "predict timestamp tokens (generate()'s return_timestamps=True): segment times, which subtitles need",
        label="Timestamps",
    )
    word_timestamps: bool = option(
        False,
        "time every word from the target's alignment heads' cross-attention over the text tokens (as "
        "openai-whisper aligns them: one more decoder pass a window; the same times with timestamps or "
        "without)",
        label="Word timestamps",
    )
    temperature: float | tuple[float, ...] = option(
        0.0,
        f"0: greedy (default); from {MIN_TEMPERATURE}: speculative sampling from the target's distribution; "
        "several (e.g. 0 0.2 0.4 0.6 0.8 1): generate()'s temperature fallback, each window decoded at the "
        "first and again at the next while it fails the compression-ratio or log-probability threshold (the "
        "last one's output kept if every one fails; with neither threshold, the first)",
        nargs="+",
        metavar="T",
        label="Temperature (0 = greedy)",
        bounds=(0.0, 1.2, 0.1),
    )
    top_p: float | None = option(None, "nucleus sampling on the target's (and draft's) distribution")
    seed: int | None = option(None, "seeds the explicit torch.Generator used for sampling", label="Seed")
    num_draft_tokens: int = option(
        5,
        "k: tokens the draft proposes per target pass (the start value when adaptive)",
        label="Draft tokens k (start value)",
        bounds=(*DRAFT_TOKENS, 1),
    )
    adaptive: bool = option(
        True,
        "grow k after a fully accepted draft, shrink it after a rejection, pause a draft that keeps failing "
        "(a language it does not speak): never much slower than the target alone; off: k fixed",
    )
    min_draft_tokens: int = option(DRAFT_TOKENS[0], "the least k when adaptive")
    max_draft_tokens: int = option(DRAFT_TOKENS[1], "the largest k when adaptive")
    cost_aware: bool = option(
        False,
        "batches and chunks: each step's k from measured pass costs (greedy output unchanged; seeded "
        "sampling then depends on timings)",
    )
    draft_confidence: float = option(
        0.5,
        "stop drafting after a proposal the draft gives less than this probability (an unsure token is "
        "likely rejected, and what follows it surely is); 0: k tokens every time",
    )
    max_new_tokens: int | None = option(
        None,
        "per 30 s window, as generate(); default: up to the model's limit",
        flags=("--max-new-tokens", "--max-tokens"),
    )
    prompt_ids: tuple[int, ...] = option(
        (), "previous text (target ids, no specials) before every window", flags=()
    )
    # generate()'s no-speech rule: a window is judged no speech, its text left empty, when the target's
    # probability of <|nospeech|> at <|startoftranscript|> exceeds no_speech_threshold and the average
    # log-probability of its tokens is below logprob_threshold (Whisper's values: 0.6 and -1.0; both needed).
    # None: the target's generation config's value, which OpenAI's checkpoints leave unset: off, as generate()
    no_speech_threshold: float | None = option(
        None,
        "generate()'s no-speech rule: a window whose <|nospeech|> probability is above this and whose "
        "average log-probability is below the log-probability threshold is left empty (off by default, as "
        "generate())",
    )
    logprob_threshold: float | None = option(
        None,
        "the no-speech rule's second number, and the temperature fallback's: a window whose average "
        "log-probability is below it fails (alone, with one temperature, it changes no output)",
    )
    compression_ratio_threshold: float | None = option(
        None,
        "the temperature fallback's loop test: a window whose tokens (as bytes, end-of-text included) "
        "compress more than this under zlib fails (Whisper's value: 2.4; default: the target's generation "
        "config's, unset in OpenAI's checkpoints: off)",
    )
    condition_on_prev_tokens: bool | None = option(
        None,
        "generate()'s: each window's prompt holds the text kept so far (its last 223 tokens), unless the "
        "window before ended at a temperature of 0.5 or more (default: the target's generation config's, "
        "unset in OpenAI's checkpoints: off)",
    )
    acceptance_threshold: float | None = option(
        None,
        "LOSSY, opt-in: also keep a draft token the target gives at least this share of its own top "
        "probability (greedy only); faster, but the output is no longer the target's own (default: exact)",
        label="Acceptance threshold (0 = exact)",
        bounds=(0.0, 1.0, 0.05),
    )

    def __post_init__(self) -> None:
        self._check_switches()
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, not {self.task!r}")
        self._check_temperature()
        is_whole = isinstance(self.seed, numbers.Integral) and not isinstance(self.seed, bool)
        if self.seed is not None and not (is_whole and 0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED}, not {str(self.seed)[:24]}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.num_draft_tokens < 0:
            raise ValueError("num_draft_tokens must be >= 0")
        if not 1 <= self.min_draft_tokens <= self.max_draft_tokens:
            raise ValueError("need 1 <= min_draft_tokens <= max_draft_tokens")
        if not 0 <= self.draft_confidence < 1:
            raise ValueError("draft_confidence must be in [0, 1)")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        for name in ("no_speech_threshold", "logprob_threshold", "compression_ratio_threshold"):
            value = getattr(self, name)
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (is_number and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number or None")
        if self.no_speech_threshold is not None and self.logprob_threshold is None:
            raise ValueError(NO_SPEECH_NEEDS_LOGPROB)
        if self.condition_on_prev_tokens not in (None, True, False):
            raise ValueError("condition_on_prev_tokens must be true, false or None")
        self._check_acceptance_threshold()

    def _check_switches(self) -> None:
        """Every switch is true or false (an API client sends anything): numpy's booleans and the whole
        numbers 0 and 1 are taken as the bools they stand for, anything else refused."""
        for name, annotation in _annotations(type(self)).items():
            value = getattr(self, name)
            if annotation is not bool or isinstance(value, bool):
                continue
            if isinstance(value, numbers.Integral) and value in (0, 1) or isinstance(value, np.bool_):
                object.__setattr__(self, name, bool(value))  # frozen
            else:
                raise ValueError(f"{name} must be true or false, not {str(value)[:20]!r}")

    def _check_temperature(self) -> None:
        """A number, or a non-empty sequence of them (kept as a tuple), each `check_temperature`'s."""
        value = self.temperature
        if isinstance(value, (list, tuple)):
            object.__setattr__(self, "temperature", tuple(value))  # frozen: hashable, compared by value
            if not value:
                raise ValueError("temperature must be a number or a list of them, not an empty list")
        for temperature in self.temperatures:
            check_temperature(temperature)

    @property
    def temperatures(self) -> tuple[float, ...]:
        """The temperatures a window may be decoded at, in order (one: no fallback)."""
        return self.temperature if isinstance(self.temperature, tuple) else (self.temperature,)

    def _check_acceptance_threshold(self) -> None:
        threshold = self.acceptance_threshold
        if threshold is None:
            return
        is_number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
        if not (is_number and 0 < threshold <= 1):
            raise ValueError("acceptance_threshold must be in (0, 1], or None for exact decoding")
        if self.temperatures[0] > 0:
            raise ValueError(
                "acceptance_threshold relaxes greedy decoding (temperature 0); sampling keeps the "
                "target's distribution exactly"
            )

    @property
    def sampling(self) -> bool:
        """Some window may be sampled: a temperature above 0 (a fallback's, once a window fails)."""
        return any(temperature > 0 for temperature in self.temperatures)

    @property
    def lossless(self) -> bool:
        """The output is the target's own (no lossy acceptance threshold)."""
        return self.acceptance_threshold is None


@dataclass(frozen=True)
class TranscribeOptions(DecodeOptions):
    """One request: how to decode it (every `DecodeOptions` field) and how to run it (below)."""

    speculative: bool = option(
        True, "False: the target alone, the output speculation always equals", flags=()
    )
    long_form: str = option(
        "sequential",
        "audio over 30 s: sequential = Whisper's own algorithm, generate()'s output token for token "
        "(default); chunked = overlapping 30 s chunks decoded as one batch and merged as transformers' ASR "
        "pipeline merges them (faster, not generate()'s output)",
        choices=LONG_FORM_MODES,
        label="Long audio (over 30 s)",
    )
    batch_size: int = option(
        1,
        "clips up to 30 s decoded together, each as alone; chunked: chunks per batch (8 when 1)",
    )
    skip_silence: bool = option(
        False,
        "audio over 30 s: decode only its speech, long silences skipped (Silero VAD); times stay the whole "
        "file's, but the output is no longer generate()'s on it",
        label="Skip long silences (audio over 30 s)",
    )
    progress: Progress | None = field(default=None, compare=False)  # progress(fraction, message), long files

    def __post_init__(self) -> None:
        super().__post_init__()
        check_long_form(self.long_form)
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")

    @classmethod
    def of(cls, options: DecodeOptions | None = None, **fields) -> TranscribeOptions:
        """options (DecodeOptions or TranscribeOptions; None: the defaults) with fields replaced (also by
        the original design's names: `max_tokens` for max_new_tokens)."""
        fields = _known_fields(cls, fields)
        if options is None or type(options) is DecodeOptions:
            decode_fields = dataclasses.fields(DecodeOptions)
            own = {} if options is None else {f.name: getattr(options, f.name) for f in decode_fields}
            return cls(**{**own, **fields})
        return dataclasses.replace(options, **fields)


@functools.cache
def _annotations(cls: type) -> dict:
    return typing.get_type_hints(cls)


# the original design's names for options fields
ALIASES = {"max_tokens": "max_new_tokens"}


def _known_fields(cls: type, fields: dict) -> dict:
    """fields with the design's aliases renamed; a TypeError naming the closest field for an unknown one."""
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    renamed = {}
    for name, value in fields.items():
        own = ALIASES.get(name, name)
        if own in renamed:
            raise TypeError(f"{name!r} and {own!r} name the same option: give one")
        if own not in known:
            close = difflib.get_close_matches(name, sorted(known | set(ALIASES)), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"unknown option {name!r}{hint}")
        renamed[own] = value
    return renamed


# the options' own names -> the design's, in SpeculativeConfig's messages
DESIGN_NAMES = {"num_draft_tokens": "gamma", "adaptive": "use_adaptive_gamma"}


@dataclass(frozen=True)
class SpeculativeConfig:
    """The speculation settings by the original design's names: a view of `DecodeOptions` fields
    (`SpeculativeWhisper(config=...)` decodes with them unless a call says otherwise)."""

    gamma: int = DecodeOptions.num_draft_tokens  # k: tokens the draft proposes per target pass
    # LOSSY, opt-in: keep a draft token the target gives at least this share of its top probability
    # (the output is then not the target's); None: exact
    acceptance_threshold: float | None = None
    temperature: float = DecodeOptions.temperature  # 0: greedy; > 0: sampling, the target's distribution
    use_adaptive_gamma: bool = DecodeOptions.adaptive  # grow and shrink k with acceptance

    def __post_init__(self) -> None:
        try:
            self.options()  # checked as the options it stands for
        except ValueError as error:  # in the design's names
            message = str(error)
            for own, design in DESIGN_NAMES.items():
                message = message.replace(own, design)
            raise ValueError(message) from None

    def options(self) -> DecodeOptions:
        """The `DecodeOptions` these settings are."""
        return DecodeOptions(
            num_draft_tokens=self.gamma,
            acceptance_threshold=self.acceptance_threshold,
            temperature=self.temperature,
            adaptive=self.use_adaptive_gamma,
        )
