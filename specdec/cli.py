"""Command line: `python -m specdec transcribe AUDIO...`, `python -m specdec stream AUDIO` (a file played as a
live stream), `python -m specdec corpus INPUT --out DIR` (many files on Ray, resumable),
`python -m specdec import-ct2 SRC OUT` (a faster-whisper folder as a transformers one),
`python -m specdec distill TARGET AUDIO_DIR OUT` (a draft that shares the target's encoder, from any audio),
and `python -m specdec demo-models OUT_DIR`. (The benchmarks run from a checkout: `python -m benchmarks`.)

User errors (unreadable audio, unknown model, bad pair) print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# Only what the parser needs is imported here, so that `--help` answers at once; each command imports
# torch, transformers, Ray and the models when it runs.
from specdec.corpus.command import add_corpus_parser, run_corpus_command
from specdec.distill.command import add_distill_parser, run_distill_command
from specdec.options import COMPUTE_TYPES, DEFAULT_COMPUTE_TYPE, TranscribeOptions
from specdec.request import (
    add_model_arguments,
    add_option_arguments,
    command_line_fields,
    options_from_arguments,
)
from specdec.subtitles import FORMATS
from specdec.trace import DecodeResult, Step, speedup_bound

if TYPE_CHECKING:
    from specdec.api import SpeculativeWhisper, Transcription
    from specdec.streaming.playback import StreamSummary
    from specdec.streaming.session import StreamOptions, Update
    from specdec.wer import LossyCost

EXIT_BAD_INPUT = 1  # some audio could not be transcribed; the rest was
EXIT_BAD_SETUP = 2  # models or options unusable; nothing was transcribed


def __getattr__(name: str) -> type:
    """`SpeculativeWhisper`, imported on first use (PEP 562) and read by the commands from here, so that a
    caller (a test) can hand them a pair already loaded."""
    if name == "SpeculativeWhisper":
        from specdec.api import SpeculativeWhisper

        return SpeculativeWhisper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None, prog: str = "specdec") -> int:
    """Run one command (`argv`: the arguments after the program name); its exit status. `prog` names the
    program in usage and argparse's errors (`python -m specdec` when run as a module)."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    try:
        return args.command(args)
    except (ValueError, OSError) as error:  # a model pair that does not fit (PairError) is a ValueError
        print(f"specdec: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_SETUP


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Lossless speculative Whisper")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo-models", help="write small random-weight Whisper checkpoints for offline use"
    )
    demo.add_argument("out_dir", help="folder to write target/, draft-separate/ and draft-shared/ into")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(command=_demo_models)

    convert = commands.add_parser(
        "import-ct2", help="convert a CTranslate2 (faster-whisper) Whisper folder into a transformers folder"
    )
    convert.add_argument("src", help="folder with model.bin, config.json and tokenizer.json")
    convert.add_argument("out", help="folder to write (loadable with from_pretrained)")
    convert.set_defaults(command=_import_ct2)

    transcribe = commands.add_parser("transcribe", help="transcribe audio files with speculative decoding")
    transcribe.add_argument(
        "audio", nargs="+", help="audio or video files (wav, flac, mp3, m4a, webm, mp4, ...; any sample rate)"
    )
    add_model_arguments(transcribe)
    add_option_arguments(transcribe, command_line_fields(TranscribeOptions))
    transcribe.add_argument(
        "--word-subtitles",
        action="store_true",
        help="SRT and WebVTT files with a cue per word (needs --word-timestamps)",
    )
    _device_argument(transcribe)
    transcribe.add_argument("--compare", action="store_true", help="also decode with the target alone")
    transcribe.add_argument("--json", action="store_true", help="one JSON object per file per line")
    transcribe.add_argument(
        "--output-format",
        choices=(*FORMATS, "all"),
        default=None,
        help="also write each file's transcript as AUDIO_NAME.txt/.srt/.vtt/.json (srt, vtt, all: with "
        "--timestamps; json: text, segments and the full trace)",
    )
    transcribe.add_argument(
        "--output-dir", default=None, help="folder for --output-format files (default: the current folder)"
    )
    transcribe.set_defaults(command=_transcribe)

    stream = commands.add_parser("stream", help="play an audio file as a live stream and transcribe it live")
    stream.add_argument(
        "audio", help="audio or video file (wav, flac, mp3, m4a, webm, mp4, ...; any sample rate, any length)"
    )
    stream.add_argument("--chunk", type=float, default=1.0, help="seconds of audio per update (default 1.0)")
    stream.add_argument("--realtime", action="store_true", help="feed chunks at the pace of the audio")
    stream.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="decoding's share of real time to stay under: after an update that took L s, the next waits for "
        "L / MAX_LOAD s of speech; 0 decodes every chunk (default: StreamOptions.max_load, 0.5)",
    )
    add_model_arguments(stream)
    stream.add_argument("--language", default=None, help="e.g. en, de; default: detected by the target")
    stream.add_argument(
        "--no-reuse", action="store_true", help="draft with the draft model only, not the last hypothesis"
    )
    _device_argument(stream)
    stream.set_defaults(command=_stream)

    add_corpus_parser(commands).set_defaults(command=_corpus)
    add_distill_parser(commands).set_defaults(command=run_distill_command)

    return parser


