"""`python -m specdec distill TARGET AUDIO_DIR OUT`: a self-draft for a Whisper target, from unlabelled audio.

The target reads the audio (`distill.data`, cached in OUT/cache so that a second run only trains), a draft
is trained on its readings (`distill.train`), and OUT gets the draft (`whisper.self_draft`) with its recipe
and a held-out agreement report per language. Use it with `--draft OUT` beside the same `--target`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

# the CPU draft's settings without torch (`engine.fast_draft.CPU_DRAFT`), for --help
CPU_DRAFT_VOCABULARY = 16384
CPU_DRAFT_FRAME_POOLING = 4


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def window_seconds(text: str) -> float:
    """argparse type: a window's audio, over 0 and at most MAX_WINDOW_SECONDS."""
    from specdec.distill.data import MAX_WINDOW_SECONDS

    value = float(text)
    if not 0 < value <= MAX_WINDOW_SECONDS:
        raise argparse.ArgumentTypeError(f"must be over 0 and at most {MAX_WINDOW_SECONDS:g}, not {text}")
    return value


def add_distill_parser(commands) -> argparse.ArgumentParser:
    distill = commands.add_parser(
        "distill", help="train a draft that shares the target's encoder, from unlabelled audio (a self-draft)"
    )
    distill.add_argument("target", help="the Whisper model to draft for: hub id, short name or folder")
    distill.add_argument(
        "audio_dir", help="audio files, any depth; a folder named by a language code (en, de, ...) forces it"
    )
    distill.add_argument("out", help="folder to write the draft into (use it as --draft OUT)")
    distill.add_argument(
        "--layers", default=None, help="target decoder layers to start from, e.g. 0,5 (default: first,last)"
    )
    distill.add_argument(
        "--resume",
        default=None,
        help="a self-draft to train further on this audio instead of starting from --layers: its folder, or "
        "'self' for the one shipped for the target (adapts it to your recordings; try --learning-rate 1e-4)",
    )
    distill.add_argument("--epochs", type=int, default=8, help="at most (stops early on held-out agreement)")
    distill.add_argument("--batch-size", type=int, default=8)
    distill.add_argument("--learning-rate", type=float, default=3e-4)
    distill.add_argument(
        "--held-out", type=float, default=0.1, help="share of windows per language kept apart"
    )
    distill.add_argument("--max-windows", type=int, default=None, help="per language, at most (default: all)")
    distill.add_argument(
        "--vocabulary",
        default=str(CPU_DRAFT_VOCABULARY),
        help="it proposes among this many most frequent text tokens, as the CPU draft runs; 'all': every one",
    )
    distill.add_argument(
        "--frame-pooling",
        type=positive_int,
        default=CPU_DRAFT_FRAME_POOLING,
        help="it reads the encoder states averaged over this many frames, as the CPU draft runs; 1: all",
    )
    distill.add_argument(
        "--window-seconds",
        type=window_seconds,
        default=28.0,
        help="clips are packed into windows of up to this much audio",
    )
    distill.add_argument("--seed", type=int, default=0)
    distill.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    return distill


def run_distill_command(args: argparse.Namespace) -> int:
    from specdec.distill import data
    from specdec.distill.train import TrainingOptions
    from specdec.engine import kernels
    from specdec.whisper.models import load_pair
    from specdec.whisper.self_draft import read_recipe, save_self_draft

    out = Path(args.out)
    clips = data.find_clips(Path(args.audio_dir))
    if not clips:
        raise ValueError(f"no audio files under {args.audio_dir}")
    pair = load_pair(args.target, None, device=args.device)
    target = pair.target.model
    resumed = resumed_draft(args.resume, args.layers, target)  # checked before the long reading
    resumed_from = read_recipe(resumed) if resumed else None
    layers = resumed_from.layers if resumed_from else parse_layers(args.layers, target)
    vocabulary = None if args.vocabulary == "all" else int(args.vocabulary)
    options = TrainingOptions(
        layers,
        args.epochs,
        args.batch_size,
        args.learning_rate,
        vocabulary=vocabulary,
        frame_pooling=args.frame_pooling,
        seed=args.seed,
    )
    if resumed_from:
        for change in recipe_changes(resumed_from.recipe, options):
            _tell(change)
    kernels.pack(target)
    rng = random.Random(args.seed)
    windows = data.plan_windows(clips, rng, args.window_seconds, on_skip=_tell)
    if not windows:
        raise ValueError(f"none of the {len(clips)} audio files under {args.audio_dir} could be read")
    training_windows, held_out_windows = data.split_windows(windows, args.held_out, args.max_windows, rng)
    if not held_out_windows:
        raise ValueError("no held-out windows: give more audio or a larger --held-out")
    started = time.perf_counter()
    cache = out / "cache" / _cache_key(args, clips)
    held_out = read_cached(pair, held_out_windows, rng, cache / "held-out.pt", "reading held-out windows")
    training = read_cached(pair, training_windows, rng, cache / "training.pt", "reading training windows")
    reading_seconds = time.perf_counter() - started
    kernels.unpack(target)  # training copies the target's layers (a packed weight cannot be copied)
    started = time.perf_counter()
    student, history = _train(target, training, held_out, options, resumed)
    training_seconds = time.perf_counter() - started
    best = max(history, key=lambda a: a.overall)
    recipe = {
        "data": _describe(training, training_windows, held_out, held_out_windows, args.audio_dir),
        "training": {**vars(options), "layers": list(layers), "epochs_run": len(history) - 1},
        "resumed_from": resumed_from.recipe if resumed_from else None,
        "seconds": {"reading": round(reading_seconds), "training": round(training_seconds)},
        "held_out_agreement": {"untrained": agreement_report(history[0]), "draft": agreement_report(best)},
        "agreement_by_epoch": [round(a.overall, 4) for a in history],
    }
    save_self_draft(student, target, pair.target.name, layers, out, recipe)
    print_report(history[0], best, out, "resumed" if resumed else "untrained")
    return 0


