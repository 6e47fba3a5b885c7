"""Screenshots of a running app for the README and docs: the Compare view on a clip, and the Live view fed
by Chromium's fake microphone. Uses the system Chromium (Debian's `chromium`) through Playwright.

    python app.py &                                   # the real pair on a CPU
    python scripts/screenshots.py http://127.0.0.1:7860/ docs/images
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

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
        page.get_by_label("Reference text (optional, for WER)").fill(reference.read_text().strip())
    page.click("#run")
    page.wait_for_selector("#tokens .specdec-tokens span", timeout=300_000)
    page.wait_for_selector("#verdict .specdec-verdict")
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
    page.locator("#live-audio button.stop-button").click()
    page.wait_for_function(
        "document.querySelectorAll('#live-text span.tok.committed').length > 0 &&"
        " document.querySelectorAll('#live-text span.tok.tentative').length === 0",
        timeout=300_000,
    )
    page.wait_for_timeout(2_000)
    page.screenshot(path=str(out), full_page=True)
    print(f"{out}: {page.inner_text('#live-text')}")
    browser.close()


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
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=_chromium(), args=BROWSER_ARGS)
        compare(browser, args.url, args.clip, args.out_dir / "app-compare.png")
        browser.close()
        seconds = sf.info(args.live_clip).duration + 1.0  # one pass of the clip, then Stop
        live(driver.chromium, args.url, args.live_clip, args.out_dir / "app-live.png", seconds)


if __name__ == "__main__":
    main()
