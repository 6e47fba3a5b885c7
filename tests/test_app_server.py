"""app.py served in-process and driven through gradio_client, as an API user drives it."""

from __future__ import annotations

from pathlib import Path

import pytest
from gradio_client import Client, handle_file

from specdec import web

CLIP = Path(__file__).parent.parent / "assets" / "de-bahnhof.wav"
SHARED_DRAFT = list(web.DEMO_DRAFTS)[1]


@pytest.fixture(scope="module")
def client(app_url) -> Client:
    return Client(app_url, verbose=False)


def test_named_endpoints(client):
    assert {"/compare", "/transcribe"} <= set(client.view_api(return_format="dict")["named_endpoints"])


def test_compare_an_uploaded_clip(client):
    reference = CLIP.with_suffix(".txt").read_text()
    outputs = client.predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "de", "transcribe", False, "fixed", 4, 0.0, 0, reference,
        api_name="/compare",
    )  # fmt: skip
    baseline, speculative, verdict, tokens, metrics, timeline, steps, breakdown, wer_html, details = outputs
    assert baseline == speculative and "Identical" in verdict
    assert details["identical"] is True and details["language"] == "de"
    assert details["speculative"]["num_target_passes"] < details["baseline"]["num_target_passes"]
    labels = {label for _, label in details["tokens"]}
    assert {"accepted", "corrected", "rejected"} <= labels and 'class="rejected"' in tokens
    assert metrics["headers"] == ["metric", "target alone", "speculative"]
    assert all(figure["type"] == "plotly" for figure in (timeline, steps, breakdown))
    assert wer_html.count("WER ") == 2


def test_bad_upload_is_an_error_and_the_app_keeps_serving(client, tmp_path):
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt garbage")
    with pytest.raises(Exception, match="broken.wav"):
        client.predict(handle_file(str(bad)), SHARED_DRAFT, api_name="/transcribe")
    text, tokens, stats = client.predict(handle_file(str(CLIP)), SHARED_DRAFT, "de", api_name="/transcribe")
    assert text and "specdec-tokens" in tokens and stats["speculative"]["num_generated"] > 0
