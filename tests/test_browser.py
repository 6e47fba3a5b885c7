"""One real browser: headless Chromium opens the page, uploads a clip, runs, and sees the coloured tokens;
with word timestamps, a click on a word plays the clip from it.

Uses the system Chromium (Debian's `chromium`, installed by scripts/install-test-deps.sh); nothing
is downloaded.
Set SPECDEC_SCREENSHOTS=DIR to keep the screenshot.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import traceback
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CLIP = Path(__file__).parent.parent / "assets" / "en-fellow-americans.wav"
NO_CHROMIUM = "no system Chromium (scripts/install-test-deps.sh installs it)"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)


def test_upload_run_and_see_highlighted_tokens(app_url, demo_models, tmp_path):
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        # the empty page's legend is styled (swatches, not "acceptedcorrectedbonus...")
        page.wait_for_selector("#tokens .specdec-legend span")
        legend_display = page.eval_on_selector(
            "#tokens .specdec-legend span", "element => getComputedStyle(element).display"
        )
        page.locator("input[type=file]").first.set_input_files(str(CLIP))
        page.wait_for_selector("audio, .waveform-container, [data-testid^='waveform-Audio']")
        # random weights fail Whisper's thresholds in every window: the fallback would sample each again
        page.get_by_label("Temperature fallback against loops").uncheck()
        page.click("#run")
        page.wait_for_selector("#tokens .specdec-tokens span.accepted", timeout=120_000)
        page.wait_for_selector("#verdict .specdec-verdict")
        verdict = page.inner_text("#verdict")
        tokens = page.locator("#tokens .specdec-tokens span")
        page_text = page.inner_text("body")
        # every metric in view without scrolling inside the table, the chosen pair's name whole
        metrics = page.eval_on_selector(  # the elements that scroll (a cell's spacer rows have no height)
            "#metrics",
            "table => [...table.querySelectorAll('*')].filter(e => e.clientHeight > 0 && e.scrollHeight >"
            " e.clientHeight + 1 && getComputedStyle(e).overflowY !== 'visible').map(e => e.className)",
        )
        table = page.inner_text("#metrics")
        pair = page.get_by_label("Models: target ← draft").first
        pair = pair.evaluate("input => [input.scrollWidth, input.clientWidth]")
        screenshot = tmp_path / "compare.png"
        page.screenshot(path=str(screenshot), full_page=True)
        count, rejected = tokens.count(), page.locator("#tokens span.rejected").count()
        # speculative only, after a comparison: nothing of the comparison may stay beside the new text
        page.get_by_label("Word timestamps").check()
        page.get_by_role("button", name="Transcribe (speculative only)").click()
        page.wait_for_function("document.querySelector('#verdict').innerText.trim() === ''")
        page.wait_for_selector("#tokens .specdec-tokens span.accepted", timeout=120_000)
        after = {name: page.inner_text(f"#{name}") for name in ("verdict", "wer", "baseline-text")}
        # timed words: a click on one plays the clip from its start, and it is highlighted while it plays
        word = page.locator("#words .specdec-word").nth(2)
        start = float(word.get_attribute("data-start"))
        word.click()
        page.wait_for_selector("#words .specdec-word.playing", timeout=10_000)
        position = page.eval_on_selector("#words audio.specdec-player", "player => player.currentTime")
        browser.close()
    assert start <= position < start + 5
    assert metrics == [] and "ran first" in table, metrics  # every row of views.metrics_rows, the last too
    assert pair[0] <= pair[1], pair  # the dropdown's text fits its box
    assert str(demo_models["target"].parent) not in page_text  # no server path on the page
    assert legend_display == "inline-block"
    assert "Identical" in verdict
    assert count > 5 and rejected > 0
    assert after["verdict"].strip() == "" and "WER" not in after["wer"], after
    assert screenshot.stat().st_size > 10_000
    _keep(screenshot, "compare.png")


def _what_the_server_was_doing(page, heard: list[str]) -> str:
    """The page's messages and status, whether it is recording, what it sent and logged (`heard`), and
    where each of the app's threads is (the server runs in this process), for a failure that would
    otherwise say only that nothing came."""
    toasts = page.eval_on_selector_all(".toast-body, .toast-wrap", "nodes => nodes.map(n => n.innerText)")
    stack = {
        thread.name: "".join(traceback.format_stack(sys._current_frames()[thread.ident])[-4:])
        for thread in threading.enumerate()
        if thread.name.startswith("specdec") and thread.ident in sys._current_frames()
    }
    recording = page.locator("#live-audio button.stop-button").is_visible()
    sent = [line for line in heard if "stream" in line or "queue" in line][-8:]
    logged = [line for line in heard if line.startswith("console")][-8:]
    return (
        f"toasts {toasts}, status {page.inner_text('#live-stats')!r}, recording {recording}, "
        f"{len(sent)} stream requests (the last: {sent}), console {logged}, threads {stack}"
    )


def _keep(screenshot: Path, name: str) -> None:
    """Copy a screenshot into SPECDEC_SCREENSHOTS (made if missing), when set."""
    if os.environ.get("SPECDEC_SCREENSHOTS"):
        folder = Path(os.environ["SPECDEC_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, folder / name)


def test_live_tab_streams_a_fake_microphone_and_commits_text(app_url, tmp_path):
    """Chromium's fake microphone plays a clip into the Live tab; text appears while recording, and
    after Stop all of it is committed."""
    clip = CLIP.parent / "en-weather.wav"
    fake_microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={clip}",
    ]
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                *fake_microphone,
            ],
        )
        context = browser.new_context(viewport={"width": 1400, "height": 1100}, permissions=["microphone"])
        page = context.new_page()
        heard: list[str] = []  # the page's requests and console lines, for a failure's message
        page.on("request", lambda sent: heard.append(f"{sent.method} {sent.url}"))
        page.on("console", lambda line: heard.append(f"console {line.type}: {line.text[:200]}"))
        page.goto(app_url)
        page.get_by_role("tab", name="Live").click()
        page.wait_for_function("window.specdecMicrophoneLine === true")  # the tab's page script ran
        page.locator("#live-audio button.record-button").click()
        try:
            # an update arrived while recording (a loaded machine can take a minute to the first)
            page.wait_for_selector("#live-text span.tok", timeout=120_000)
        except playwright.TimeoutError:
            pytest.fail(f"no update shown while recording: {_what_the_server_was_doing(page, heard)}")
        page.wait_for_timeout(1_000)
        page.screenshot(path=str(tmp_path / "live-recording.png"), full_page=True)
        page.locator("#live-audio button.stop-button").click()
        page.wait_for_function(
            "document.querySelectorAll('#live-text span.tok.committed').length > 0 &&"
            " document.querySelectorAll('#live-text span.tok.tentative').length === 0",
            timeout=60_000,
        )
        page.screenshot(path=str(tmp_path / "live-stopped.png"), full_page=True)
        stats = page.inner_text("#live-stats")
        browser.close()
    assert "target passes" in stats and "behind live" in stats
    for name in ("live-recording.png", "live-stopped.png"):
        _keep(tmp_path / name, name)
