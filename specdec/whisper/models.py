"""Loading a target and a draft Whisper model, detecting the draft kind and validating the pair."""

from __future__ import annotations

import enum
import functools
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoConfig, WhisperForConditionalGeneration, WhisperProcessor

from specdec.whisper import self_draft
from specdec.whisper.bundled import BundleError, bundled_folder, find_bundle, imported_folder, is_installed
from specdec.whisper.ct2 import CheckpointError, is_ct2_folder
from specdec.whisper.vocabulary import VocabularyError, VocabularyMap

logger = logging.getLogger("specdec")
HUB_PROBE_SECONDS = 3.0  # how long to wait for the hub before using a bundled copy
OFFLINE_HINT = (
    "without network access use a local folder, "
    "or `python -m specdec demo-models DIR` for offline demo models"
)

HUB_ALIASES = {
    "tiny": "openai/whisper-tiny",
    "tiny.en": "openai/whisper-tiny.en",
    "base": "openai/whisper-base",
    "small": "openai/whisper-small",
    "medium": "openai/whisper-medium",
    "large-v2": "openai/whisper-large-v2",
    "large-v3": "openai/whisper-large-v3",
    "large": "openai/whisper-large-v3",
    "large-v3-turbo": "openai/whisper-large-v3-turbo",
    "turbo": "openai/whisper-large-v3-turbo",
    "distil-large-v3": "distil-whisper/distil-large-v3",
    "distil-large-v2": "distil-whisper/distil-large-v2",
    "distil-small.en": "distil-whisper/distil-small.en",
}


AUTO = "auto"  # a model name chosen by device (`default_pair`)
SELF_DRAFT = "self"  # the draft name for the self-draft that ships for the target (`whisper.self_draft`)
# On a CPU the bundled real pair (large-v3 takes over 30 s per 30 s window there); on a GPU large-v3.
# (target, draft): on a CPU whisper-base with its shipped self-draft (two of its own decoder layers on its
# encoder: no second encoder, every language base speaks; docs/models.md), measured faster end to end than
# with whisper-tiny.en (`python -m benchmarks e2e`)
CPU_DEFAULT_PAIR = ("base", SELF_DRAFT)
GPU_DEFAULT_PAIR = ("large-v3", "tiny")


class PairError(ValueError):
    """The target and draft cannot be used together; the message names the problem."""


class DraftKind(str, enum.Enum):
    """How the draft relates to the target (see README, 'Draft kinds')."""

    SHARED_ENCODER = "shared-encoder"  # distil-large-v3: reads the target's encoder output
    SEPARATE_SAME_VOCAB = "separate-same-vocabulary"  # e.g. large-v3-turbo -> large-v3
    SEPARATE_OTHER_VOCAB = "separate-other-vocabulary"  # e.g. tiny (v2 ids) -> large-v3


@dataclass(frozen=True)
class LoadedModel:
    """A Whisper model with its processor (feature extractor + tokenizer)."""

    name: str  # hub id or folder, as resolved from what was asked for
    model: WhisperForConditionalGeneration
    processor: WhisperProcessor
    source: str = ""  # where the weights came from, for people (hub, folder, bundled package)
    # a draft's: the languages it was trained to propose in (a self-draft's, from its recipe), and then
    # for transcription only (it learnt from transcripts); None: every language its model knows
    trained_languages: frozenset[str] | None = None

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


@dataclass(frozen=True)
class DraftSettings:
    """How the draft model runs. None of these can change the output (the target verifies every proposed
    token); they trade the draft's acceptance for its speed (`engine.fast_draft.tune_draft` applies them)."""

    int8: bool = (
        False  # the draft's matrix products (decoder and encoder) in int8 (dynamic quantisation; CPU)
    )
    vocabulary: int | None = None  # proposals only among the draft's this-many most frequent text tokens
    # (and its special tokens); None: its whole vocabulary
    audio_context: bool = False  # the draft encodes the window's audio only, not its padding to 30 s
    lean_step: bool = False  # the draft's decoder step in plain tensor ops (`engine.lean_decoder`)
    frame_pooling: int = 1  # the draft's cross-attention reads its encoder states averaged over this many
    # consecutive frames (1: every frame)


