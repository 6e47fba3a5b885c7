"""What the app says about its models: one size per model on the page, an answer fit for API clients
when a pair cannot be loaded, and the project's files named where they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from specdec.app import compare, openai_schema
from specdec.app import store as stores
from specdec.whisper.models import LoadedModel, PairError, resolve_model_name

ROOT = Path(__file__).parent.parent


def loaded(name: str, num_parameters: int) -> LoadedModel:
    """A stand-in LoadedModel with this many parameters (on the meta device: no memory)."""
    return LoadedModel(
        name, torch.nn.Linear(num_parameters, 1, bias=False, device="meta"), None, "bundled in a package"
    )


def test_the_list_of_pairs_and_the_banner_give_a_model_one_size():
    """transformers counts whisper-base at 72.6M and tiny.en at 37.8M; the list says 74M and 39M."""
    counted = {"base": 72_593_920, "tiny.en": 37_760_256, "tiny": 37_760_640, "large-v3": 1_543_490_560}
    for label, names in stores.DEFAULT_PAIRS.items():
        shown = re.search(r"\((\d+)M ← (\d+)M", label)
        if shown is None:
            continue
        for name, size in zip(names, shown.groups(), strict=True):
            summary = stores.model_summary(loaded(resolve_model_name(name), counted[name]))
            assert summary == f"{resolve_model_name(name)} ({size}M parameters, bundled in a package)"


def test_a_model_without_a_published_size_is_counted_and_a_folder_named_by_its_name():
    assert stores.model_summary(loaded("/models/mine", 2_400_000)).startswith("mine (2M parameters")


def test_the_project_files_named_in_requirements_exist():
    named = re.findall(r"specdec/[\w/]+\.py", (ROOT / "requirements.txt").read_text())
    assert named and all((ROOT / path).is_file() for path in named)


@pytest.fixture
def offline_store(tmp_path, monkeypatch) -> stores.ModelStore:
    """large-v3 with tiny, which the hub cannot give, beside a pair of local folders, which can be had."""
    folders = [tmp_path / "whisper-small", tmp_path / "whisper-tiny"]
    for folder in folders:
        folder.mkdir()
    hub_only = {"large-v3": "openai/whisper-large-v3 is not downloaded and the hub is unreachable"}
    monkeypatch.setattr(stores, "unavailable", lambda name: hub_only.get(name))

    def load_model(name, device, dtype):
        raise PairError(f"could not load {name!r} (no connection); without network access use a local folder")

    monkeypatch.setattr(stores, "load_model", load_model)
    pairs = {"large": ("large-v3", "tiny"), "local": tuple(str(folder) for folder in folders)}
    return stores.ModelStore(pairs, device="cpu", warm_up=False)


def test_an_api_client_is_told_which_models_it_can_use(offline_store):
    request = compare.CompareRequest("clip.wav", "large", "en")
    asked = openai_schema.Asked("large-v3+tiny", request, "json", prompt="", check=False)
    with pytest.raises(openai_schema.ApiError) as info:
        openai_schema.transcribe(offline_store, asked)
    error = info.value
    assert (error.status, error.param, error.code) == (400, "model", "model_not_available")
    assert error.message == (
        "The model large-v3+tiny cannot be loaded on this server (openai/whisper-large-v3 is not downloaded "
        "and the hub is unreachable); choose one of: whisper-small+whisper-tiny."
    )
    assert "app.py" not in error.message and "--" not in error.message


def test_the_page_keeps_the_operators_hint(offline_store):
    with pytest.raises(stores.UserError, match="python app.py without --target and --draft"):
        compare.prepare(offline_store, compare.CompareRequest("clip.wav", "large", "en"))


def test_a_cuda_device_the_machine_lacks_is_a_clear_error(monkeypatch):
    """app.py --device cuda:1 on a machine with one GPU (or none): the page's banner says so, no traceback;
    the GPU's default pairs are still the ones offered."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    store = stores.ModelStore(stores.pairs_by_device("cuda:1"), device="cuda:1", warm_up=False)
    assert store.default_pair.startswith("whisper-large-v3")
    with pytest.raises(stores.UnavailablePair, match="cuda:1 is not here: this machine has 1 CUDA device"):
        store.whisper(store.default_pair)
