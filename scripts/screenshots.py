"""Screenshots of a running app for the README and docs: the Compare view on a clip (with timestamps, so the
subtitle downloads show), and the Live view fed by Chromium's fake microphone with noise before and
after the speech (the VAD's noise bands). Uses the system Chromium (Debian's `chromium`) through
Playwright; Debian's `fonts-noto-color-emoji` draws the badges' emoji.

    python app.py &                                   # the real pair on a CPU
    python scripts/screenshots.py http://127.0.0.1:7860/ docs/images
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from playwright.sync_api import sync_playwright

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def compare(browser, url: str, clip: Path, out: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.locator("input[type=file]").first.set_input_files(str(clip))
    page.wait_for_selector("audio, .waveform-container, [data-testid^='waveform-Audio']")
    reference = clip.with_suffix(".txt")
    if reference.exists():
        page.get_by_label("Reference text (optional, for WER").fill(reference.read_text().strip())
    page.get_by_label("Timestamps", exact=True).check()
    page.click("#run")
    page.wait_for_selector("#tokens .specdec-tokens span", timeout=300_000)
    page.wait_for_selector("#verdict .specdec-verdict")
    page.wait_for_selector("#download-srt", state="visible")
    page.wait_for_timeout(2_000)  # the plots draw after the tokens
    page.screenshot(path=str(out), full_page=True)
    print(f"{out}: {page.inner_text('#verdict')}")


def live(browser_type, url: str, clip: Path, out: Path, seconds: float) -> None:
    fake_microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={clip}",
    ]
    browser = browser_type.launch(executable_path=_chromium(), args=[*BROWSER_ARGS, *fake_microphone])
    context = browser.new_context(viewport={"width": 1400, "height": 1100}, permissions=["microphone"])
    page = context.new_page()
    page.goto(url)
    page.get_by_role("tab", name="Live").click()
    page.locator("#live-audio button.record-button").click()
    page.wait_for_timeout(seconds * 1000)  # Chromium's fake microphone plays the clip in a loop
    stop_and_wait(page)
    page.screenshot(path=str(out), full_page=True)
    print(f"{out}: {page.inner_text('#live-text')}")
    browser.close()


def stop_and_wait(page) -> None:
    """Press the Live view's Stop and wait until its text is all committed (and drawn)."""
    page.locator("#live-audio button.stop-button").click()
    page.wait_for_function(
        "document.querySelectorAll('#live-text span.tok.committed').length > 0 &&"
        " document.querySelectorAll('#live-text span.tok.tentative').length === 0",
        timeout=300_000,
    )
    page.wait_for_timeout(2_000)


def with_noise(clip: Path, seconds: float, level_dbfs: float = -30.0) -> Path:
    """The clip with seeded white noise (well above the -45 dBFS silence gate) before and after it, as a
    16-bit WAV for Chromium's fake microphone."""
    speech, rate = sf.read(clip, dtype="float32", always_2d=True)
    noise = np.random.default_rng(0).standard_normal((round(seconds * rate), 1)).astype(np.float32)
    noise *= 10 ** (level_dbfs / 20) / np.sqrt(np.mean(noise**2))
    out = Path(tempfile.mkdtemp()) / f"{clip.stem}-noise.wav"
    sf.write(out, np.concatenate([noise, speech.mean(axis=1, keepdims=True), noise]), rate, subtype="PCM_16")
    return out


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("no system Chromium: apt-get install chromium")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--clip", type=Path, default=ASSETS / "en-jfk.flac", help="for the Compare view")
    parser.add_argument("--live-clip", type=Path, default=ASSETS / "en-weather.wav", help="a WAV file")
    parser.add_argument("--noise-seconds", type=float, default=3.0, help="noise around the live clip")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=_chromium(), args=BROWSER_ARGS)
        compare(browser, args.url, args.clip, args.out_dir / "app-compare.png")
        browser.close()
        live_clip = with_noise(args.live_clip, args.noise_seconds)
        seconds = sf.info(live_clip).duration + 1.0  # one pass of the clip, then Stop
        live(driver.chromium, args.url, live_clip, args.out_dir / "app-live.png", seconds)


if __name__ == "__main__":
    main()
