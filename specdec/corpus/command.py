"""`python -m specdec corpus INPUT --out DIR`: its arguments, and the run they describe."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specdec.corpus.inputs import list_inputs
from specdec.corpus.store import SUMMARY, TRANSCRIPTS
from specdec.corpus.summary import Summary
from specdec.options import COMPUTE_TYPES, DEFAULT_COMPUTE_TYPE, DecodeOptions
from specdec.request import (
    add_model_arguments,
    add_option_arguments,
    command_line_fields,
    options_from_arguments,
)


def add_corpus_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `corpus` subcommand's parser (the caller sets its handler)."""
    corpus = commands.add_parser(
        "corpus",
        help="transcribe a folder, glob or manifest of audio files on Ray (local, or a cluster); resumable",
        description="Transcribe many files with Ray Data: read tasks, an actor pool of model pairs, one "
        f"JSONL row per file in OUT/{TRANSCRIPTS} and the figures in OUT/{SUMMARY}. A rerun with the same "
        "options skips the files already done (one row per path; the content hash lets a copy of a file "
        "already done reuse its transcript), so a killed run resumes.",
    )
    corpus.add_argument(
        "input", help="a folder (searched recursively), a glob, or a CSV/JSONL manifest with a path column "
        "(and optionally a language column)"
    )  # fmt: skip
    corpus.add_argument("--out", required=True, help="output folder (created; reused to resume)")
    add_model_arguments(corpus)
    add_option_arguments(corpus, (*command_line_fields(DecodeOptions), "long_form"))
    corpus.add_argument("--batch-size", type=int, default=8, help="files an actor decodes together")
    corpus.add_argument("--workers", type=int, default=None, help="actors; default one per GPU, else 1")
    corpus.add_argument("--threads-per-worker", type=int, default=None, help="torch threads per actor")
    corpus.add_argument(
        "--gpus-per-worker", type=float, default=1.0, help="GPUs per actor (0.5: two per GPU)"
    )
    corpus.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    corpus.add_argument(
        "--compute-type", choices=COMPUTE_TYPES, default=DEFAULT_COMPUTE_TYPE,
        help="what the target's encoder computes in on a CPU (as `transcribe --compute-type`)",
    )  # fmt: skip
    corpus.add_argument(
        "--address",
        default=os.environ.get("RAY_ADDRESS"),
        help="Ray cluster to join (default: RAY_ADDRESS; unset: a local Ray started and stopped here)",
    )
    corpus.add_argument(
        "--retry-errors", action="store_true", help="decode again the files whose earlier row is an error"
    )
    return corpus


def run_corpus_command(args: argparse.Namespace) -> Summary | None:
    """List the input, run, print the summary; the summary, or None when Ray stopped the run (one line
    on stderr says why; the rows written so far are kept)."""
    # Busy-waiting OpenMP threads slow torch 30-50x when several torch processes share the cores, as the
    # Ray actors do: there threads wait passively (a single process is faster with the runtime's default,
    # figures: docs/benchmarks.md). Read by the OpenMP runtime when torch loads, so set before the import
    # below (the actors inherit it); a caller that has loaded torch already keeps its own.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from specdec.corpus.run import CorpusError, transcribe_corpus  # Ray and torch: only to run

    options = corpus_options(args)
    items = list_inputs(args.input)
    try:
        summary = transcribe_corpus(items, args.out, options, address=args.address)
    except CorpusError as error:
        print(f"specdec: error: {error}", file=sys.stderr)
        return None
    print(f"{Path(args.out) / TRANSCRIPTS}: {summary.files} rows")
    print(summary.report())
    return summary


def corpus_options(args: argparse.Namespace):
    """The run the parsed arguments describe: every decoding option as `transcribe` reads it."""
    from specdec.corpus.run import CorpusOptions

    return CorpusOptions(
        target=args.target,
        draft=args.draft,
        device=args.device,
        decode=options_from_arguments(args, command_line_fields(DecodeOptions), DecodeOptions),
        long_form=args.long_form,
        batch_size=args.batch_size,
        workers=args.workers,
        threads_per_worker=args.threads_per_worker,
        gpus_per_worker=args.gpus_per_worker,
        retry_errors=args.retry_errors,
        compute_type=args.compute_type,
    )
