"""A public page shows no server path: models are named by their names, whether the server was started on
folders (`python app.py --target /srv/models/x --draft ...`) or not. Checked on everything the page
renders from the store and from a run, on the demo models in a temporary folder: the banner, the pair
list, a pair that cannot load (its error and the banner that says so), the page's own config (every label
and value the browser gets), and a comparison's badge, metrics, details and downloadable JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import app
from specdec.app import compare, served, views
from specdec.app import store as stores

CLIP = str(Path(__file__).parent.parent / "assets" / "en-fellow-americans.wav")


@pytest.fixture(scope="module")
def folders(demo_models, tmp_path_factory) -> tuple[str, ...]:
    """The server folders no page may show: the models' and a missing model's."""
    return str(demo_models["target"].parent), str(tmp_path_factory.mktemp("server-only"))


@pytest.fixture(scope="module")
def store(demo_models, folders) -> stores.ModelStore:
    target, drafts = str(demo_models["target"]), [str(demo_models["draft-shared"])]
    missing = str(Path(folders[1]) / "whisper-gone")
    pairs = {**stores.pairs_for(target, drafts), **stores.pairs_for(missing, drafts)}
    store = stores.ModelStore(pairs, device="cpu")
    store.whisper(store.default_pair)
    return store


def assert_no_path(text: str, folders: tuple[str, ...]) -> None:
    shown = [folder for folder in folders if folder in text]
    assert not shown, f"{shown} in {text[:2000]}"


def test_the_page_names_models_by_name(store, folders, demo_models):
    banner = app.banner_html(store, demo_mode=False, load_error=None)
    assert "target" in banner and "draft-shared" in banner
    assert_no_path(banner, folders)
    assert all("←" in label for label in store.pairs)
    assert_no_path(json.dumps(store.choices()), folders)
    served = dict(app.STORES), dict(app.JOBS)
    try:
        config = json.dumps(app.build_demo(store, banner).config, default=str)
    finally:  # building a page serves its store: the session's page (conftest's app_url) gets its own back
        app.STORES.update(served[0])
        app.JOBS.update(served[1])
    assert_no_path(config, folders)


def test_an_error_names_no_server_path(store, folders):
    missing = list(store.pairs)[-1]
    with pytest.raises(stores.UnavailablePair) as refused:
        store.whisper(missing)
    assert "whisper-gone" in str(refused.value)
    assert_no_path(served.user_error(refused.value).message, folders)
    assert_no_path(app.banner_html(store, demo_mode=False, load_error=str(refused.value)), folders)


def test_a_runs_outputs_name_no_server_path(store, folders, tmp_path):
    request = compare.CompareRequest(CLIP, store.default_pair, "en", timestamps=True, reference="and so")
    view = compare.compare_clip(store, request)
    shown = [view.verdict_html, view.tokens_html, view.wer_html, json.dumps(view.metrics)]
    shown.append(json.dumps(views.details(view)))
    shown += [Path(path).read_text() for path in view.comparison.speculative.save(tmp_path, ("json", "srt"))]
    assert_no_path("\n".join(shown), folders)