def _device_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--device", type=device_name, default="auto", help="auto (default), cpu, cuda or cuda:N (as the app)"
    )
    command.add_argument(
        "--compute-type",
        choices=COMPUTE_TYPES,
        default=DEFAULT_COMPUTE_TYPE,
        help="what the target's encoder computes in on a CPU, as faster-whisper names it (default: as "
        "loaded, float32; auto: bfloat16 where the CPU runs it natively); speculation gives the target "
        "alone's output in each",
    )
    command.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on CUDA, replay each decoder step as a captured CUDA graph (the same output; default: on)",
    )


def device_name(name: str) -> str:
    """--device's value, checked for its form only (whether the machine has it: `models.pick_device`)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise argparse.ArgumentTypeError(f"device must be auto, cpu, cuda or cuda:N, not {name!r}")
    return name


def _load_pair(args: argparse.Namespace) -> SpeculativeWhisper:
    """The draft and target models a command asks for (torch and transformers load here), on a device
    this machine has (checked before anything loads)."""
    from specdec.whisper.models import pick_device

    pick_device(args.device)
    pair = sys.modules[__name__].SpeculativeWhisper  # this module's attribute: see __getattr__
    graphs = getattr(args, "cuda_graphs", True)
    compute_type = getattr(args, "compute_type", DEFAULT_COMPUTE_TYPE)
    return pair(draft_model=args.draft, final_model=args.target, device=args.device, cuda_graphs=graphs,
                compute_type=compute_type)  # fmt: skip


def _import_ct2(args: argparse.Namespace) -> int:
    from specdec.whisper.ct2 import import_ct2

    print(import_ct2(args.src, args.out))
    return 0


def _demo_models(args: argparse.Namespace) -> int:
    from specdec.whisper.demo import build_demo_models

    for name, path in build_demo_models(args.out_dir, seed=args.seed).items():
        print(f"{name}: {path}")
    return 0


def _corpus(args: argparse.Namespace) -> int:
    """Many files on Ray Data (`specdec.corpus`): rows and summary in --out, the summary printed."""
    summary = run_corpus_command(args)  # None: Ray stopped the run (resumable)
    return EXIT_BAD_INPUT if summary is None or summary.failures else 0


def _stream(args: argparse.Namespace) -> int:
    """Play a file as a live stream: committed text as it grows, then the final text and the figures."""
    from specdec.audio import AudioError, load_audio
    from specdec.streaming.playback import stream_audio, summarise
    from specdec.streaming.session import StreamOptions

    if args.chunk <= 0:
        raise ValueError(f"--chunk must be positive, not {args.chunk:g}")
    if args.max_load is not None and args.max_load < 0:
        raise ValueError(f"--max-load must be 0 or more, not {args.max_load:g}")
    pace = {} if args.max_load is None else {"max_load": args.max_load or None}
    options = StreamOptions(
        chunk_seconds=args.chunk, language=args.language, reuse_hypothesis=not args.no_reuse, **pace
    )
    try:  # before the models load, so that a bad file fails at once
        waveform = load_audio(args.audio, max_seconds=None)
    except AudioError as error:
        print(f"specdec: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    whisper = _load_pair(args)
    whisper.warm_up()  # as a live app would before opening the microphone: no first-call costs in latency
    live = sys.stdout.isatty()
    updates: list[Update] = []
    for update in stream_audio(whisper, waveform, options, realtime=args.realtime):
        previous = updates[-1].committed_text if updates else ""
        updates.append(update)
        if live:
            sys.stdout.write("\r\033[K" + live_line(update, shutil.get_terminal_size().columns))
        elif update.committed_text != previous:  # in a log: each newly committed piece on its own line
            piece = update.committed_text.removeprefix(previous).strip()
            sys.stdout.write(f"{update.stream_seconds:7.1f} s  {piece}\n")
        sys.stdout.flush()
    if live:
        sys.stdout.write("\r\033[K")
    final = updates[-1]
    print(f"{args.audio} [{final.language}]: {final.committed_text}")
    print(stream_report(summarise(updates), options))
    return 0


def live_line(update: Update, width: int) -> str:
    """One terminal line: stream time, then the end of the committed text and the tentative text (dim)."""
    prefix = f"{update.stream_seconds:6.1f} s  "
    committed, tentative = update.committed_text, update.tentative_text
    tentative = f" {tentative}" if committed and tentative else tentative
    room = max(width - len(prefix) - 1, 10)
    # the end of the committed text, then the start of the tentative text (at most half the line)
    tentative = tentative[: max(room // 2, room - len(committed))]
    keep = room - len(tentative)
    committed = committed[-keep:] if keep > 0 else ""
    return f"{prefix}{committed}\033[2m{tentative}\033[0m"


def stream_report(summary: StreamSummary, options: StreamOptions) -> str:
    """The figures of a stream, a few readable lines."""
    reuse = "on" if options.reuse_hypothesis else "off"
    acceptance = ", ".join(
        f"{source} {summary.acceptance.get(source, 0.0):.0%} "
        f"({counts['accepted']}/{counts['drafted']} tokens, {counts['steps']} passes)"
        for source, counts in summary.proposals.items()
    )
    return "\n".join(
        [
            f"  {summary.decoded_updates} decoded updates of {summary.updates}, "
            f"{summary.audio_seconds:.1f} s of audio in {options.chunk_seconds:g} s chunks, "
            f"hypothesis reuse {reuse}, {summary.held_back_updates} held back for the pace "
            f"({options.pace})",
            f"  target passes per decoded update: {summary.passes_per_update:.1f}",
            f"  update latency: median {summary.median_latency_seconds:.2f} s, "
            f"p95 {summary.p95_latency_seconds:.2f} s",
            f"  committed text behind the speaker: median {summary.median_commit_lag_seconds:.1f} s, "
            f"p95 {summary.p95_commit_lag_seconds:.1f} s ({summary.committed_words} words)",
            f"  real-time factor: {summary.real_time_factor:.2f} "
            f"({summary.processing_seconds:.1f} s processing / {summary.audio_seconds:.1f} s audio)",
            f"  acceptance by source: {acceptance or 'nothing drafted'}",
        ]
    )


def _transcribe(args: argparse.Namespace) -> int:
    from specdec.audio import AudioError

    options = transcribe_options(args)
    formats = output_formats(args)  # before the models load, so that a bad choice fails at once
    whisper = _load_pair(args)
    if args.compare:
        whisper.warm_up()
    exit_code = 0
    for start in range(0, len(args.audio), args.batch_size):
        paths = args.audio[start : start + args.batch_size]
        batch = whisper.transcribe(
            paths, options, return_stats=True, errors="return", progress=ProgressBar("speculative")
        )
        baselines = [None] * len(paths)
        if args.compare:
            bar = ProgressBar("target alone")
            baselines = whisper.transcribe(
                paths, options, return_stats=True, errors="return", speculative=False, progress=bar
            )
        for speculative, baseline in zip(batch, baselines, strict=True):
            if isinstance(speculative, AudioError):  # one line per unreadable file; the others go on
                print(f"specdec: error: {_one_line(speculative)}", file=sys.stderr)
                exit_code = EXIT_BAD_INPUT
                continue
            print(
                json.dumps(json_record(speculative, baseline))
                if args.json
                else text_report(speculative, baseline)
            )
            sys.stdout.flush()
            if formats:  # each file said, on stderr: stdout keeps the transcript (and --json) alone
                for path in speculative.save(args.output_dir or ".", formats, by_word=args.word_subtitles):
                    print(f"specdec: wrote {Path(path).resolve()}", file=sys.stderr)
    return exit_code


def transcribe_options(args: argparse.Namespace) -> TranscribeOptions:
    """The options the parsed `transcribe` arguments give (read as `corpus` reads its own)."""
    return options_from_arguments(args, command_line_fields(TranscribeOptions))


def output_formats(args: argparse.Namespace) -> tuple[str, ...]:
    """The file formats to write (none without --output-format or --output-dir; "all" by default with
    --output-dir), refused when they need timestamps or two inputs would write the same file; the
    folder is made now, so that an unwritable one fails before any decoding."""
    if args.word_subtitles and not args.word_timestamps:
        raise ValueError("--word-subtitles needs --word-timestamps (a cue per word needs word times)")
    if args.output_format is None and args.output_dir is None:
        if args.word_subtitles:
            raise ValueError("--word-subtitles writes subtitle files: add --output-format srt or vtt")
        return ()
    chosen = args.output_format or "all"
    formats = FORMATS if chosen == "all" else (chosen,)
    timed = [name for name in formats if name in ("srt", "vtt")]
    if timed and not args.timestamps and not args.word_subtitles:
        implied = "" if args.output_format else " (the default with --output-dir)"
        raise ValueError(f"--output-format {chosen}{implied} needs --timestamps (subtitles need times)")
    seen: set[str] = set()
    for path in args.audio:
        stem = Path(path).stem
        if stem in seen:
            raise ValueError(f"two inputs would both write {stem}.{formats[0]}; transcribe them apart")
        seen.add(stem)
    Path(args.output_dir or ".").mkdir(parents=True, exist_ok=True)
    return formats


class ProgressBar:
    """A tqdm bar on stderr for each long file (none when stderr is not a terminal)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None

    def __call__(self, fraction: float, message: str) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(
                total=1000, desc=self.label, disable=None, leave=False, bar_format="{l_bar}{bar}| {postfix}"
            )
        self.bar.n = round(fraction * 1000)
        self.bar.set_postfix_str(message)
        if fraction >= 1.0:
            self.bar.close()
            self.bar = None