@dataclass(frozen=True)
class ModelPair:
    """A validated target/draft pair; `draft` is None for target-only decoding."""

    target: LoadedModel
    draft: LoadedModel | None
    kind: DraftKind | None
    vocabulary: VocabularyMap | None
    draft_settings: DraftSettings = DraftSettings()  # how `draft` runs
    plain_draft: LoadedModel | None = None  # the draft as loaded, when `draft` is a tuned copy of it
    compute_type: str = "float32"  # what the target's encoder computes in (`engine.compute_types`)

    @property
    def english_only_draft(self) -> bool:
        """An English-only draft (tiny.en, ...) for a multilingual target."""
        return is_multilingual(self.target) and self.draft is not None and not is_multilingual(self.draft)

    def draft_fits(self, language: str | None, task: str) -> bool:
        """False when the draft meets a language or task it cannot propose for (an English-only draft on
        other speech or a translation; a self-draft outside the languages it was trained in, or
        translating): its proposals would be rejected, so the target decodes such windows alone
        (`engine.windows`), without paying for the draft."""
        if self.english_only_draft:
            return language in ("en", None) and task == "transcribe"
        trained = self.draft.trained_languages if self.draft is not None else None
        return trained is None or (task == "transcribe" and (language is None or language in trained))


def is_multilingual(model: LoadedModel) -> bool:
    return bool(getattr(model.model.generation_config, "is_multilingual", False))


def resolve_model_name(name: str) -> str:
    """A local folder stays as it is; short names map to hub ids; anything else is a hub id."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    return HUB_ALIASES.get(name, name)


def locate_model(name: str) -> tuple[str, str]:
    """(what from_pretrained loads, where it comes from in words) for a hub id, short name or folder.

    A CTranslate2 / faster-whisper folder is converted once into the cache. A model that ships in a
    package (`bundled.BUNDLES`: base, tiny.en) comes from the hub when the hub has it (its cache, or the
    network), else from the installed package, and the log says so."""
    resolved = resolve_model_name(name)
    if Path(resolved).is_dir():
        if is_ct2_folder(resolved):
            return str(imported_folder(resolved)), f"CTranslate2 folder {resolved}, converted"
        return resolved, f"folder {resolved}"
    if hub_has(resolved):
        return resolved, f"hub {resolved}"
    bundle = find_bundle(resolved)
    if bundle is None:  # refused at once, not after from_pretrained's retries (~25 s here)
        raise CheckpointError(f"{resolved} is not downloaded and the hub is unreachable; {OFFLINE_HINT}")
    folder = bundled_folder(bundle)
    source = f"bundled in {' + '.join(bundle.requirements)}"
    logger.warning(
        "%s is not available from the hub here; using the %s %s", resolved, bundle.description, source
    )
    return str(folder), source


def hub_has(hub_id: str) -> bool:
    """The hub's weights can be had: already in its local cache, or the hub answers (quickly)."""
    import huggingface_hub

    for filename in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if isinstance(huggingface_hub.try_to_load_from_cache(hub_id, filename), str):
            return True
    return not huggingface_hub.constants.HF_HUB_OFFLINE and hub_reachable()


@functools.cache
def hub_reachable() -> bool:
    """The hub's host accepts a connection within HUB_PROBE_SECONDS (asked once per process)."""
    import huggingface_hub

    host = urlparse(huggingface_hub.constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=HUB_PROBE_SECONDS).close()
    except OSError:
        return False
    return True


