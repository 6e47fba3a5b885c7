"""A draft made from the target itself: a few of its decoder layers reading the target's own encoder states.

The distil-whisper recipe at draft scale (`specdec.distill` trains one): the draft's decoder starts as a copy
of some of the target's decoder layers (the first and the last by default) and shares everything else with
the target: the encoder (so no second encoder runs), the token and position embeddings and the output
projection (so the vocabulary is the target's, every language included). Only the copied layers and the
final layer norm are the draft's own, and only they are saved: a folder with

- `draft.safetensors`: the decoder layers and final norm, float16 (a few MB);
- `specdec-draft.json`: which target it was made from (name and a SHA-256 of the target's weights it shares,
  checked on load), which layers it started from, how it was trained and what it measured.

`load_self_draft(folder, target)` rebuilds a `WhisperForConditionalGeneration` around the loaded target;
`models.make_pair` then finds the encoders identical and pairs them as a shared-encoder draft.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load, save_file
from torch import nn
from transformers import WhisperForConditionalGeneration

DRAFT_FILE = "draft.safetensors"
RECIPE_FILE = "specdec-draft.json"
FORMAT = "specdec-self-draft-1"
SHIPPED = Path(__file__).parent / "drafts"  # the drafts that ship with the package, one folder each


class SelfDraftError(ValueError):
    """A self-draft folder cannot be used with this target; the message says why."""


@dataclass(frozen=True)
class SelfDraft:
    """What a self-draft folder says of itself."""

    target: str  # the target's name when it was made
    target_sha256: str  # of the weights it shares with that target (`shared_weights_digest`)
    layers: tuple[int, ...]  # the target's decoder layers it started from
    recipe: dict  # how it was trained, and what it measured (free-form, for people)

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages it was trained in: those of its training tokens, else of its held-out report;
        None when its recipe names none."""
        recipe = _dict(self.recipe.get("recipe"))  # free-form: a hand-made one may hold anything
        by_language = _dict(_dict(recipe.get("data")).get("training_tokens_by_language"))
        report = _dict(_dict(recipe.get("held_out_agreement")).get("draft"))
        names = by_language or {str(name).split("+")[0] for name in report if name != "overall"}
        return frozenset(names) or None


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def is_self_draft(folder: str | Path) -> bool:
    return (Path(folder).expanduser() / RECIPE_FILE).is_file()


def shipped_draft(target: WhisperForConditionalGeneration) -> Path | None:
    """The shipped self-draft made for this target's weights, if any."""
    digest = shared_weights_digest(target)
    for folder in sorted(SHIPPED.glob("*")):
        if is_self_draft(folder) and read_recipe(folder).target_sha256 == digest:
            return folder
    return None


def shared_weights_digest(model: WhisperForConditionalGeneration) -> str:
    """SHA-256 of the weights a self-draft shares with its target: the encoder's first convolution and the
    token embeddings (enough to tell checkpoints apart; fine-tuning changes both), as float16 bytes."""
    digest = hashlib.sha256()
    for weight in (model.model.encoder.conv1.weight, model.model.decoder.embed_tokens.weight):
        digest.update(weight.detach().to("cpu", torch.float16).contiguous().numpy().tobytes())
    return digest.hexdigest()


def make_student(
    target: WhisperForConditionalGeneration, layers: tuple[int, ...]
) -> WhisperForConditionalGeneration:
    """A draft whose decoder is a copy of the target's decoder `layers` (and final norm), sharing the target's
    encoder, embeddings and output projection (the same tensors, frozen in training)."""
    count = target.config.decoder_layers
    if not layers or any(not 0 <= layer < count for layer in layers):
        raise SelfDraftError(f"layers must be among the target's 0..{count - 1}, not {layers}")
    student = _shell(target, len(layers))
    decoder = student.model.decoder
    decoder.layers = nn.ModuleList(copy.deepcopy(target.model.decoder.layers[i]) for i in layers)
    for index, layer in enumerate(decoder.layers):  # its place in the draft's own key/value cache
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = index
    decoder.layer_norm = copy.deepcopy(target.model.decoder.layer_norm)
    return student