def json_record(speculative: Transcription, baseline: Transcription | None) -> dict:
    """The CLI's JSON contract for one file."""
    record = {
        "audio": speculative.audio,
        "speculative": {
            "text": speculative.text,
            "no_speech": speculative.result.no_speech,
            "token_ids": list(speculative.token_ids),
            "seconds": speculative.result.total_seconds,
            "acceptance_rate": speculative.result.acceptance_rate,
            "lossless": speculative.result.lossless,  # False: a lossy acceptance threshold, not the target's
            "words": None if speculative.words is None else [vars(word) for word in speculative.words],
            "windows": [dataclasses.asdict(window) for window in speculative.result.windows],
            "stats": speculative.result.stats(),
            "steps": [_step_record(speculative.result, step) for step in speculative.result.steps],
        },
    }
    if baseline is not None:
        record["baseline"] = {
            "text": baseline.text,
            "token_ids": list(baseline.token_ids),
            "seconds": baseline.result.total_seconds,
        }
        record["identical"] = baseline.token_ids == speculative.token_ids
        if not speculative.result.lossless:
            record["lossy_cost"] = dataclasses.asdict(_cost(speculative, baseline))
    return record


def _step_record(result: DecodeResult, step: Step) -> dict:
    """A step with the seconds of the batched pass it took part in (shared with the batch's other rows)."""
    shared = result.pass_of(step)
    seconds = {"start_seconds": shared.start_seconds, "draft_seconds": shared.draft_seconds}
    return {**dataclasses.asdict(step), **seconds, "verify_seconds": shared.verify_seconds}


