"""What the Compare view shows for a comparison: the badge, the coloured tokens, the metrics table, the
plots, the WER, and the JSON details (plain data and HTML; app.py puts them on the page)."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass

import plotly.graph_objects as go

from specdec import wer
from specdec.api import SpeculativeWhisper, Transcription
from specdec.app import highlight, plots, why_slower
from specdec.app.store import draft_note
from specdec.options import DecodeOptions
from specdec.trace import DRAFT_ENCODER, DecodeResult, speedup_bound
from specdec.whisper.tokens import timestamp_begin

NO_SPEECH = "No speech detected"  # in place of the transcript when every window was judged silence


@dataclass(frozen=True)
class Comparison:
    """One clip decoded by the target alone and with speculative decoding, same options, same device."""

    baseline: Transcription
    speculative: Transcription
    options: DecodeOptions
    baseline_first: bool  # the target alone ran first
    speech_only: bool = False  # long silences skipped: both runs decoded the same speech pieces only

    @property
    def identical(self) -> bool:
        return self.baseline.token_ids == self.speculative.token_ids

    @property
    def decode_speedup(self) -> float:
        """Decode-phase speedup (encoder excluded): target-alone decode time / speculative decode time."""
        return ratio(self.baseline.result.decode_seconds, self.speculative.result.decode_seconds)

    @property
    def total_speedup(self) -> float:
        return ratio(self.baseline.result.total_seconds, self.speculative.result.total_seconds)

    @property
    def lossy_cost(self) -> wer.LossyCost | None:
        """With a lossy acceptance threshold, how far the speculative output is from the target alone's;
        None for an exact decoding."""
        if self.speculative.result.lossless:
            return None
        baseline, speculative = self.baseline, self.speculative
        return wer.lossy_cost(
            list(baseline.token_ids), baseline.text, list(speculative.token_ids), speculative.text,
            "en" if self.options.task == "translate" else baseline.language,
        )  # fmt: skip

    @property
    def total_speedup_bound(self) -> float | None:
        """The end-to-end speedup a decode taking no time would give (`trace.speedup_bound`)."""
        return speedup_bound(self.baseline.result, self.speculative.result)


@dataclass(frozen=True)
class CompareView:
    """Everything the Compare view shows for one clip."""

    baseline_text: str
    speculative_text: str
    verdict_html: str
    tokens_html: str
    metrics: list[list[str]]
    timeline: go.Figure
    steps: go.Figure
    breakdown: go.Figure
    windows: go.Figure  # the file's timeline: one bar per decoded window (or chunk)
    wer_html: str
    comparison: Comparison
    spans: list[highlight.TokenSpan]
    note: str = ""  # about the draft, e.g. an English-only draft on other speech


def token_spans(whisper: SpeculativeWhisper, result) -> list[highlight.TokenSpan]:
    target = whisper.pair.target
    begin = timestamp_begin(target.model.generation_config)
    return highlight.token_spans(result, target.processor.tokenizer, begin)


def build_view(
    whisper: SpeculativeWhisper,
    comparison: Comparison,
    reference: str,
    audio_seconds: float | None = None,
) -> CompareView:
    """The Compare view's outputs from a finished comparison (of audio_seconds of audio)."""
    spans = token_spans(whisper, comparison.speculative.result)
    baseline, speculative = comparison.baseline.result, comparison.speculative.result
    note = draft_note(whisper, speculative.language, comparison.options.task)
    return CompareView(
        baseline_text=shown_text(comparison.baseline),
        speculative_text=shown_text(comparison.speculative),
        verdict_html=verdict_html(comparison, note),
        tokens_html=highlight.spans_html(spans),
        metrics=metrics_rows(comparison),
        timeline=plots.timeline_figure(baseline, speculative),
        steps=plots.steps_figure(speculative),
        breakdown=plots.breakdown_figure(baseline, speculative),
        windows=plots.windows_figure(
            speculative, audio_seconds, timestamp_begin(whisper.pair.target.model.generation_config)
        ),
        wer_html=wer_html(reference, comparison),
        comparison=comparison,
        spans=spans,
        note=note,
    )


def shown_text(transcription: Transcription) -> str:
    """The transcript as shown: NO_SPEECH where Whisper's no-speech rule left it empty (not a blank box,
    nor the " you" a model makes up for silence without the rule)."""
    return NO_SPEECH if transcription.result.no_speech else transcription.text


