"""app.py served in-process and driven through gradio_client, as an API user drives it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file

from specdec.app import compare_tab, uploads
from specdec.app import store as stores

CLIP = Path(__file__).parent.parent / "assets" / "de-bahnhof.wav"
SHARED_DRAFT = list(stores.DEMO_PAIRS)[1]
# fallback=False in each call: random weights fail Whisper's thresholds in every window, and the page's
# temperature fallback (on by default) would sample each one again


@pytest.fixture(scope="module")
def client(app_url) -> Client:
    return Client(app_url, verbose=False)


def test_named_endpoints(client):
    assert {"/compare", "/transcribe"} <= set(client.view_api(return_format="dict")["named_endpoints"])


def test_compare_an_uploaded_clip(client):
    reference = CLIP.with_suffix(".txt").read_text()
    outputs = client.predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "de", "transcribe", False, "fixed", 4, 0.0, 0, "sequential",
        reference, fallback=False, api_name="/compare",
    )  # fmt: skip
    *shown, windows, words = outputs  # the newer outputs come last: clients' indices of the others hold
    baseline, speculative, verdict, tokens, metrics, timeline, steps, breakdown, wer_html, details = shown
    assert baseline == speculative and "Identical" in verdict
    assert details["identical"] is True and details["language"] == "de"
    assert details["speculative"]["num_target_passes"] < details["baseline"]["num_target_passes"]
    labels = {label for _, label in details["tokens"]}
    assert {"accepted", "corrected", "rejected"} <= labels and 'class="rejected"' in tokens
    assert metrics["headers"] == ["metric", "target alone", "speculative"]
    assert all(figure["type"] == "plotly" for figure in (timeline, steps, breakdown, windows))
    assert [window["start_seconds"] for window in details["windows"]] == [0.0]
    bar, passes = json.loads(windows["plot"])["data"]
    assert (bar["x"], bar["width"]) == ([0.0], [4.61])  # the clip's one window, ending with its audio
    ends = [x + width for x, width in zip(passes["x"], passes["width"], strict=True)]
    assert passes["name"] == "target passes" and max(ends) <= 4.61  # each pass within the audio
    assert wer_html.count("WER ") == 2
    assert words == ""  # no word timestamps asked for


def test_bad_upload_is_an_error_and_the_app_keeps_serving(client, tmp_path):
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt garbage")
    with pytest.raises(Exception, match="broken.wav"):
        client.predict(handle_file(str(bad)), SHARED_DRAFT, fallback=False, api_name="/transcribe")
    text, tokens, stats, words = client.predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "de", fallback=False, api_name="/transcribe"
    )
    assert text and "specdec-tokens" in tokens and stats["speculative"]["num_generated"] > 0
    assert words == "" and stats["words"] is None  # none asked for


def test_start_up_without_models_serves_a_plain_explanation(tmp_path):
    import app

    args = app.parse_args(["--target", str(tmp_path / "missing"), "--draft", str(tmp_path / "also-missing")])
    store, load_error = app.make_store(args)
    assert load_error and "bundled pair, whisper-base ← its self-draft or ← whisper-tiny.en" in load_error
    banner = app.banner_html(store, demo_mode=False, load_error=load_error)
    assert banner.startswith('<div class="specdec-banner"') and "Traceback" not in banner


def test_host_and_port_from_flags_and_gradio_variables(monkeypatch):
    import app

    assert (app.parse_args([]).host, app.parse_args([]).port) == ("127.0.0.1", 7860)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    assert (app.parse_args([]).host, app.parse_args([]).port) == ("0.0.0.0", 7999)
    assert app.parse_args(["--port", "8000"]).port == 8000


def test_uploads_over_the_size_limit_are_refused(client, tmp_path):
    big = tmp_path / "big.wav"
    big.write_bytes(bytes(26 * 1024 * 1024))
    with pytest.raises(Exception, match="(?i)size|large|413"):
        client.predict(handle_file(str(big)), SHARED_DRAFT, fallback=False, api_name="/transcribe")


def test_help_answers_before_gradio_torch_and_the_models_load():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "app.py", "--help"],
        cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "--protect-page" in done.stdout
    imported = {
        row.rsplit("|", 1)[-1].strip() for row in done.stderr.splitlines() if row.startswith("import time:")
    }
    heavy = {
        name
        for name in imported
        if name.split(".")[0] in ("torch", "gradio", "transformers", "numpy", "specdec")
    }
    assert imported and not heavy


def test_protect_page_needs_a_key(monkeypatch):
    import app

    monkeypatch.delenv("SPECDEC_API_KEY", raising=False)
    with pytest.raises(SystemExit):
        app.parse_args(["--protect-page"])
    assert app.parse_args(["--protect-page", "--api-key", "k"]).protect_page
    assert not app.parse_args(["--api-key", "k"]).protect_page  # the page stays open unless asked


@pytest.mark.parametrize("kind", ["cut-off", "garbage", "silent", "too-long"])
def test_a_clip_is_checked_when_it_arrives_and_a_bad_one_is_named_beside_the_player(kind):

    uploads.GRADIO_CACHE.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=uploads.GRADIO_CACHE))  # where Gradio puts uploads
    clip = folder / f"{kind}.wav"
    if kind == "garbage":
        clip.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt garbage")
    elif kind == "cut-off":
        clip.write_bytes(CLIP.read_bytes()[:30])  # the header, cut inside
    else:
        seconds = 3 if kind == "silent" else 12
        samples = np.zeros(16_000 * seconds) if kind == "silent" else np.full(16_000 * seconds, 0.1)
        sf.write(clip, samples.astype(np.float32), 16_000)
    audio, note = compare_tab.checked_clip(str(clip), max_seconds=10)
    assert audio is None and not clip.exists()  # out of the box, and deleted
    assert f"{kind}.wav" in note and str(folder) not in note and "⚠️" in note
    good, note = compare_tab.checked_clip(str(CLIP), max_seconds=10)
    assert note == "" and good is not None and CLIP.exists()  # a good clip stays, and the note is emptied
