"""`python -m benchmarks real`: the bundled real pair (whisper-base <- whisper-tiny.en) on real clips.

Per clip: the transcript, its WER against `CLIP.txt`, acceptance, target passes, and decode and end-to-end
times of our target alone, ours speculative (adaptive) and generate(), in rotated rounds. Every output is
checked against generate()'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from benchmarks import harness
from benchmarks.harness import ASSETS, Record, median
from benchmarks.runners import generate_waveform
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.wer import word_errors

DECODERS = ("target alone", "speculative", "generate()")


@dataclass(frozen=True)
class RealBenchOptions:
    audio: tuple[str, ...] = ()  # more clips besides assets/
    repeats: int = 3  # decodes of each clip by each decoder
    num_draft_tokens: int = 5  # k at the start (adaptive)


def clip_language(path: Path) -> str | None:
    """'de' for de-bahnhof.wav; None (detected) when the name does not start with a language code."""
    code = path.stem.split("-")[0]
    return code if code in LANGUAGES else None


def measure_clip(whisper: SpeculativeWhisper, path: Path, options: RealBenchOptions) -> dict:
    """One clip: every decoder `repeats` times, rotated; the figures and the checks."""
    waveform, language = load_audio(path, max_seconds=None), clip_language(path)
    decode = DecodeOptions(language=language, adaptive=True, num_draft_tokens=options.num_draft_tokens)

    def run(decoder: str, _: object) -> dict:
        if decoder == "generate()":
            tokens, seconds = generate_waveform(whisper, waveform, language)
            return {"end_to_end": seconds, "tokens": list(tokens)}
        run_options = TranscribeOptions.of(decode, speculative=decoder == "speculative")
        (found,), seconds = harness.timed(lambda: whisper.transcribe_waveforms([waveform], run_options))
        return {"end_to_end": seconds, "decode": found.result.decode_seconds, "transcription": found}

    runs = {
        decoder: found
        for (decoder, _), found in harness.rounds(DECODERS, run, options.repeats, log=lambda _: None).items()
    }
    overhead = median(r["end_to_end"] - r["decode"] for r in runs["target alone"])  # features and encoder
    for found in runs["generate()"]:
        found["decode"] = found["end_to_end"] - overhead
    alone, speculative = (runs[d][-1]["transcription"] for d in DECODERS[:2])
    reference = path.with_suffix(".txt")
    errors = word_errors(reference.read_text(encoding="utf-8"), alone.text, alone.result.language) if (
        reference.exists()) else None  # fmt: skip
    times = ("end_to_end", "decode")
    return {
        "clip": path.name,
        "seconds": round(len(waveform) / SAMPLE_RATE, 2),
        "language": alone.result.language,
        "text": alone.text,
        "wer": errors.wer if errors else None,
        "identical": list(speculative.token_ids) == list(alone.token_ids) == runs["generate()"][-1]["tokens"],
        "tokens": alone.result.num_generated,
        "acceptance_rate": speculative.result.acceptance_rate,
        "tokens_per_pass": speculative.result.tokens_per_pass,
        "target_passes": {"alone": alone.result.num_target_passes,
                          "speculative": speculative.result.num_target_passes},
        "draft_fits": whisper.pair.draft_fits(alone.result.language, "transcribe"),
        "seconds_median": {d: {t: median(r[t] for r in runs[d]) for t in times} for d in DECODERS},
        "seconds_all": {d: {t: [r[t] for r in runs[d]] for t in times} for d in DECODERS},
    }  # fmt: skip


def _ms(label: str, kind: str) -> harness.Column:
    """Milliseconds of each decoder, median over rounds."""
    return f"{label} ms: alone / spec / generate()", lambda row: " / ".join(
        f"{1000 * row['seconds_median'][d][kind]:.0f}" for d in DECODERS), ""  # fmt: skip


def _passes(row: dict) -> str:
    alone, speculative = row["target_passes"].values()
    return f"{alone} → {speculative} ({1 - speculative / alone:.0%} saved)"


def _speedups(row: dict) -> str:
    alone, spec, _ = (row["seconds_median"][d] for d in DECODERS)
    return f"{alone['decode'] / spec['decode']:.2f}x ({alone['end_to_end'] / spec['end_to_end']:.2f}x)"


def _vs_generate(row: dict) -> str:
    _, spec, generate = (row["seconds_median"][d] for d in DECODERS)
    return f"{generate['end_to_end'] / spec['end_to_end']:.2f}x"


COLUMNS = [
    ("clip", "clip", ""),
    ("lang", "language", ""),
    ("WER", "wer", ".1%"),
    ("acceptance", "acceptance_rate", ".2f"),
    ("tokens/pass", "tokens_per_pass", ".2f"),
    ("target passes", _passes, ""),
    _ms("decode", "decode"),
    _ms("end-to-end", "end_to_end"),
    ("spec vs alone, decode (e2e)", _speedups, ""),
    ("spec vs generate(), e2e", _vs_generate, ""),
    ("same", lambda row: "yes" if row["identical"] else "NO", ""),
]  # fmt: skip


def run_and_report(options: RealBenchOptions, out_dir: Path, command: str) -> dict:
    """Run the real-clip benchmark, print the table and the transcripts, write real.json."""
    record = Record(command, options)
    harness.quiet_transformers()
    whisper = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")
    whisper.warm_up()
    rows = []
    for path in [*sorted([*ASSETS.glob("*.wav"), *ASSETS.glob("*.flac")]), *map(Path, options.audio)]:
        rows.append(measure_clip(whisper, path, options))
        print(f"{path.name}: {rows[-1]['text']}")
    print(harness.table(rows, COLUMNS, markdown=True))
    record.verdict([row["clip"] for row in rows if not row["identical"]], "every output equals generate()'s")
    target, draft = whisper.pair.target, whisper.pair.draft
    record.update(
        models={"target": f"{target.name} ({target.source})", "draft": f"{draft.name} ({draft.source})",
                "threads": torch.get_num_threads()},
        rows=rows,
    )  # fmt: skip
    record.write(out_dir / "real.json")
    return record
