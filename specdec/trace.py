"""What happened during a decoding: every token, every step, every pass, as serialisable frozen dataclasses.

A fact is stored once, where it belongs: a token's story on its `TokenRecord`, a row's step (what was
proposed, by whom, what was kept) on its `Step`, the seconds of a batched target pass on its `Pass` and
those of a batched encoder call on its `Encoding` (every row of the batch refers to the same record).
Statistics (acceptance rate, tokens per target pass, ...) are properties derived from these.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

ACCEPTED = "accepted"  # drafted and confirmed by the target
CORRECTED = "corrected"  # the target's token where it rejected a draft token
BONUS = "bonus"  # the target's extra token after a fully accepted draft
TARGET = "target"  # the target's token in a step with no draft (baseline, or a draft of length 0)
RELAXED = "relaxed"  # drafted and kept by the lossy acceptance threshold, though not the target's choice
LABELS = (ACCEPTED, CORRECTED, BONUS, TARGET, RELAXED)
KEPT_DRAFT = (ACCEPTED, RELAXED)  # the labels of drafted tokens that were kept

DRAFT_MODEL = "draft"  # a step's proposal came from the draft model
HYPOTHESIS = "reused"  # from the previous hypothesis of a live stream (free: no model runs)
NO_PROPOSAL = "none"  # nothing was proposed: the target decoded the step alone
SOURCES = (DRAFT_MODEL, HYPOTHESIS, NO_PROPOSAL)


@dataclass(frozen=True)
class TokenRecord:
    """One generated token (target vocabulary id) and how it came to be."""

    token_id: int
    label: str  # one of LABELS
    step: int  # index of the step that produced it
    window: int  # 30 s decoding window (timestamp mode may seek and decode a window again)
    target_prob: float  # the target's probability for this token (after logits processing)
    draft_prob: float | None  # the draft's probability for it at this position; None without a draft there
    kept: bool = True  # False for tokens generated but dropped (end-of-text, the tail after the last pair)


@dataclass(frozen=True)
class Pass:
    """One batched target pass and the drafting before it, shared by every row of the batch."""

    index: int  # in order over the whole decoding (the clips of one batch share the numbering)
    rows: int  # rows in the batch
    start_seconds: float  # since decoding began
    draft_seconds: float  # every draft pass of the step, all rows at once (0 without a draft model)
    verify_seconds: float  # the target pass over every row's pending tokens and proposal


TARGET_ENCODER, DRAFT_ENCODER = "target", "draft"  # whose encoder an `Encoding` ran


@dataclass(frozen=True)
class Encoding:
    """One batched encoder call, shared by the windows encoded in it."""

    index: int  # in order over the whole decoding
    model: str  # TARGET_ENCODER or DRAFT_ENCODER
    windows: int  # windows encoded together
    seconds: float


@dataclass(frozen=True)
class Step:
    """One row's part in one target pass: `source` proposed `drafted`, the target kept `n_accepted` and
    supplied one token."""

    index: int
    window: int
    pass_index: int  # the `Pass` this step took part in
    source: str  # one of SOURCES
    drafted: tuple[int, ...]  # target-vocabulary ids proposed (empty for target-only steps)
    n_accepted: int
    target_token: int | None  # correction or bonus; None when an accepted draft token ended the text

    @property
    def num_judged(self) -> int:
        """Proposed tokens the target judged: the accepted ones and the first rejected one."""
        return self.n_accepted + (self.n_accepted < len(self.drafted))


@dataclass(frozen=True)
class Window:
    """One decoded window (up to 30 s) and where it lies in the file: the seek table of a long file.

    Tokens and steps name their window by `index`; a plot of a long file's steps marks its boundaries
    from here. With the temperature fallback a window may be decoded more than once: each decoding has its
    record, those that failed the thresholds marked `fell_back` (their tokens kept=False), and the next
    record is the same audio decoded again at the next temperature.
    """

    index: int  # the `window` of its tokens and steps
    start_seconds: float  # where the window starts in the whole file
    seconds: float  # audio decoded in it (the rest of the 30 s is padding)
    chunk: int | None = None  # chunked long-form decoding: the chunk this window belongs to
    # generate()'s no-speech rule (DecodeOptions.no_speech_threshold, logprob_threshold), measured on the
    # target: its probability of <|nospeech|> at <|startoftranscript|> (with no_speech_threshold), the
    # average log-probability of the window's tokens, end-of-text included (with logprob_threshold)
    no_speech_prob: float | None = None
    avg_logprob: float | None = None
    no_speech: bool = False  # judged no speech: its tokens dropped, decoding moved on past the window
    temperature: float = 0.0  # what it was decoded at (0: greedy)
    compression_ratio: float | None = None  # generate()'s: its tokens' bytes (end-of-text included) over
    # their zlib-compressed length (a decoding loop compresses well)
    fell_back: bool = False  # failed the temperature fallback's thresholds: decoded again at the next one


@dataclass(frozen=True)
class Segment:
    """A stretch of transcript between two timestamps, in seconds from the start of the whole file."""

    start_seconds: float | None  # None where the model gave no timestamp (e.g. cut off at the end)
    end_seconds: float | None
    token_ids: tuple[int, ...]  # text tokens only


@dataclass(frozen=True)
class DecodeResult:
    """A whole decoding of one clip: output ids, every token's story, every step, pass and encoding."""

    token_ids: tuple[int, ...]  # target ids after the forced prompt, without end-of-text
    prompt_ids: tuple[int, ...]
    language: str
    tokens: tuple[TokenRecord, ...]
    steps: tuple[Step, ...]
    passes: tuple[Pass, ...]  # every target pass the clip's rows took part in, in order
    encodings: tuple[Encoding, ...]  # every encoder call that encoded one of its windows
    total_seconds: float  # encoders + decoding, wall clock
    windows: tuple[Window, ...] = ()  # every decoded window in order; token.window / step.window index it
    segments: tuple[Segment, ...] = ()  # chunked long-form with timestamps: file-relative segments
    token_spans: tuple[tuple[float, float], ...] | None = None  # with word timestamps: each of token_ids'
    # (start, end) in seconds of the file, from the target's alignment heads (`whisper.word_times`)
    alignment_seconds: float = 0.0  # what timing them took (its extra decoder passes and the alignment)
    acceptance_threshold: float | None = None  # the lossy acceptance threshold it was decoded with; None:
    # exact, the target's own output

    @property
    def lossless(self) -> bool:
        """The output is the target's own (decoded without a lossy acceptance threshold)."""
        return self.acceptance_threshold is None

    @property
    def num_relaxed(self) -> int:
        """Kept tokens the target would not have chosen (the lossy acceptance threshold)."""
        return sum(token.label == RELAXED and token.kept for token in self.tokens)

    @property
    def no_speech(self) -> bool:
        """Every window was judged no speech (generate()'s no-speech rule), so the text is empty."""
        final = [window for window in self.windows if not window.fell_back]
        return bool(final) and all(window.no_speech for window in final)

    @property
    def sampled(self) -> bool:
        """Some window was decoded at a temperature above 0 (asked for, or the fallback's)."""
        return any(window.temperature > 0 for window in self.windows)

    def pass_of(self, step: Step) -> Pass:
        """The batched target pass a step took part in."""
        return self._passes_by_index[step.pass_index]

    @functools.cached_property
    def _passes_by_index(self) -> dict[int, Pass]:
        return {p.index: p for p in self.passes}

    @property
    def num_target_passes(self) -> int:
        """Target passes over this clip's rows (in chunked mode, each chunk's, summed)."""
        return len(self.steps)

    @property
    def num_drafted(self) -> int:
        return sum(len(step.drafted) for step in self.steps)

    @property
    def num_accepted(self) -> int:
        return sum(step.n_accepted for step in self.steps)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted."""
        return self.num_accepted / self.num_drafted if self.num_drafted else None

    @property
    def num_generated(self) -> int:
        return len(self.tokens)

    @property
    def tokens_per_pass(self) -> float:
        return self.num_generated / self.num_target_passes if self.steps else 0.0

    @property
    def mean_batch_rows(self) -> float:
        """Rows in the batched passes this clip took part in, on average (1.0: it decoded alone)."""
        return sum(p.rows for p in self.passes) / len(self.passes) if self.passes else 0.0

    @property
    def encoder_seconds(self) -> float:
        return sum(encoding.seconds for encoding in self.encodings)

    @property
    def decode_seconds(self) -> float:
        return self.total_seconds - self.encoder_seconds

    @property
    def encoder_and_alignment_seconds(self) -> float:
        """What no draft shortens: its encoders and any word alignment."""
        return self.encoder_seconds + self.alignment_seconds

    @property
    def draft_seconds(self) -> float:
        return sum(p.draft_seconds for p in self.passes)

    @property
    def verify_seconds(self) -> float:
        return sum(p.verify_seconds for p in self.passes)

    @property
    def tokens_per_second(self) -> float:
        return self.num_generated / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def stats(self) -> dict:
        """The derived statistics as one flat dict (acceptance and tokens per pass also by the original
        design's names)."""
        return {
            "lossless": self.lossless,
            "acceptance_threshold": self.acceptance_threshold,
            "num_relaxed": self.num_relaxed,
            "num_generated": self.num_generated,
            "num_target_passes": self.num_target_passes,
            "num_batched_passes": len(self.passes),
            "mean_batch_rows": self.mean_batch_rows,
            "num_drafted": self.num_drafted,
            "num_accepted": self.num_accepted,
            "acceptance_rate": self.acceptance_rate,
            "overall_acceptance_rate": self.acceptance_rate,
            "tokens_per_pass": self.tokens_per_pass,
            "avg_tokens_per_iteration": self.tokens_per_pass,
            "tokens_per_second": self.tokens_per_second,
            "encoder_seconds": self.encoder_seconds,
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "decode_seconds": self.decode_seconds,
            "total_seconds": self.total_seconds,
        }

    def to_dict(self) -> dict:
        """JSON-ready: the recorded data plus the derived statistics."""
        return {**asdict(self), "stats": self.stats()}


def speedup_bound(baseline: DecodeResult, speculative: DecodeResult) -> float | None:
    """The end-to-end speedup over the target alone that a decode taking no time would give (Amdahl's law):
    the target alone's seconds over the speculative run's `encoder_and_alignment_seconds`; None where the
    speculative run encoded nothing."""
    if speculative.encoder_seconds <= 0:
        return None
    return baseline.total_seconds / speculative.encoder_and_alignment_seconds
