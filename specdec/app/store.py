"""The app's models: the allowed target/draft pairs, loaded on first use and kept, and what the page says
about them. The UI offers only the store's pairs; other checkpoints come in only through the server's own
flags. Models load once and are shared between pairs; every newly loaded pair is warmed up before its
first timing, and its models get the packed CPU kernels (`engine.kernels.pack`).
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import GenerationConfig
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec.api import SpeculativeWhisper
from specdec.engine import compute_types, kernels
from specdec.engine.fast_draft import tune_draft
from specdec.options import DEFAULT_COMPUTE_TYPE
from specdec.whisper.models import (
    SELF_DRAFT,
    LoadedModel,
    PairError,
    default_pair,
    is_self_draft_name,
    load_model,
    load_self_draft,
    make_pair,
    pick_device,
    resolve_model_name,
    unavailable,
)
from specdec.whisper.tokens import language_token_id

# OpenAI's published sizes, in millions of parameters: the figures the models are known by, shown for
# them in the list of pairs and in the banner alike (transformers counts whisper-base's as 72.6M); any
# other model is described by its own count
PUBLISHED_SIZES = {"tiny": 39, "tiny.en": 39, "base": 74, "large-v3": 1550}


def _sized(target: str, draft: str, note: str = "") -> str:
    """'whisper-base ← whisper-tiny.en (74M ← 39M, bundled)'."""
    sizes = f"{PUBLISHED_SIZES[target]}M ← {PUBLISHED_SIZES[draft]}M"
    return f"whisper-{target} ← whisper-{draft} ({sizes}{note})"


# the pairs the app offers (label -> (target, draft)); the first for the device is the default
DEFAULT_PAIRS = {
    "whisper-base ← its self-draft (74M ← 2 of its own decoder layers, on its encoder; bundled)": (
        "base",
        SELF_DRAFT,
    ),
    _sized("base", "tiny.en", ", bundled"): ("base", "tiny.en"),
    _sized("large-v3", "tiny"): ("large-v3", "tiny"),
    "whisper-large-v3 ← distil-large-v3 (shares the encoder)": ("large-v3", "distil-large-v3"),
    "whisper-large-v3 ← whisper-large-v3-turbo (4 decoder layers)": ("large-v3", "large-v3-turbo"),
}
DEMO_PAIRS = {
    "demo target ← demo draft, separate encoder and vocabulary (like whisper-tiny)": "draft-separate",
    "demo target ← demo draft, shared encoder (like distil-large-v3)": "draft-shared",
}
DEMO_CACHE = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec")) / "demo-models"
OFFLINE_HINT = (
    "Without network access, choose a bundled pair, whisper-base ← its self-draft or ← whisper-tiny.en "
    "(python app.py without --target and --draft offers both)."
)
MAX_LANGUAGE_CHARS = 24  # the longest language name ("haitian creole") with room; longer is refused
MAX_APP_SECONDS = 600.0  # the longest clip the app decodes (app.py --max-seconds, SPECDEC_MAX_SECONDS)
# an absolute path of two parts or more, in a message: "/srv/models/x", "~/models/x" (a URL's path is not)
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])~?/(?:[^\s/'\"<>()\[\],;:]+/)+[^\s/'\"<>()\[\],;:]*")


LANGUAGE_IDS = {f"<|{code}|>": index for index, code in enumerate(LANGUAGES)}  # for checking names only


class UserError(ValueError):
    """A problem the person using the app can fix (bad audio, bad options, models unavailable)."""


class RefusedAudio(UserError):
    """An audio file the app cannot decode or will not (too long, empty, corrupt): the upload is deleted."""


class UnavailablePair(UserError):
    """A pair whose models could not be loaded. The message is for the page, whose operator can start the
    app with other models; an API client is told instead which models it can use (`app.openai_schema`)."""


@dataclass
class ModelStore:
    """The allowed target/draft pairs, loaded on first use and kept; one lock for the model work.

    Models are shared between pairs (one whisper-large-v3 for all its drafts)."""

    pairs: dict[str, tuple[str, str]]  # label shown in the UI -> (target, draft): hub ids, names or folders
    device: str = "auto"
    warm_up: bool = True  # off on ZeroGPU, where no CUDA work may run outside a GPU task
    max_seconds: float = MAX_APP_SECONDS  # longer clips are refused before they are decoded
    compute_type: str = DEFAULT_COMPUTE_TYPE  # what each pair's target encoder computes in (on a CPU)
    compute_types: dict[str, str] = field(default_factory=dict)  # a label's own, where it has one
    _models: dict[str, LoadedModel] = field(default_factory=dict)
    _whispers: dict[str, SpeculativeWhisper] = field(default_factory=dict)
    max_listeners: int = 2  # Live recordings decoded at once; the next page is told the view is busy
    work_lock: threading.Lock = field(default_factory=threading.Lock)  # held by all decoding (app.jobs)
    listeners: list = field(default_factory=list)  # the Live recordings holding a seat (app.live)
    listeners_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # loading
    _runs: itertools.count = field(default_factory=itertools.count)

    @property
    def default_pair(self) -> str:
        return next(iter(self.pairs))

    def whisper(self, label: str) -> SpeculativeWhisper:
        """The pair for one allowed label, loaded and warmed up on first use."""
        if label not in self.pairs:
            raise UserError(f"Unknown model pair {label!r}; choose one from the list.")
        with self._lock:
            if label not in self._whispers:
                compute_type = self.compute_types.get(label, self.compute_type)
                self._whispers[label] = self._load(*self.pairs[label], compute_type)
            return self._whispers[label]

    def loaded(self, label: str) -> SpeculativeWhisper | None:
        return self._whispers.get(label)

    def unavailable(self, label: str) -> str | None:
        """Why a pair's weights cannot be had here (its first model's reason), or None when they can."""
        if label in self._whispers:
            return None
        return next((reason for name in self.pairs[label] if (reason := unavailable(name))), None)

    def choices(self) -> list[tuple[str, str]]:
        """(shown, value) for a dropdown: a pair whose weights cannot be had here says so in its name."""
        shown = []
        for label in self.pairs:
            reason = self.unavailable(label)
            shown.append((f"{label} · unavailable: {without_paths(reason)}" if reason else label, label))
        return shown

    def next_baseline_first(self) -> bool:
        """Alternate which run goes first, one comparison to the next."""
        return next(self._runs) % 2 == 0

    def _load(self, target_name: str, draft_name: str, compute_type: str) -> SpeculativeWhisper:
        try:
            device = pick_device(self.device)
        except ValueError as error:  # a CUDA device this machine lacks (app.py --device cuda:1)
            raise UnavailablePair(f"The models cannot run here: {error}.") from error
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        try:
            target = self._model(target_name, device, dtype)
            if is_self_draft_name(draft_name):  # built around the target it was made from
                draft = load_self_draft(draft_name, target)
                kernels.pack(draft.model)
            else:
                draft = self._model(draft_name, device, dtype)
            # the draft runs as SpeculativeWhisper runs it by default (on a CPU: int8, restricted vocabulary,
            # lean step, pooled frames); the page's timings are then what the package and the CLI give
            pair = compute_types.apply(tune_draft(make_pair(target, draft)), compute_type)
            whisper = SpeculativeWhisper.from_pair(pair)
        except PairError as error:
            names = f"{shown_name(target_name)} and {shown_name(draft_name)}"
            message = f"Could not load the models {names}. {OFFLINE_HINT}"
            raise UnavailablePair(f"{message} (Details: {without_paths(str(error))})") from error
        if self.warm_up:
            whisper.warm_up()
        return whisper

    def _model(self, name: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
        if name not in self._models:
            self._models[name] = load_model(name, device, dtype)
            kernels.pack(self._models[name].model)  # models the store loaded itself: faster CPU steps
        return self._models[name]


def pairs_by_device(device: str = "auto") -> dict[str, tuple[str, str]]:
    """DEFAULT_PAIRS with the device's default first: the bundled real pair on a CPU, large-v3's on a GPU."""
    default = default_pair(device)
    first = [label for label, pair in DEFAULT_PAIRS.items() if pair == default]
    return {label: DEFAULT_PAIRS[label] for label in first + [p for p in DEFAULT_PAIRS if p not in first]}


def offer_bfloat16(store: ModelStore) -> None:
    """On a CPU that multiplies bfloat16 natively, with the store's encoders in float32: the default pair
    again, its encoder in bfloat16, second in the page's list (/v1 names a pair by its models, and keeps
    the first: the server's compute type)."""
    try:
        device = pick_device(store.device)
    except ValueError:  # a device this machine lacks: the store says so when a pair loads
        return
    if device.type != "cpu" or compute_types.resolve(store.compute_type, device) != "float32":
        return
    if not compute_types.cpu_has_bfloat16():
        return
    default, label = store.default_pair, f"{store.default_pair} · encoder in bfloat16"
    pairs = list(store.pairs.items())
    store.pairs = dict([pairs[0], (label, store.pairs[default]), *pairs[1:]])
    store.compute_types[label] = "bfloat16"