def text_report(speculative: Transcription, baseline: Transcription | None) -> str:
    """Human-readable lines for one file."""
    result = speculative.result
    rate = f"{result.acceptance_rate:.0%}" if result.acceptance_rate is not None else "n/a (nothing drafted)"
    text = "(no speech detected)" if result.no_speech else speculative.text
    lines = [
        f"{speculative.audio} [{result.language}]: {text}",
        f"  speculative: {result.total_seconds:.2f} s, acceptance {rate}, "
        f"{result.tokens_per_pass:.2f} tokens per target pass, {result.num_target_passes} target passes"
        + ("" if speculative.compute_type == "float32" else f", encoder in {speculative.compute_type}"),
    ]
    for word in speculative.words or ():
        lines.append(f"  [{word.start:6.2f} -> {word.end:6.2f}] {word.text.strip()}")
    if not result.lossless:
        lines.append(lossy_line(speculative, baseline))
    lines += fallback_lines(result)
    if baseline is not None:
        identical = "identical" if baseline.token_ids == speculative.token_ids else "DIFFERENT"
        if identical == "DIFFERENT" and (result.sampled or baseline.result.sampled):
            identical = "different samples (a window was sampled)"
        speedup = baseline.result.total_seconds / max(result.total_seconds, 1e-9)
        bound = speedup_bound(baseline.result, result)
        at_most = "" if bound is None else f" (at most {bound:.2f}x with a decode taking no time)"
        lines.append(
            f"  baseline:    {baseline.result.total_seconds:.2f} s, "
            f"{baseline.result.num_target_passes} target passes; speedup {speedup:.2f}x{at_most}; "
            f"output {identical}"
        )
    return "\n".join(lines)


