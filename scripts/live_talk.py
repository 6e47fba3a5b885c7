"""A long talk played into the Live view through Chromium's fake microphone, read off the page as it goes:
every few seconds the words committed and tentative and the status line's figures, then the final text
against what was read, and a screenshot. Uses the system Chromium (Debian's `chromium`) through Playwright.

    python app.py &                                   # the real pair on a CPU
    python scripts/live_talk.py http://127.0.0.1:7860/ docs/images --clip assets/long/en-talk.ogg
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from playwright.sync_api import sync_playwright
from screenshots import BROWSER_ARGS, _chromium, stop_and_wait  # scripts/, beside this file

from specdec.audio import load_audio
from specdec.wer import word_errors

ROOT = Path(__file__).resolve().parent.parent
TAIL_SECONDS = 10  # silence after the clip: Stop comes within it
READ_PAGE = """() => {
  const texts = (selector) => [...document.querySelectorAll(selector)].map((e) => e.innerText).join('');
  return {
    earlier: texts('#live-text .earlier'),
    committed: texts('#live-text span.tok.committed'),
    tentative: texts('#live-text span.tok.tentative'),
    stats: (document.querySelector('#live-stats') || {innerText: ''}).innerText,
  };
}"""


def as_wav(clip: Path) -> Path:
    """The clip as a 16 kHz 16-bit WAV, which Chromium's fake microphone plays (in a loop: TAIL_SECONDS of
    silence after it keep the replay out of the recording)."""
    out = Path(tempfile.mkdtemp()) / f"{clip.stem}.wav"
    waveform = load_audio(clip, max_seconds=None)
    sf.write(
        out, np.concatenate([waveform, np.zeros(TAIL_SECONDS * 16000, np.float32)]), 16000, subtype="PCM_16"
    )
    return out


def words(text: str) -> int:
    return len(text.split())


def sample(page, started: float) -> dict:
    """What the page shows now: seconds since Record, words committed and tentative, the status figures."""
    shown = page.evaluate(READ_PAGE)
    behind = re.search(r"text (\d+\.\d) s behind live", shown["stats"])
    decode = re.search(r"decoded in (\d+) ms", shown["stats"])
    return {
        "seconds": round(time.monotonic() - started, 1),
        "committed_words": words(shown["earlier"] + shown["committed"]),
        "tentative_words": words(shown["tentative"]),
        "behind_live_seconds": float(behind.group(1)) if behind else None,
        "last_update_ms": int(decode.group(1)) if decode else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--clip", type=Path, default=ROOT / "assets" / "long" / "en-talk.ogg")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between readings of the page")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    wav = as_wav(args.clip)
    duration = sf.info(wav).duration - TAIL_SECONDS
    script = args.clip.with_suffix(".txt").read_text()
    fake_microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    ]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(args=[*BROWSER_ARGS, *fake_microphone], executable_path=_chromium())
        context = browser.new_context(viewport={"width": 1400, "height": 1300}, permissions=["microphone"])
        page = context.new_page()
        page.goto(args.url)
        page.get_by_role("tab", name="Live").click()
        page.locator("#live-audio button.record-button").click()
        started, readings = time.monotonic(), []
        while time.monotonic() - started < duration + TAIL_SECONDS / 2:  # one pass of the clip, then Stop
            page.wait_for_timeout(args.every * 1000)
            readings.append(sample(page, started))
            spoken = words(script) * min(readings[-1]["seconds"] / duration, 1.0)
            print(json.dumps({**readings[-1], "spoken_words": round(spoken)}), flush=True)
        stop_and_wait(page)
        page.screenshot(path=str(args.out_dir / "app-live-talk.png"), full_page=True)
        final = page.evaluate(READ_PAGE)
        stats = final["stats"]
        browser.close()
    text = final["earlier"] + final["committed"]
    report = {
        "clip": str(args.clip),
        "seconds": duration,
        "readings": readings,
        "final_text": text,
        "wer_against_script": word_errors(script, text).wer,
        "status": stats,
    }
    (args.out_dir / "live-talk.json").write_text(json.dumps(report, indent=1))
    print(f"WER against what was read: {report['wer_against_script']:.3f}\n{stats}")


if __name__ == "__main__":
    main()