def unavailable(name: str) -> str | None:
    """Why a model's weights cannot be had here (without loading anything), or None when they can."""
    if name == SELF_DRAFT:
        return (
            None
            if any(self_draft.SHIPPED.glob(f"*/{self_draft.RECIPE_FILE}"))
            else "no self-draft ships here"
        )
    resolved = resolve_model_name(name)
    if resolved.startswith((".", "/", "~")):  # a folder (never a hub id: the hub refuses such names)
        return None if Path(resolved).expanduser().is_dir() else f"no model folder at {name}"
    if Path(resolved).is_dir() or hub_has(resolved):
        return None
    bundle = find_bundle(resolved)
    if bundle is not None and is_installed(bundle):
        return None
    return f"{resolved} is not downloaded and the hub is unreachable"


def default_pair(device: str = "auto") -> tuple[str, str]:
    """(target, draft) by device: whisper-base with its self-draft on a CPU, large-v3 with tiny on a GPU."""
    kind = pick_device(device).type if device == "auto" else torch.device(device).type  # here or not
    return GPU_DEFAULT_PAIR if kind == "cuda" else CPU_DEFAULT_PAIR


def pick_device(device: str) -> torch.device:
    """'auto' -> cuda when available, else cpu; any other name as torch names it ("cpu", "cuda", "cuda:1"),
    a CUDA device the machine lacks refused with a clear message (ValueError) before anything loads."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    chosen = torch.device(device)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if chosen.type == "cuda" and (chosen.index or 0) >= count:
        found = ", ".join(f"cuda:{index}" for index in range(count))
        have = f"{count} CUDA device{'s' * (count > 1)} ({found})" if count else "no CUDA device"
        raise ValueError(f"{device} is not here: this machine has {have}; use cpu or auto")
    return chosen


def load_model(name: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """Load a Whisper checkpoint (hub id, short name, folder) with `from_pretrained`; never remote code."""
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise PairError(f"no model folder at {name}")
    try:
        resolved, source = locate_model(name)
    except (BundleError, CheckpointError) as error:
        raise PairError(f"could not load {name!r}: {error}") from error
    try:
        config = AutoConfig.from_pretrained(resolved, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise PairError(f"could not load {name!r} ({error}); {OFFLINE_HINT}") from error
    if config.model_type != "whisper":
        raise PairError(f"{name} is not a Whisper model (model_type={config.model_type!r})")
    model = WhisperForConditionalGeneration.from_pretrained(resolved, dtype=dtype).to(device).eval()
    processor = WhisperProcessor.from_pretrained(resolved)
    return LoadedModel(name=resolve_model_name(name), model=model, processor=processor, source=source)


def load_pair(
    target: str, draft: str | None, device: str = "auto", dtype: torch.dtype | None = None
) -> ModelPair:
    """Load and validate a pair; with draft None, a target-only pair; "auto" names by `default_pair`."""
    default_target, default_draft = default_pair(device)
    target = default_target if target == AUTO else target
    draft = default_draft if draft == AUTO else draft
    torch_device = pick_device(device)
    dtype = dtype or (torch.float16 if torch_device.type == "cuda" else torch.float32)
    target_model = load_model(target, torch_device, dtype)
    if draft is None:
        return ModelPair(target_model, None, None, None)
    if is_self_draft_name(draft):
        return make_pair(target_model, load_self_draft(draft, target_model))
    return make_pair(target_model, load_model(draft, torch_device, dtype))


def is_self_draft_name(name: str) -> bool:
    """SELF_DRAFT or a self-draft folder: loaded around its target (`load_self_draft`), not on its own."""
    return name == SELF_DRAFT or self_draft.is_self_draft(name)


def load_self_draft(name: str, target: LoadedModel) -> LoadedModel:
    """A self-draft folder (or SELF_DRAFT: the one shipped for this target) around the loaded target."""
    if target.model.dtype == torch.bfloat16:  # its float16 bytes are no longer the checkpoint's
        raise PairError(
            "a self-draft is matched to its target by the target's weights in float16, which bfloat16 "
            "has rounded away: load the pair in float16 or float32 (dtype=)"
        )
    folder = self_draft.shipped_draft(target.model) if name == SELF_DRAFT else Path(name).expanduser()
    if folder is None:
        raise PairError(
            f"no self-draft ships for {target.name}; make one with `python -m specdec distill "
            f"{target.name} AUDIO_DIR OUT` and pass --draft OUT"
        )
    try:
        model = self_draft.load_self_draft(folder, target.model)
    except self_draft.SelfDraftError as error:
        raise PairError(str(error)) from error
    source = (
        f"self-draft {folder.name}, {len(model.model.decoder.layers)} decoder layers on the target's encoder"
    )
    languages = self_draft.read_recipe(folder).languages
    return LoadedModel(str(folder), model, target.processor, source, trained_languages=languages)


def make_pair(target: LoadedModel, draft: LoadedModel) -> ModelPair:
    """Validate two loaded models as target and draft, detect the draft kind, share the encoder if equal."""
    if draft.num_parameters > target.num_parameters:
        raise PairError(
            f"the draft {draft.name} ({draft.num_parameters / 1e6:.1f}M parameters) is larger than "
            f"the target {target.name} ({target.num_parameters / 1e6:.1f}M); swap them"
        )
    vocabulary = _vocabulary_map(target, draft)
    _check_special_tokens(target, draft, vocabulary)
    kind = detect_draft_kind(target, draft, vocabulary)
    if kind is DraftKind.SHARED_ENCODER:
        # one encoder in memory: the draft's copy is identical, so point it at the target's
        draft.model.model.encoder = target.model.model.encoder
    return ModelPair(target, draft, kind, vocabulary)


def _vocabulary_map(target: LoadedModel, draft: LoadedModel) -> VocabularyMap:
    try:
        return VocabularyMap.from_tokenizers(
            target.processor.tokenizer,
            draft.processor.tokenizer,
            target.model.config.vocab_size,
            draft.model.config.vocab_size,
            draft_multilingual=is_multilingual(draft),
        )
    except VocabularyError as error:
        raise PairError(f"{draft.name} cannot draft for {target.name}: {error}") from error


def _check_special_tokens(target: LoadedModel, draft: LoadedModel, vocabulary: VocabularyMap) -> None:
    """Every special token the decoding loop relies on must exist in both vocabularies."""
    for attribute in ("decoder_start_token_id", "eos_token_id", "no_timestamps_token_id"):
        target_id = getattr(target.model.generation_config, attribute, None)
        if target_id is None:
            raise PairError(f"the target {target.name} has no {attribute} in its generation config")
        if vocabulary.target_to_draft[target_id] < 0:
            raise PairError(f"the draft {draft.name} has no token for the target's {attribute} ({target_id})")


def detect_draft_kind(target: LoadedModel, draft: LoadedModel, vocabulary: VocabularyMap) -> DraftKind:
    """Shared encoder when the encoders are identical; otherwise separate, same or other vocabulary."""
    if _same_encoder(target.model, draft.model):
        if not vocabulary.is_identity:
            raise PairError(f"{draft.name} shares the target's encoder but not its vocabulary")
        return DraftKind.SHARED_ENCODER
    return DraftKind.SEPARATE_SAME_VOCAB if vocabulary.is_identity else DraftKind.SEPARATE_OTHER_VOCAB


def _same_encoder(target: WhisperForConditionalGeneration, draft: WhisperForConditionalGeneration) -> bool:
    fields = ("num_mel_bins", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim")
    if any(getattr(target.config, f) != getattr(draft.config, f) for f in fields):
        return False
    target_state = target.model.encoder.state_dict()
    draft_state = draft.model.encoder.state_dict()
    return target_state.keys() == draft_state.keys() and all(
        torch.equal(target_state[key], draft_state[key]) for key in target_state
    )
