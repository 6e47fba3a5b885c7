"""`python -m benchmarks real`: the bundled real pair (whisper-base <- whisper-tiny.en) on real clips.

For each clip of assets/ (and any --audio files): the transcript, its WER against the clip's reference text
(`CLIP.txt` beside it, if any), acceptance, tokens per target pass, target passes saved, and the decode and
end-to-end times of three decoders of the same target: our loop alone, our loop with speculative decoding,
and transformers' `generate()`. The language is the clip name's prefix where it is a language code
(`de-bahnhof.wav`: German), else detected; speculative decoding uses the app's default draft length
(adaptive, from k = 5). Each clip is decoded `repeats` times by each
decoder, in a rotated order, on warm models; times are medians. Every speculative and target-only output
is checked against generate()'s.

End-to-end is audio in memory -> token ids: features, encoder(s), decode. Decode is ours minus the
features and encoders; generate()'s decode is its end-to-end minus our target run's features and encoder
(the same computation, which generate() does not time apart).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from benchmarks.common import report_header, write_json
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.wer import word_errors

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DECODERS = ("target alone", "speculative", "generate()")


@dataclass(frozen=True)
class RealBenchOptions:
    audio: tuple[str, ...] = ()  # more clips besides assets/
    repeats: int = 3  # decodes of each clip by each decoder
    num_draft_tokens: int = 5  # k at the start (adaptive)


@dataclass
class Timing:
    end_to_end: list[float]
    decode: list[float]


def clips(options: RealBenchOptions) -> list[Path]:
    found = sorted([*ASSETS.glob("*.wav"), *ASSETS.glob("*.flac")])
    return [*found, *map(Path, options.audio)]


def clip_language(path: Path) -> str | None:
    """'de' for de-bahnhof.wav; None (detected) when the name does not start with a language code."""
    code = path.stem.split("-")[0]
    return code if code in LANGUAGES else None


def run_generate(
    whisper: SpeculativeWhisper, waveform: np.ndarray, language: str | None
) -> tuple[list[int], float]:
    """generate()'s tokens (after the prompt, without end-of-text) and its end-to-end seconds."""
    target = whisper.pair.target
    start = time.perf_counter()
    features = target.processor.feature_extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    with torch.inference_mode():
        output = target.model.generate(
            features.input_features.to(target.model.dtype), language=language, task="transcribe"
        )
    seconds = time.perf_counter() - start
    tokens = output[0].tolist()
    eos = target.model.generation_config.eos_token_id
    while tokens and tokens[-1] == eos:
        tokens.pop()
    return tokens, seconds


def measure_clip(whisper: SpeculativeWhisper, path: Path, options: RealBenchOptions) -> dict:
    """One clip: every decoder `repeats` times, rotated; the figures and the checks."""
    waveform = load_audio(path, max_seconds=None)
    language = clip_language(path)
    decode_options = DecodeOptions(
        language=language, adaptive=True, num_draft_tokens=options.num_draft_tokens
    )
    timings = {decoder: Timing([], []) for decoder in DECODERS}
    results, generated, overhead = {}, None, []
    for repeat in range(options.repeats):
        shift = repeat % len(DECODERS)
        for decoder in DECODERS[shift:] + DECODERS[:shift]:
            if decoder == "generate()":
                generated, seconds = run_generate(whisper, waveform, language)
                timings[decoder].end_to_end.append(seconds)
                continue
            start = time.perf_counter()
            run = TranscribeOptions.of(decode_options, speculative=decoder == "speculative")
            (transcription,) = whisper.transcribe_waveforms([waveform], run)
            seconds = time.perf_counter() - start
            results[decoder] = transcription
            timings[decoder].end_to_end.append(seconds)
            timings[decoder].decode.append(transcription.result.decode_seconds)
            if decoder == "target alone":
                overhead.append(seconds - transcription.result.decode_seconds)
    timings["generate()"].decode = [s - statistics.median(overhead) for s in timings["generate()"].end_to_end]
    return _row(whisper, path, results, generated, timings)