def pairs_for(target: str, drafts: list[str]) -> dict[str, tuple[str, str]]:
    """One pair per draft for the same target, labelled by name (a folder by its own: `shown_name`)."""
    return {f"{shown_name(target)} ← {shown_name(draft)}": (target, draft) for draft in drafts}


def shown_name(name: str) -> str:
    """A model as the page names it: a hub id or short name as given, a folder by its own name (a public
    page shows no server path)."""
    is_folder = name.startswith((".", "/", "~")) or Path(name).expanduser().exists()
    return Path(name).name if is_folder else name


def without_paths(text: str) -> str:
    """A message for the page: each absolute path in it (a model folder, a cache file) by its last part."""
    return ABSOLUTE_PATH.sub(lambda path: path[0].rstrip("/").rsplit("/", 1)[-1], text)


def demo_store(device: str = "auto") -> ModelStore:
    """The random-weight demo target and drafts, built into the cache folder on first use."""
    if not (DEMO_CACHE / "draft-shared" / "config.json").exists():
        from specdec.whisper.demo import build_demo_models

        build_demo_models(DEMO_CACHE)
    return ModelStore(demo_pairs(DEMO_CACHE), device)


def demo_pairs(folder: Path) -> dict[str, tuple[str, str]]:
    """The demo pairs of demo checkpoints written under `folder` (`demo_models.build_demo_models`)."""
    return {label: (str(folder / "target"), str(folder / draft)) for label, draft in DEMO_PAIRS.items()}


