"""Command line: `python -m specdec demo-models OUT_DIR` and `python -m specdec transcribe AUDIO...`.

User errors (unreadable audio, unknown model, bad pair) print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

import numpy as np

from specdec.audio import SAMPLE_RATE, AudioError
from specdec.models import PairError
from specdec.options import TASKS, DecodeOptions
from specdec.transcriber import SpeculativeWhisper, Transcription

EXIT_BAD_INPUT = 1  # some audio could not be transcribed; the rest was
EXIT_BAD_SETUP = 2  # models or options unusable; nothing was transcribed


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.command(args)
    except (PairError, ValueError, OSError) as error:
        print(f"specdec: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_SETUP


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Lossless speculative Whisper")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo-models", help="write small random-weight Whisper checkpoints for offline use"
    )
    demo.add_argument("out_dir", help="folder to write target/, draft-separate/ and draft-shared/ into")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(command=_demo_models)

    transcribe = commands.add_parser("transcribe", help="transcribe audio files with speculative decoding")
    transcribe.add_argument("audio", nargs="+", help="audio files (wav, flac, ogg, mp3; any sample rate)")
    transcribe.add_argument("--target", default="large-v3", help="hub id, short name or local folder")
    transcribe.add_argument("--draft", default="tiny", help="hub id, short name or local folder")
    transcribe.add_argument("--language", default=None, help="e.g. en, de; default: detected by the target")
    transcribe.add_argument("--task", choices=TASKS, default="transcribe")
    transcribe.add_argument("--timestamps", action="store_true", help="predict timestamp tokens")
    transcribe.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    transcribe.add_argument("--top-p", type=float, default=None)
    transcribe.add_argument("--seed", type=int, default=None)
    transcribe.add_argument("--num-draft-tokens", type=int, default=5, help="k per target pass")
    transcribe.add_argument("--adaptive", action="store_true", help="adapt k to the acceptance")
    transcribe.add_argument("--max-new-tokens", type=int, default=None)
    transcribe.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    transcribe.add_argument("--compare", action="store_true", help="also decode with the target alone")
    transcribe.add_argument("--json", action="store_true", help="one JSON object per file per line")
    transcribe.set_defaults(command=_transcribe)
    return parser


def _demo_models(args: argparse.Namespace) -> int:
    from specdec.demo_models import build_demo_models  # heavy; only this command needs it

    for name, path in build_demo_models(args.out_dir, seed=args.seed).items():
        print(f"{name}: {path}")
    return 0


def _transcribe(args: argparse.Namespace) -> int:
    options = DecodeOptions(
        language=args.language,
        task=args.task,
        timestamps=args.timestamps,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        num_draft_tokens=args.num_draft_tokens,
        adaptive=args.adaptive,
        max_new_tokens=args.max_new_tokens,
    )
    whisper = SpeculativeWhisper(draft_model=args.draft, final_model=args.target, device=args.device)
    if args.compare:
        warm_up(whisper)
    exit_code = 0
    for path in args.audio:
        try:
            speculative = whisper.transcribe_one(path, options)
            baseline = whisper.transcribe_one(path, options, speculative=False) if args.compare else None
        except AudioError as error:
            print(f"specdec: error: {_one_line(error)}", file=sys.stderr)
            exit_code = EXIT_BAD_INPUT
            continue
        print(
            json.dumps(json_record(speculative, baseline))
            if args.json
            else text_report(speculative, baseline)
        )
        sys.stdout.flush()
    return exit_code


def warm_up(whisper: SpeculativeWhisper) -> None:
    """Run both paths once on a second of silence, so that neither timed run pays first-call costs."""
    silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
    options = DecodeOptions(language="en", max_new_tokens=4)
    for speculative in (True, False):
        whisper.transcribe_waveform(silence, options, speculative=speculative)


def json_record(speculative: Transcription, baseline: Transcription | None) -> dict:
    """The CLI's JSON contract for one file."""
    record = {
        "audio": speculative.audio,
        "speculative": {
            "text": speculative.text,
            "token_ids": list(speculative.token_ids),
            "seconds": speculative.result.total_seconds,
            "acceptance_rate": speculative.result.acceptance_rate,
            "stats": speculative.result.stats(),
            "steps": [dataclasses.asdict(step) for step in speculative.result.steps],
        },
    }
    if baseline is not None:
        record["baseline"] = {
            "text": baseline.text,
            "token_ids": list(baseline.token_ids),
            "seconds": baseline.result.total_seconds,
        }
        record["identical"] = baseline.token_ids == speculative.token_ids
    return record


def text_report(speculative: Transcription, baseline: Transcription | None) -> str:
    """Human-readable lines for one file."""
    result = speculative.result
    rate = f"{result.acceptance_rate:.0%}" if result.acceptance_rate is not None else "n/a"
    lines = [
        f"{speculative.audio} [{result.language}]: {speculative.text}",
        f"  speculative: {result.total_seconds:.2f} s, acceptance {rate}, "
        f"{result.tokens_per_pass:.2f} tokens per target pass, {result.num_target_passes} target passes",
    ]
    if baseline is not None:
        identical = "identical" if baseline.token_ids == speculative.token_ids else "DIFFERENT"
        speedup = baseline.result.total_seconds / max(result.total_seconds, 1e-9)
        lines.append(
            f"  baseline:    {baseline.result.total_seconds:.2f} s, "
            f"{baseline.result.num_target_passes} target passes; speedup {speedup:.2f}x; output {identical}"
        )
    return "\n".join(lines)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())