def _row(whisper, path: Path, results: dict, generated: list[int], timings: dict[str, Timing]) -> dict:
    alone, speculative = results["target alone"].result, results["speculative"].result
    median = {
        decoder: {kind: statistics.median(getattr(timing, kind)) for kind in ("end_to_end", "decode")}
        for decoder, timing in timings.items()
    }
    reference = path.with_suffix(".txt")
    errors = (
        word_errors(reference.read_text(encoding="utf-8"), results["target alone"].text, alone.language)
        if reference.exists()
        else None
    )
    return {
        "clip": path.name,
        "seconds": round(len(load_audio(path, max_seconds=None)) / SAMPLE_RATE, 2),
        "language": alone.language,
        "text": results["target alone"].text,
        "wer": errors.wer if errors else None,
        "identical": list(speculative.token_ids) == list(alone.token_ids) == generated,
        "tokens": alone.num_generated,
        "acceptance_rate": speculative.acceptance_rate,
        "tokens_per_pass": speculative.tokens_per_pass,
        "target_passes": {
            "alone": alone.num_target_passes,
            "speculative": speculative.num_target_passes,
        },
        "draft_fits": whisper.pair.draft_fits(alone.language, "transcribe"),
        "seconds_median": median,
        "seconds_all": {decoder: vars(timing) for decoder, timing in timings.items()},
    }


def table(rows: list[dict]) -> str:
    """A markdown table: one line per clip."""
    lines = [
        "| clip | lang | WER | acceptance | tokens/pass | target passes "
        "| decode ms: alone / spec / generate() | end-to-end ms: alone / spec / generate() "
        "| spec vs alone, decode (e2e) | spec vs generate(), e2e | same |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        m = row["seconds_median"]
        passes = row["target_passes"]
        saved = 1 - passes["speculative"] / passes["alone"]
        acceptance = "–" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.2f}"
        wer = "–" if row["wer"] is None else f"{row['wer']:.1%}"
        decode = " / ".join(f"{1000 * m[d]['decode']:.0f}" for d in DECODERS)
        e2e = " / ".join(f"{1000 * m[d]['end_to_end']:.0f}" for d in DECODERS)
        vs_alone = m["target alone"]["decode"] / m["speculative"]["decode"]
        vs_alone_e2e = m["target alone"]["end_to_end"] / m["speculative"]["end_to_end"]
        vs_generate = m["generate()"]["end_to_end"] / m["speculative"]["end_to_end"]
        lines.append(
            f"| {row['clip']} | {row['language']} | {wer} | {acceptance} | {row['tokens_per_pass']:.2f} "
            f"| {passes['alone']} → {passes['speculative']} ({saved:.0%} saved) | {decode} | {e2e} "
            f"| {vs_alone:.2f}x ({vs_alone_e2e:.2f}x) | {vs_generate:.2f}x "
            f"| {'yes' if row['identical'] else 'NO'} |"
        )
    return "\n".join(lines)


def run_and_report(options: RealBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the real-clip benchmark, print the table and the transcripts, write real.json."""
    started = time.perf_counter()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    whisper = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")
    whisper.warm_up()
    rows = []
    for path in clips(options):
        rows.append(measure_clip(whisper, path, options))
        print(f"{path.name}: {rows[-1]['text']}")
    print(table(rows))
    if not all(row["identical"] for row in rows):
        print("\n!!! SOME OUTPUTS DIFFER FROM generate()")
    report = {
        **report_header(command, options),
        "models": {
            "target": f"{whisper.pair.target.name} ({whisper.pair.target.source})",
            "draft": f"{whisper.pair.draft.name} ({whisper.pair.draft.source})",
            "threads": torch.get_num_threads(),
        },
        "rows": rows,
        "identical": all(row["identical"] for row in rows),
        "wall_seconds": time.perf_counter() - started,
    }
    path = out_dir / "real.json"
    write_json(report, path)
    print(f"wrote {path} ({report['wall_seconds']:.0f} s)")
    return report