def chosen_language(language: str | None) -> str | None:
    """The UI's language choice: None for auto-detection, else a checked Whisper language code or name."""
    if language in ("auto", "", None):
        return None
    if not isinstance(language, str) or len(language) > MAX_LANGUAGE_CHARS:
        shown = str(language)[:MAX_LANGUAGE_CHARS]
        raise UserError(f"Unknown language {shown!r}…; choose one from the list.")
    language_token_id(GenerationConfig(lang_to_id=LANGUAGE_IDS), language)  # ValueError if unknown
    return language


def store_summary(store: ModelStore) -> str:
    """The default pair's models: names, sizes, where the weights came from, device and precision."""
    whisper = store.loaded(store.default_pair)
    if whisper is None:
        return f"Models: {store.default_pair} (not loaded yet)"
    target, draft = whisper.pair.target, whisper.pair.draft
    return (
        f"Target {model_summary(target)} ← draft {model_summary(draft)}; on {target.model.device}, "
        f"{whisper.pair.compute_type}."
    )


def model_summary(model: LoadedModel) -> str:
    """'openai/whisper-base (74M parameters, bundled in ...)': the published size where there is one, a
    folder by its own name."""
    published = {resolve_model_name(name): size for name, size in PUBLISHED_SIZES.items()}
    millions = published.get(model.name, round(model.num_parameters / 1e6))
    return f"{shown_name(model.name)} ({millions}M parameters, {without_paths(model.source) or 'loaded'})"


def draft_note(whisper: SpeculativeWhisper, language: str | None, task: str) -> str:
    """A line for the page when the draft cannot propose for this language or task, else ''."""
    pair = whisper.pair
    if pair.draft_fits(language, task):
        return ""
    what = "translating" if task == "translate" else f"on {language or 'non-English'} audio"
    if pair.english_only_draft:
        draft = f"{shown_name(pair.draft.name)} drafts English only"
    else:
        draft = f"The self-draft was trained to transcribe {', '.join(sorted(pair.draft.trained_languages))}"
    return (
        f"{draft}: {what} the target decodes alone (the draft is not run). The output is the target's own "
        "either way."
    )
