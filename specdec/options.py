"""Decoding options: one frozen dataclass, a comment per field."""

from __future__ import annotations

import math
from dataclasses import dataclass

TASKS = ("transcribe", "translate")
# Whisper's own values of generate()'s no-speech rule (openai-whisper's transcribe() defaults)
WHISPER_NO_SPEECH_THRESHOLD, WHISPER_LOGPROB_THRESHOLD = 0.6, -1.0
# generate() judges a window by both numbers (with no_speech_threshold alone it fails: UnboundLocalError)
NO_SPEECH_NEEDS_LOGPROB = (
    "no_speech_threshold needs logprob_threshold too: a window is judged no speech by both "
    "(Whisper's values: no_speech_threshold=0.6, logprob_threshold=-1.0)"
)


@dataclass(frozen=True)
class DecodeOptions:
    language: str | None = None  # code or name ("de", "german"); None: the target detects it
    task: str = "transcribe"  # or "translate" (to English)
    timestamps: bool = False  # predict timestamp tokens (generate()'s return_timestamps=True)
    temperature: float = 0.0  # 0: greedy; > 0: speculative sampling from the target's distribution
    top_p: float | None = None  # nucleus sampling on the target's (and draft's) distribution
    seed: int | None = None  # seeds the explicit torch.Generator used for sampling
    num_draft_tokens: int = 5  # k: tokens the draft proposes per target pass (the start value if adaptive)
    adaptive: bool = True  # grow k after a fully accepted draft, shrink it after a rejection, pause a draft
    # that keeps failing (a language it does not speak): never much slower than the target alone; False: fixed
    min_draft_tokens: int = 1  # bounds of adaptive k
    max_draft_tokens: int = 12
    cost_aware: bool = False  # batches: each step's k from measured pass costs (`draft_cost`); greedy
    # output is unchanged, but seeded sampling then depends on timings
    draft_confidence: float = 0.5  # stop drafting after a proposal the draft gives less than this
    # probability (an unsure token is likely rejected, and what follows it surely is); 0: k tokens every time
    max_new_tokens: int | None = None  # per 30 s window, like generate(); None: up to the model's limit
    prompt_ids: tuple[int, ...] = ()  # previous text (target ids, no specials) before every window
    # generate()'s no-speech rule: a window is judged no speech, its text left empty, when the target's
    # probability of <|nospeech|> at <|startoftranscript|> exceeds no_speech_threshold and the average
    # log-probability of its tokens is below logprob_threshold (Whisper's values: 0.6 and -1.0; both needed).
    # None: the target's generation config's value, which OpenAI's checkpoints leave unset: off, as generate()
    no_speech_threshold: float | None = None
    logprob_threshold: float | None = None  # alone it changes no output (generate() would only retry at a
    # next temperature, and there is one); the windows' average log-probabilities are recorded

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, not {self.task!r}")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
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
        for name in ("no_speech_threshold", "logprob_threshold"):
            value = getattr(self, name)
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (is_number and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number or None")
        if self.no_speech_threshold is not None and self.logprob_threshold is None:
            raise ValueError(NO_SPEECH_NEEDS_LOGPROB)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0