def own_parameters(student: WhisperForConditionalGeneration) -> dict[str, torch.Tensor]:
    """The draft's own weights (its decoder layers and final norm), by state-dict name."""
    decoder = student.model.decoder
    own = {f"layers.{k}": v for k, v in decoder.layers.state_dict().items()}
    own.update({f"layer_norm.{k}": v for k, v in decoder.layer_norm.state_dict().items()})
    return own


def save_self_draft(
    student: WhisperForConditionalGeneration,
    target: WhisperForConditionalGeneration,
    target_name: str,
    layers: tuple[int, ...],
    folder: Path,
    recipe: dict,
) -> Path:
    """Write the draft's own weights (float16) and its recipe into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = {
        name: t.detach().to("cpu", torch.float16).contiguous() for name, t in own_parameters(student).items()
    }
    save_file(weights, str(folder / DRAFT_FILE))
    description = {
        "format": FORMAT,
        "target": target_name,
        "target_sha256": shared_weights_digest(target),
        "layers": list(layers),
        "draft_sha256": hashlib.sha256((folder / DRAFT_FILE).read_bytes()).hexdigest(),
        "recipe": recipe,
    }
    (folder / RECIPE_FILE).write_text(json.dumps(description, indent=2) + "\n")
    return folder


def read_recipe(folder: str | Path) -> SelfDraft:
    description = json.loads((Path(folder).expanduser() / RECIPE_FILE).read_text())
    if description.get("format") != FORMAT:
        raise SelfDraftError(
            f"{folder} is not a self-draft this version reads (format {description.get('format')!r})"
        )
    return SelfDraft(
        description["target"], description["target_sha256"], tuple(description["layers"]), description
    )


def load_self_draft(
    folder: str | Path, target: WhisperForConditionalGeneration
) -> WhisperForConditionalGeneration:
    """The self-draft in folder, built around the loaded target (refused for another target's weights)."""
    folder = Path(folder).expanduser()
    draft = read_recipe(folder)
    if shared_weights_digest(target) != draft.target_sha256:
        raise SelfDraftError(
            f"the draft in {folder} was made for {draft.target}, not for the target loaded "
            "(its weights differ); make one for it with `python -m specdec distill`"
        )
    data = (folder / DRAFT_FILE).read_bytes()  # read once: checked, then parsed
    if hashlib.sha256(data).hexdigest() != draft.recipe.get("draft_sha256"):
        raise SelfDraftError(f"{folder / DRAFT_FILE} does not match the SHA-256 in its {RECIPE_FILE}")
    weights = load(data)
    model = _shell(target, len(draft.layers))
    decoder = model.model.decoder
    parameter = next(target.parameters())
    own = {name: t.to(parameter.device, parameter.dtype) for name, t in weights.items()}
    decoder.layers.load_state_dict(
        {k[len("layers.") :]: v for k, v in own.items() if k.startswith("layers.")}, assign=True
    )
    decoder.layer_norm.load_state_dict(
        {k[len("layer_norm.") :]: v for k, v in own.items() if k.startswith("layer_norm.")}, assign=True
    )
    return model.eval()


def _shell(target: WhisperForConditionalGeneration, num_layers: int) -> WhisperForConditionalGeneration:
    """A Whisper model with num_layers decoder layers (empty, on the meta device) around the target's encoder,
    embeddings and output projection (the same tensors)."""
    config = copy.deepcopy(target.config)
    config.decoder_layers = num_layers
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    model.model.encoder = target.model.encoder
    decoder = model.model.decoder
    decoder.embed_tokens = target.model.decoder.embed_tokens
    decoder.embed_positions = target.model.decoder.embed_positions
    model.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False, device="meta")
    model.proj_out.weight = target.proj_out.weight
    model.generation_config = copy.deepcopy(target.generation_config)
    return model
