"""How the self-draft that ships for whisper-base (specdec/whisper/drafts/base-2l) was made, step by step.

    python scripts/make_distill_speech.py SPEECH --per-language 800 --languages en
    python scripts/make_distill_speech.py SPEECH --per-language 250 --seed 1 \
        --languages de,es,fr,nl,it,pt,ru,pl,sv,tr,cs
    python scripts/make_shipped_draft.py SPEECH WORK --frame-pooling 1 [--epochs 6]
    python scripts/make_distill_speech.py MORE --languages en --texts fortunes --per-language 3000 --seed 2
    python scripts/make_shipped_draft.py SPEECH WORK --more MORE --resume DRAFT --learning-rate 1e-4 \
        --frame-pooling 1

It is `python -m specdec distill base SPEECH OUT` with one difference in the data: every English window is
kept for training but only 60 of each other language (English is what most users speak to it, and reading
a window costs the target ~1.3 s here). The readings are cached in WORK, so a second run only trains.
The shipped draft was trained on every encoder frame (`--frame-pooling 1`; pooling came later) and runs
on frames averaged in groups of 4 on a CPU; a third stage trained on pooled frames was tried and not kept
(docs/benchmarks.md). The shipped draft was trained on text tokens only; since commit 7792eef training
also teaches end-of-text and the timestamps, so the commit before it reproduces the shipped weights.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

from specdec.distill import data
from specdec.distill.command import agreement_report, parse_layers, positive_int, print_report, read_cached
from specdec.distill.train import TrainingOptions, train_draft
from specdec.engine import kernels
from specdec.whisper.models import load_pair
from specdec.whisper.self_draft import RECIPE_FILE, SHIPPED, load_self_draft, save_self_draft

OTHER_LANGUAGE_WINDOWS = 60  # training windows per language other than English


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("speech", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--out", type=Path, default=SHIPPED / "base-2l")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--resume", type=Path, default=None, help="a self-draft to train further")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-steps", type=positive_int, default=TrainingOptions.warmup_steps)
    parser.add_argument(
        "--frame-pooling",
        type=positive_int,
        default=1,  # as the shipped draft was trained; the CPU draft runs on groups of 4
        help="the draft reads the encoder states averaged over this many frames (1: every one)",
    )
    parser.add_argument("--layers", default=None, help="the target's decoder layers to copy, e.g. 0,3,5")
    parser.add_argument(
        "--more", type=Path, action="append", default=[], help="another speech folder, every window kept"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    pair = load_pair("base", None, device="cpu")
    kernels.pack(pair.target.model)
    rng = random.Random(0)
    clips = data.find_clips(args.speech)
    windows = data.plan_windows(clips, rng)
    training, held_out = data.split_windows(windows, 0.1, None, rng)
    counts: dict[str | None, int] = {}
    kept = []
    for window in training:
        language = window[0].language
        counts[language] = counts.get(language, 0) + 1
        if language == "en" or counts[language] <= OTHER_LANGUAGE_WINDOWS:
            kept.append(window)
    started = time.perf_counter()
    held_out_readings = read_cached(pair, held_out, rng, args.work / "heldout.pt", "reading heldout.pt", 16)
    training_readings = read_cached(pair, kept, rng, args.work / "train.pt", "reading train.pt", 16)
    for more in args.more:
        more_rng = random.Random(0)  # its own: the same windows whether the folders above were cached or not
        more_clips = data.find_clips(more)
        clips += more_clips
        more_training, more_held_out = data.split_windows(
            data.plan_windows(more_clips, more_rng), 0.1, None, more_rng
        )
        name = more.name
        held_out_readings.extend(
            read_cached(
                pair, more_held_out, more_rng, args.work / f"{name}-heldout.pt", f"reading {name}", 16
            )
        )
        training_readings.extend(
            read_cached(pair, more_training, more_rng, args.work / f"{name}-train.pt", f"reading {name}", 16)
        )
        kept += more_training
        held_out += more_held_out
    reading_seconds = time.perf_counter() - started
    kernels.unpack(pair.target.model)
    layers = parse_layers(args.layers, pair.target.model)
    options = TrainingOptions(
        layers,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        frame_pooling=args.frame_pooling,
        seed=args.seed,
    )
    resumed = None if args.resume is None else load_self_draft(args.resume, pair.target.model).float()
    started = time.perf_counter()
    student, history = train_draft(
        pair.target.model, training_readings, held_out_readings, options, None, _epoch, resumed
    )
    training_seconds = time.perf_counter() - started
    best = max(history, key=lambda a: a.overall)
    recipe = {
        "data": {
            "speech": "scripts/make_distill_speech.py: espeak-ng reading gettext catalogs' sentences "
            "(Debian packages), Python docstrings and, with --texts fortunes, Debian's fortunes; "
            + "; ".join(_clip_counts(folder) for folder in [args.speech, *args.more]),
            "clips": len(clips),
            "windows": {"training": len(kept), "held_out": len(held_out)},
            "training_tokens": sum(len(s.tokens) - s.prompt_length for s in training_readings.sequences),
        },
        "training": {**vars(options), "layers": list(layers), "epochs_run": len(history) - 1},
        "seconds": {"reading": round(reading_seconds), "training": round(training_seconds)},
        "machine": "2 CPU cores, float32, no GPU",
        "held_out_agreement": {"untrained": agreement_report(history[0]), "draft": agreement_report(best)},
        "agreement_by_epoch": [round(a.overall, 4) for a in history],
        "command": "scripts/make_shipped_draft.py (see its docstring)",
        "resumed_from": None if args.resume is None else json.loads((args.resume / RECIPE_FILE).read_text()),
    }
    save_self_draft(student, pair.target.model, "openai/whisper-base", layers, args.out, recipe)
    print_report(history[0], best, args.out)


def _clip_counts(folder: Path) -> str:
    """'name/: en 800, de 250, ...': the clips of a speech folder by language."""
    counts: dict[str | None, int] = {}
    for clip in data.find_clips(folder):
        counts[clip.language] = counts.get(clip.language, 0) + 1
    return f"{folder.name}/: " + ", ".join(f"{language} {n}" for language, n in counts.items())


def _epoch(epoch: int, agreement) -> None:
    groups = " ".join(f"{k}={v:.2f}" for k, v in agreement.by_group.items())
    print(
        f"epoch {epoch}: held-out agreement {agreement.overall:.3f} ({groups})", file=sys.stderr, flush=True
    )


if __name__ == "__main__":
    main()
