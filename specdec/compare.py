"""Target alone against speculative decoding on the same clip: the two runs, the verdict and the metrics.

No order bias: both paths are warmed up when the models load (`warm_up`), so neither run pays first-call
costs, and callers alternate which run goes first from one comparison to the next (`baseline_first`);
the metrics say which one ran first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec import longform
from specdec.audio import SAMPLE_RATE
from specdec.longform import Progress
from specdec.options import DecodeOptions
from specdec.transcriber import SpeculativeWhisper, Transcription


@dataclass(frozen=True)
class Comparison:
    """One clip decoded by the target alone and with speculative decoding, same options, same device."""

    baseline: Transcription
    speculative: Transcription
    options: DecodeOptions
    baseline_first: bool

    @property
    def identical(self) -> bool:
        return self.baseline.token_ids == self.speculative.token_ids

    @property
    def decode_speedup(self) -> float:
        """Decode-phase speedup (encoder excluded): target-alone decode time / speculative decode time."""
        return _ratio(self.baseline.result.decode_seconds, self.speculative.result.decode_seconds)

    @property
    def total_speedup(self) -> float:
        return _ratio(self.baseline.result.total_seconds, self.speculative.result.total_seconds)


def warm_up(whisper: SpeculativeWhisper) -> None:
    """Run both paths once on a second of silence, so that neither timed run pays first-call costs."""
    silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
    options = DecodeOptions(language="en", max_new_tokens=4)
    for speculative in (True, False):
        whisper.transcribe_waveform(silence, options, speculative=speculative)


def compare(
    whisper: SpeculativeWhisper,
    waveform: np.ndarray,
    options: DecodeOptions,
    baseline_first: bool = True,
    name: str = "audio",
    long_form: str = "sequential",
    progress: Progress | None = None,
) -> Comparison:
    """Decode a 16 kHz waveform both ways, one run after the other, in the order asked for.

    Audio over 30 s is decoded long-form (`long_form`: "sequential" or "chunked"); progress(fraction,
    message) then follows both runs, the first filling [0, 0.5] and the second [0.5, 1].
    """
    runs = {}
    order = (False, True) if baseline_first else (True, False)
    for position, speculative in enumerate(order):
        run_name = "speculative" if speculative else "target alone"
        if not longform.is_long(waveform):
            runs[speculative] = whisper.transcribe_waveform(waveform, options, speculative, name=name)
            continue
        report = _part_of(progress, position / 2, 1 / 2, run_name)
        runs[speculative] = whisper.transcribe_long(
            waveform, options, speculative, name, long_form, progress=report
        )
    return Comparison(runs[False], runs[True], options, baseline_first)


def _part_of(progress: Progress | None, start: float, share: float, label: str) -> Progress | None:
    """A progress callback for one part of the work, reporting into its share of the whole."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + share * fraction, f"{label}: {message}")


def verdict(comparison: Comparison) -> tuple[str, bool]:
    """A one-line verdict on the outputs and whether it is good news."""
    if comparison.identical:
        return "Identical: the speculative output is token for token the target's own output.", True
    if comparison.options.sampling:
        return (
            "Sampling (temperature > 0): the two runs draw different samples from the same distribution; "
            "only greedy decoding (temperature 0) is expected to match token for token.",
            True,
        )
    return (
        "DIFFERENT: the speculative output does not match the target alone. This is a bug; please report it.",
        False,
    )


def metrics_rows(comparison: Comparison) -> list[list[str]]:
    """[metric, target alone, speculative] rows for a table."""
    baseline, speculative = comparison.baseline.result, comparison.speculative.result
    passes_saved = baseline.num_target_passes - speculative.num_target_passes
    rate = speculative.acceptance_rate
    # chunked long-form decodes its chunks as a batch: each chunk's passes count, a shared pass once per chunk
    chunked = any(window.chunk is not None for window in speculative.windows)
    passes = "target passes (each chunk's, summed)" if chunked else "target passes"
    return [
        ["encode time (s)", f"{baseline.encoder_seconds:.3f}", f"{speculative.encoder_seconds:.3f}"],
        ["decode time (s)", f"{baseline.decode_seconds:.3f}", f"{speculative.decode_seconds:.3f}"],
        ["total time (s)", f"{baseline.total_seconds:.3f}", f"{speculative.total_seconds:.3f}"],
        ["tokens generated", str(baseline.num_generated), str(speculative.num_generated)],
        ["tokens / s (decode)", f"{baseline.tokens_per_second:.1f}", f"{speculative.tokens_per_second:.1f}"],
        [
            "speedup, decode (total)",
            "1.00x",
            f"{comparison.decode_speedup:.2f}x ({comparison.total_speedup:.2f}x)",
        ],
        [
            "acceptance rate",
            "–",
            "–" if rate is None else f"{rate:.0%} ({speculative.num_accepted}/{speculative.num_drafted})",
        ],
        ["tokens per target pass", f"{baseline.tokens_per_pass:.2f}", f"{speculative.tokens_per_pass:.2f}"],
        [passes, str(baseline.num_target_passes), str(speculative.num_target_passes)],
        [
            "target passes saved",
            "–",
            f"{passes_saved} ({_ratio(passes_saved, baseline.num_target_passes):.0%})",
        ],
        [
            "ran first",
            "yes" if comparison.baseline_first else "no",
            "no" if comparison.baseline_first else "yes",
        ],
    ]


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0
