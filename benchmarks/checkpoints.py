"""Random-weight checkpoints with real Whisper architectures (large-v3, tiny, distil-large-v3), so that
benchmark costs are real and nothing is downloaded. The target never ends or emits a timestamp, so that
every run decodes exactly `max_new_tokens` tokens in one window; distil-large-v3 shares its encoder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperProcessor

from specdec.whisper.demo import (
    NUM_TIMESTAMPS,
    V2,
    V3,
    DemoModelSpec,
    build_demo_models,
    build_generation_config,
    build_model_config,
    build_tokenizer,
)

DEFAULT_CACHE = Path.home() / ".cache" / "specdec" / "bench-models"
FORMAT_VERSION = 1  # bump when the construction below changes, so that cached folders are rebuilt

# the hub configs' architecture fields (openai/whisper-large-v3, openai/whisper-tiny,
# distil-whisper/distil-large-v3); heads are the same in encoder and decoder for all three
LARGE_V3 = DemoModelSpec(V3, num_mel_bins=128, encoder_layers=32, encoder_ffn_dim=5120, decoder_layers=32,
                         d_model=1280, attention_heads=20, decoder_ffn_dim=5120)  # fmt: skip
TINY = DemoModelSpec(V2, num_mel_bins=80, encoder_layers=4, encoder_ffn_dim=1536, decoder_layers=4,
                     d_model=384, attention_heads=6, decoder_ffn_dim=1536)  # fmt: skip
DISTIL_LARGE_V3 = replace(LARGE_V3, decoder_layers=2)


@dataclass(frozen=True)
class SizePreset:
    """A target and its drafts, by folder name."""

    target: str
    drafts: tuple[str, ...]  # the tiny-size one (own encoder, other vocabulary), the distil-size one (shared)


PRESETS = {
    "small": SizePreset("target", ("draft-separate", "draft-shared")),  # specdec.whisper.demo's models
    "large-v3": SizePreset("large-v3", ("tiny", "distil-large-v3")),
}


def bench_models(size: str, cache_dir: Path = DEFAULT_CACHE, seed: int = 0) -> dict[str, Path]:
    """Folders of the preset's target and drafts (target first), built once and cached under cache_dir."""
    if size not in PRESETS:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(PRESETS)}")
    preset, folder = PRESETS[size], Path(cache_dir).expanduser() / f"{size}-seed{seed}"
    names = [preset.target, *preset.drafts]
    stamp, expected = folder / "complete.json", {"version": FORMAT_VERSION, "names": names}
    if not stamp.exists() or json.loads(stamp.read_text()) != expected:
        if size == "small":
            build_demo_models(folder, seed=seed)
        else:
            _build_real_size(folder, seed)
        stamp.write_text(json.dumps(expected))
    return {name: folder / name for name in names}


def _build_real_size(folder: Path, seed: int) -> None:
    """Write large-v3, tiny and distil-large-v3 with random weights (one model in memory at a time)."""
    v3, v2 = build_tokenizer(V3), build_tokenizer(V2)
    target = _random_model(LARGE_V3, v3, seed)
    embeddings = target.model.decoder.embed_tokens.weight  # = the output rows: zero ones are never the argmax
    with torch.no_grad():
        embeddings[target.config.eos_token_id] = 0.0
        embeddings[-NUM_TIMESTAMPS:] = 0.0
    _save(target, LARGE_V3, v3, folder / "large-v3")
    distil = _random_model(DISTIL_LARGE_V3, v3, seed + 1)
    distil.model.encoder.load_state_dict(target.model.encoder.state_dict())
    del target, embeddings
    _save(distil, DISTIL_LARGE_V3, v3, folder / "distil-large-v3")
    del distil
    _save(_random_model(TINY, v2, seed + 2), TINY, v2, folder / "tiny")


def _random_model(spec: DemoModelSpec, tokenizer, seed: int) -> WhisperForConditionalGeneration:
    """transformers' own random initialisation, seeded, on a forked RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = WhisperForConditionalGeneration(build_model_config(tokenizer, spec)).eval()
    model.generation_config = build_generation_config(tokenizer, spec)
    return model


def _save(model: WhisperForConditionalGeneration, spec: DemoModelSpec, tokenizer, path: Path) -> None:
    model.save_pretrained(path)
    features = WhisperFeatureExtractor(feature_size=spec.num_mel_bins)
    WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(path)
    (path / "spec.json").write_text(json.dumps({**asdict(spec), "vocabulary": asdict(spec.vocabulary)}))
