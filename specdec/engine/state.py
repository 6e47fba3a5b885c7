"""The engine's state: a row of the batch (one window of one clip), and the decoding's clock, which numbers
the batched passes and encoder calls so that each is recorded once and shared by the rows it served."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specdec.options import DecodeOptions
from specdec.trace import Encoding, Pass, Step, TokenRecord
from specdec.whisper.logits import LogitsPipeline, NoSpeechRule


@dataclass
class Row:
    """One window of one clip being decoded: its sequence so far and what its steps need."""

    sequence: list[int]  # target ids: forced prompt + generated tokens
    prompt_length: int
    max_new_tokens: int  # generate()'s budget for this window
    pipeline: LogitsPipeline  # this window's logits processing (generate()'s)
    generator: torch.Generator  # the clip's own, so that sampling draws as it would alone
    window: int  # the clip's window index, for the records
    first_step: int  # index of this window's first step in the clip's trace
    options: DecodeOptions  # its clip's: draft lengths and confidence (rows of a batch may differ); its own
    # temperature is its pipeline's (a window decoded again by the fallback has the next one)
    drafts: bool = True  # the draft proposes for it (False: the target alone, e.g. a language an
    # English-only draft does not speak, or a request without speculation)
    tokens: list[TokenRecord] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)  # the batched passes its steps took part in
    finished: bool = False
    # generate()'s no-speech rule (judging when asked for, else measuring only), and what it reads off the
    # target's logits: the no-speech probability at the window's first pass, each generated token's
    # log-probability (float32)
    no_speech: NoSpeechRule | None = None
    no_speech_prob: float | None = None
    token_logprobs: list[float] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.sequence[self.prompt_length :]

    @property
    def budget(self) -> int:
        """Tokens this window may still generate."""
        return self.max_new_tokens - len(self.generated)

    @property
    def next_step(self) -> int:
        return self.first_step + len(self.steps)


@dataclass
class Clock:
    """A decoding's time origin, and the counters of its batched passes and encoder calls (the batches of
    one decoding, e.g. the chunks of a long file, share one clock)."""

    start: float = field(default_factory=time.perf_counter)
    num_passes: int = 0
    num_encodings: int = 0

    def seconds(self, at: float | None = None) -> float:
        """Seconds since the decoding began (at: a time.perf_counter() reading; default: now)."""
        return (time.perf_counter() if at is None else at) - self.start

    def new_pass(self, rows: int, start: float, draft_seconds: float, verify_seconds: float) -> Pass:
        record = Pass(self.num_passes, rows, self.seconds(start), draft_seconds, verify_seconds)
        self.num_passes += 1
        return record

    def new_encoding(self, model: str, windows: int, seconds: float) -> Encoding:
        record = Encoding(self.num_encodings, model, windows, seconds)
        self.num_encodings += 1
        return record