def verdict_html(comparison: Comparison, note: str = "") -> str:
    """A green badge for identical outputs (or expected sampling differences), a loud red one otherwise;
    note: a line about the draft (e.g. an English-only draft on other speech)."""
    message, good = verdict(comparison)
    icon, colour, border = ("✅", "#166534", "#22c55e") if good else ("🚨", "#991b1b", "#ef4444")
    if good and not comparison.identical:
        icon, colour, border = ("🎲", "#854d0e", "#eab308")
    if comparison.lossy_cost is not None:  # asked for: not the target's output, whatever it cost here
        icon, colour, border = ("⚠️", "#9a3412", "#f97316")
    speed = (
        f"end to end {comparison.total_speedup:.2f}x · decode {comparison.decode_speedup:.2f}x · acceptance "
        + (
            "–"
            if comparison.speculative.result.acceptance_rate is None
            else f"{comparison.speculative.result.acceptance_rate:.0%}"
        )
    )
    note = f'<br><small class="specdec-note">ℹ️ {html.escape(note)}</small>' if note else ""
    bound = bound_line(comparison)
    bound = f'<br><small class="specdec-bound">{html.escape(bound)}</small>' if bound else ""
    slower = slower_line(comparison)
    slower = f'<br><small class="specdec-slower">🐢 {html.escape(slower)}</small>' if slower else ""
    return (
        f'<div class="specdec-verdict" style="border:2px solid {border};color:{colour};border-radius:8px;'
        f'padding:8px 12px;font-weight:600">{icon} {message}<br><small>{speed}</small>{slower}{bound}{note}'
        "</div>"
    )


def slower_line(comparison: Comparison) -> str:
    """Where speculation lost end to end, one line saying so and why (`why_slower`); else ''."""
    return why_slower.slower_line(comparison.baseline.result, comparison.speculative.result)


def bound_line(comparison: Comparison) -> str:
    """Why the end-to-end ratio stays below the decode's: what the speculative run spent outside its
    decoding (its encoders, a draft's own included, and any word alignment) bounds it."""
    bound = comparison.total_speedup_bound
    if bound is None:
        return ""
    speculative, baseline = comparison.speculative.result, comparison.baseline.result
    own_encoder = any(encoding.model == DRAFT_ENCODER for encoding in speculative.encodings)
    encoders = "target's and draft's encoders" if own_encoder else "encoder"
    aligned = " and word alignment" if speculative.alignment_seconds else ""
    return (
        f"End to end at most {bound:.2f}x, even with a decode taking no time: the speculative run's "
        f"{encoders}{aligned} took {speculative.encoder_and_alignment_seconds:.2f} s; the target alone "
        f"took {baseline.total_seconds:.2f} s in all."
    )


def wer_html(reference: str, comparison: Comparison) -> str:
    """WER of both transcripts against the reference, with each word alignment; empty without a reference."""
    if not reference or not reference.strip():
        return "<i>Give a reference text to see the word error rate of both transcripts.</i>"
    translated = comparison.options.task == "translate"
    language = "en" if translated else comparison.speculative.result.language
    rows = []
    for name, transcription in (
        ("target alone", comparison.baseline),
        ("speculative", comparison.speculative),
    ):
        try:
            errors = wer.word_errors(reference, transcription.text, language)
        except ValueError as error:
            return f"<i>{error}</i>"
        counts = f"{errors.substitutions} sub · {errors.deletions} del · {errors.insertions} ins"
        rows.append(
            f"<p><b>{name}</b>: WER {errors.wer:.1%} ({counts}, {errors.num_reference_words} reference words)"
            f'<br><span class="specdec-alignment">{wer.alignment_html(errors)}</span></p>'
        )
    return "".join(rows)