def lossy_line(speculative: Transcription, baseline: Transcription | None) -> str:
    """What a lossy decoding is, and with the target alone beside it, what it cost."""
    result = speculative.result
    line = (
        f"  LOSSY (acceptance threshold {result.acceptance_threshold:g}): not the target's own output; "
        f"{result.num_relaxed} tokens kept that the target would not have chosen"
    )
    if baseline is not None:
        line += f"; {_cost(speculative, baseline).describe()}"
    return line


def _cost(speculative: Transcription, baseline: Transcription) -> LossyCost:
    from specdec.wer import lossy_cost

    return lossy_cost(
        list(baseline.token_ids), baseline.text, list(speculative.token_ids), speculative.text,
        baseline.language,
    )  # fmt: skip


def fallback_lines(result: DecodeResult) -> list[str]:
    """A line for each window the temperature fallback decoded again: its temperatures, and its numbers at
    each (compression ratio, average log-probability)."""
    lines, tried = [], []
    for window in result.windows:
        numbers = f"{window.temperature:g} (ratio {window.compression_ratio:.2f}, "
        average = "n/a" if window.avg_logprob is None else f"{window.avg_logprob:.2f}"
        tried.append(f"{numbers}log-prob {average})")
        if not window.fell_back:
            if len(tried) > 1:
                lines.append(
                    f"  fallback: window at {window.start_seconds:.1f} s decoded at {', '.join(tried)}"
                )
            tried = []
    return lines


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())
