"""Pair loading: draft kinds are detected, and bad pairs are refused with a message naming the problem."""

from __future__ import annotations

import json
import shutil

import huggingface_hub
import pytest
from transformers import BertConfig, BertModel

from specdec.whisper.models import PairError, load_pair, resolve_model_name


def test_short_names_and_folders_resolve(tmp_path):
    assert resolve_model_name("large-v3") == "openai/whisper-large-v3"
    assert resolve_model_name("tiny") == "openai/whisper-tiny"
    assert resolve_model_name("distil-whisper/distil-large-v3") == "distil-whisper/distil-large-v3"
    assert resolve_model_name(str(tmp_path)) == str(tmp_path)


def test_non_whisper_model_is_refused(demo_models, tmp_path):
    BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    ).save_pretrained(tmp_path)
    with pytest.raises(PairError, match="not a Whisper model"):
        load_pair(str(demo_models["target"]), str(tmp_path), device="cpu")


def test_draft_larger_than_target_is_refused(demo_models):
    with pytest.raises(PairError, match="larger than the target"):
        load_pair(str(demo_models["draft-separate"]), str(demo_models["target"]), device="cpu")


def test_a_draft_that_cannot_spell_the_target_text_is_refused(demo_models, tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(demo_models["draft-separate"], draft)
    tokenizer_file = draft / "tokenizer.json"
    tokenizer = json.loads(tokenizer_file.read_text())
    vocab = tokenizer["model"]["vocab"]
    single = {token: i for token, i in vocab.items() if len(token) == 1}
    for token in list(single)[:100]:  # not byte-level BPE any more: some bytes have no token
        del vocab[token]
    tokenizer["model"]["merges"] = []
    tokenizer_file.write_text(json.dumps(tokenizer))
    with pytest.raises(PairError, match="not byte-level BPE"):
        load_pair(str(demo_models["target"]), str(draft), device="cpu")


def test_missing_folder_and_unreachable_hub_give_one_clear_error(monkeypatch):
    with pytest.raises(PairError, match="no model folder"):
        load_pair("./no-such-model", None, device="cpu")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # read once, at import: set the constant too (no retries)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PairError, match="demo-models"):
        load_pair("openai/whisper-this-does-not-exist", None, device="cpu")