def verdict(comparison: Comparison) -> tuple[str, bool]:
    """A one-line verdict on the outputs and whether it is good news."""
    cost = comparison.lossy_cost
    if cost is not None:
        return lossy_verdict(comparison, cost), True
    if comparison.identical and comparison.speculative.result.no_speech:
        options = comparison.options
        rule = ""
        if options.no_speech_threshold is not None:
            rule = (
                f": every window's no-speech probability above {options.no_speech_threshold:g} and "
                f"its average log-probability below {options.logprob_threshold:g}"
            )
        return (
            f"Identical: no speech detected in either run (Whisper's no-speech rule, as generate(){rule}).",
            True,
        )
    if comparison.identical and comparison.speech_only:
        return (
            "Identical: the speculative output is token for token the target's own on the same speech "
            "(long silences skipped in both runs, so not generate()'s output on the whole file).",
            True,
        )
    if comparison.identical:
        return "Identical: the speculative output is token for token the target's own output.", True
    if comparison.baseline.result.sampled or comparison.speculative.result.sampled:
        return (
            "Sampling (temperature > 0, asked for or the fallback's): the two runs draw different samples "
            "from the same distribution; only greedy decoding (temperature 0) is expected to match token for "
            "token.",
            True,
        )
    return (
        "DIFFERENT: the speculative output does not match the target alone. This is a bug; please report it.",
        False,
    )


def lossy_verdict(comparison: Comparison, cost: wer.LossyCost) -> str:
    """What a lossy decoding is, what it cost against the target alone, and what it saved."""
    baseline, speculative = comparison.baseline.result, comparison.speculative.result
    saved = baseline.num_target_passes - speculative.num_target_passes
    return (
        f"LOSSY (acceptance threshold {speculative.acceptance_threshold:g}, as asked): not the target's own "
        f"output. Cost: {cost.describe()}, {speculative.num_relaxed} tokens kept that the target would not "
        f"have chosen. Saved: {saved} of {baseline.num_target_passes} target passes."
    )


def lossy_notice(result: DecodeResult) -> str:
    """A lossy transcription's warning, above its tokens (the Transcribe view has no badge)."""
    return (
        '<div class="specdec-lossy" style="border:2px solid #f97316;color:#9a3412;border-radius:8px;'
        f'padding:6px 10px;font-weight:600">⚠️ LOSSY (acceptance threshold {result.acceptance_threshold:g}, '
        f"as asked): not the target's own output; {result.num_relaxed} tokens kept that the target would not "
        "have chosen (marked relaxed). Compare shows what it cost.</div>"
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
        ["speedup, end to end (encoders + decode)", "1.00x", f"{comparison.total_speedup:.2f}x"],
        ["speedup, decode only", "1.00x", f"{comparison.decode_speedup:.2f}x"],
        [
            "speedup, end to end, if decoding took no time (the bound)",
            "–",
            _speedup_text(comparison.total_speedup_bound),
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
            f"{passes_saved} ({ratio(passes_saved, baseline.num_target_passes):.0%})",
        ],
        [
            "ran first",
            "yes" if comparison.baseline_first else "no",
            "no" if comparison.baseline_first else "yes",
        ],
        *lossy_rows(comparison),
    ]


def lossy_rows(comparison: Comparison) -> list[list[str]]:
    """With a lossy acceptance threshold, what it cost: tokens the target would not have chosen, token edits
    and WER against the target alone."""
    cost = comparison.lossy_cost
    if cost is None:
        return []
    wer_text = "–" if cost.wer is None else f"{cost.wer:.1%}"
    return [
        [
            "LOSSY: tokens kept the target would not have chosen",
            "0",
            str(comparison.speculative.result.num_relaxed),
        ],
        ["LOSSY: token edits from the target alone's output", "0", str(cost.token_edits)],
        ["LOSSY: WER against the target alone's words", "0%", wer_text],
    ]


def windows(result: DecodeResult) -> list[dict]:
    """The seek table for API clients: each window's start in the file, length and chunk."""
    return [dataclasses.asdict(window) for window in result.windows]


def details(view: CompareView) -> dict:
    """Both runs' statistics and the labelled tokens, for the JSON panel and API clients."""
    comparison = view.comparison
    return {
        "identical": comparison.identical,
        "language": comparison.speculative.result.language,
        "note": view.note,
        "baseline_first": comparison.baseline_first,
        "speech_only": comparison.speech_only,
        "no_speech": comparison.speculative.result.no_speech,
        "decode_speedup": comparison.decode_speedup,
        "baseline": comparison.baseline.result.stats(),
        "speculative": comparison.speculative.result.stats(),
        "windows": windows(comparison.speculative.result),
        "tokens": highlight.highlighted_pairs(view.spans),
    }


def _speedup_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0