def recipe_changes(resumed: dict, options) -> list[str]:
    """A line for each of --vocabulary and --frame-pooling that differs from how the resumed self-draft
    (its description: `read_recipe(...).recipe`) was trained: a draft runs best as it was trained."""
    training = resumed.get("recipe", {}).get("training", {})
    was = {"vocabulary": training["vocabulary"]} if "vocabulary" in training else {}
    was["frame_pooling"] = training.get("frame_pooling", 1)  # a recipe older than pooling: every frame
    changes = []
    for name, value in was.items():
        now = getattr(options, name)
        if value != now:
            flag = "--" + name.replace("_", "-")
            value, now = ("all" if v is None else v for v in (value, now))
            changes.append(
                f"the draft resumed was trained with {flag} {value}; this run trains it with {now} "
                f"(give {flag} {value} to keep it as it was)"
            )
    return changes


def _tell(why: str) -> None:
    print(f"specdec: {why}", file=sys.stderr)


def parse_layers(text: str | None, target) -> tuple[int, ...]:
    """--layers "0,3,5" as a tuple; None or empty: `train.default_layers` (the first and the last)."""
    from specdec.distill.train import default_layers

    if not text:
        return default_layers(target)
    layers = tuple(int(n) for n in text.split(","))
    count = target.config.decoder_layers
    if not all(0 <= layer < count for layer in layers):
        raise ValueError(f"--layers {text}: the target's decoder layers are 0 to {count - 1}")
    return layers


def read_cached(pair, windows, rng, path: Path, description: str, batch_size: int = 8):
    """The target's readings of the windows (`data.read_windows`, with a progress bar), from path if there,
    else read and saved there."""
    from tqdm import tqdm

    from specdec.distill import data

    if path.is_file():
        return data.load_dataset(path)
    with tqdm(total=len(windows), desc=description, unit="window", file=sys.stderr) as bar:
        dataset = data.read_windows(
            pair,
            windows,
            rng,
            batch_size,
            on_batch=bar.update,
            on_skip=lambda why: bar.write(f"specdec: {why}", file=sys.stderr),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    data.save_dataset(dataset, path)
    return dataset


def resumed_draft(name: str | None, layers: str | None, target) -> Path | None:
    """--resume's folder: None, a self-draft's folder, or 'self' for the one shipped for the target."""
    from specdec.whisper.self_draft import is_self_draft, load_self_draft, shipped_draft

    if name is None:
        return None
    if layers is not None:
        raise ValueError("--resume keeps the layers of the draft it resumes: leave out --layers")
    folder = shipped_draft(target) if name == "self" else Path(name).expanduser()
    if folder is None:
        raise ValueError("--resume self: no self-draft ships for this target; give a self-draft's folder")
    if not is_self_draft(folder):
        raise ValueError(f"--resume {name}: not a self-draft's folder (no recipe in it)")
    load_self_draft(folder, target)  # made for this target's weights, its bytes as its recipe says
    return folder


def _train(target, training, held_out, options, resumed: Path | None = None):
    from tqdm import tqdm

    from specdec.distill.train import train_draft
    from specdec.whisper.self_draft import load_self_draft

    bar = tqdm(desc="training", unit="step", file=sys.stderr)

    def on_step(step: int, steps: int, loss: float) -> None:
        bar.total = steps
        bar.n = step
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        bar.refresh()

    def on_epoch(epoch: int, agreement) -> None:
        bar.write(f"epoch {epoch}: held-out next-token agreement {agreement.overall:.3f}", file=sys.stderr)
        bar.reset()

    student = None if resumed is None else load_self_draft(resumed, target).float()
    try:
        return train_draft(target, training, held_out, options, on_step, on_epoch, student)
    finally:
        bar.close()


def _cache_key(args: argparse.Namespace, clips) -> str:
    """Readings depend on the target, the clips and how they were grouped and split."""
    grouping = [args.seed, args.held_out, args.max_windows, args.window_seconds]
    described = [args.target, *grouping, [str(c.path) for c in clips]]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:16]


def _describe(training, training_windows, held_out, held_out_windows, audio_dir) -> dict:
    def count(dataset) -> dict:
        languages: dict[str, int] = {}
        for sequence in dataset.sequences:
            languages[sequence.language] = (
                languages.get(sequence.language, 0) + len(sequence.tokens) - sequence.prompt_length
            )
        return dict(sorted(languages.items()))

    clips = [clip for window in [*training_windows, *held_out_windows] for clip in window]
    return {
        "audio_dir": str(audio_dir),
        "clips": len(clips),  # a recording longer than a window counts its pieces
        "files": len({clip.path for clip in clips}),
        "windows": {"training": len(training_windows), "held_out": len(held_out_windows)},
        "training_tokens_by_language": count(training),
        "held_out_tokens_by_language": count(held_out),
    }


def agreement_report(agreement) -> dict:
    return {"overall": round(agreement.overall, 4), **{k: round(v, 4) for k, v in agreement.by_group.items()}}


def print_report(untrained, best, out: Path, start: str = "untrained") -> None:
    print(f"held-out next-token agreement with the target ({start} -> draft), written to {out}")
    for group, value in best.by_group.items():
        print(f"  {group:<16} {untrained.by_group.get(group, 0):.3f} -> {value:.3f}")
    print(f"  {'overall':<16} {untrained.overall:.3f} -> {best.overall:.3f}")
