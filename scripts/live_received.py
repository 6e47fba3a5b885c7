"""What the Live view's server receives when Chromium's fake microphone plays a clip, against the clip itself.

Serves app.py's page in this process (the demo models, or the CPU default pair with --real), records every
chunk the Live handler hands to its listener (rate, dtype, shape, arrival time), plays the clip through
headless Chromium's fake microphone for one pass, presses Stop, and compares the received audio with the
file: alignment by cross-correlation, then the lag second by second (a dropped or repeated stretch shows as
a jump), the level, the correlation and the SNR after the best gain, and the level band by band.

    python scripts/live_received.py assets/en-jfk.flac --loops 3 --out /tmp/received
    python scripts/live_received.py assets/long/en-talk.ogg --real --stream --out /tmp/talk
    python scripts/live_received.py assets/en-jfk.flac --without constraints --without transport --out /tmp/b

--real serves the CPU default pair and scores the page's committed text against the clip's .txt (WER);
--stream also decodes the file and the received audio as `specdec stream` does, in the same process;
--without serves the page as Gradio alone captures and sends the microphone (the state before the fix).

Writes OUT/received.wav (16 kHz, what the listener decoded) and OUT/report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SAMPLE_RATE = 16000  # the reference's rate, Whisper's
TAIL_SECONDS = 4.0  # silence after the clip: Stop comes within it
BANDS = [(0, 300), (300, 1000), (1000, 2000), (2000, 4000), (4000, 8000)]  # Hz, for the level per band
READ_TEXT = """() => [...document.querySelectorAll('#live-text .earlier, #live-text span.tok.committed')]
  .map((e) => e.innerText).join('')"""


def fake_microphone_wav(clip: Path, loops: int, rate: int, folder: Path) -> tuple[Path, np.ndarray]:
    """The clip `loops` times (16 kHz, as the app reads it) then TAIL_SECONDS of silence, written at `rate`
    (Chromium's fake microphone plays it in a loop); returns the file and the 16 kHz reference."""
    from specdec.audio import load_audio

    waveform = load_audio(clip, max_seconds=None)
    reference = np.concatenate([np.tile(waveform, loops), np.zeros(round(TAIL_SECONDS * SAMPLE_RATE))])
    played = reference if rate == SAMPLE_RATE else soxr.resample(reference, SAMPLE_RATE, rate, "VHQ")
    path = folder / f"{clip.stem}-{rate}.wav"
    sf.write(path, played, rate, subtype="PCM_16")
    return path, sf.read(path, dtype="float32")[0] if rate == SAMPLE_RATE else reference.astype(np.float32)


def serve(real: bool, without: set[str]) -> tuple[str, object]:
    """app.py's page on a free port (demo models or the CPU default pair); `without` leaves out parts of
    app.microphone: "constraints" (the raw signal), "transport" (the chunks in order, none replaced)."""
    import app
    from specdec.app import microphone
    from specdec.app import store as stores
    from specdec.whisper.demo import build_demo_models

    app.PAGE_JS = "".join(
        js
        for part, js in (("constraints", microphone.RAW_SIGNAL_JS), ("transport", microphone.IN_ORDER_JS))
        if part not in without
    )
    if "transport" in without:
        app.StreamInOrder = lambda inner: inner  # no middleware
    if real:
        store = stores.ModelStore(stores.pairs_by_device("cpu"), "cpu")
    else:
        folder = build_demo_models(Path(tempfile.mkdtemp()) / "demo")["target"].parent
        store = stores.ModelStore(stores.demo_pairs(folder), device="cpu")
    store.whisper(store.default_pair)
    demo = app.build_demo(store, app.banner_html(store, demo_mode=not real, load_error=None))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.launch(demo, port=port, block=False)
    return f"http://127.0.0.1:{port}/", store


def record_chunks() -> list[dict]:
    """Every chunk a listener hears from now on: its rate, samples and arrival time."""
    from specdec.app import live

    chunks: list[dict] = []
    lock = threading.Lock()
    hear = live.Listener.hear

    def recorded(listener, rate, samples):
        with lock:
            chunks.append({"rate": rate, "samples": np.array(samples), "at": time.monotonic()})
        return hear(listener, rate, samples)

    live.Listener.hear = recorded
    return chunks


def play(url: str, wav: Path, seconds: float, browser_args: list[str]) -> str:
    """Record `seconds` of the fake microphone in the Live tab, press Stop; the committed text."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    fake = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=chromium,
            args=[*args, *fake, f"--use-file-for-fake-audio-capture={wav}", *browser_args],
        )
        context = browser.new_context(viewport={"width": 1400, "height": 1100}, permissions=["microphone"])
        page = context.new_page()
        page.goto(url)
        page.get_by_role("tab", name="Live").click()
        page.locator("#live-audio button.record-button").click()
        page.wait_for_timeout(seconds * 1000)
        page.locator("#live-audio button.stop-button").click()
        page.wait_for_function(
            "document.querySelectorAll('#live-text span.tok.tentative').length === 0"
            " && !document.querySelector('#live-stats .specdec-activity')",
            timeout=900_000,
        )
        page.wait_for_timeout(1_000)
        text = page.evaluate(READ_TEXT)
        browser.close()
    return text


def chunk_positions(chunks: list[np.ndarray], reference: np.ndarray) -> list[int | None]:
    """Where each chunk starts in the reference played in a loop (same rate; None for a quiet chunk): the
    best match, where several are as good (a looped clip) the one nearest to where the chunk before ended."""
    period = len(reference)
    longest = max(len(chunk) for chunk in chunks)
    looped = np.concatenate([reference, reference[:longest]]).astype(np.float64)
    size = 1 << int(np.ceil(np.log2(len(looped) + longest)))
    spectrum = np.fft.rfft(looped, size)
    energy = np.concatenate([[0.0], np.cumsum(looped**2)])
    positions: list[int | None] = []
    expected = None
    for chunk in chunks:
        chunk = chunk.astype(np.float64)
        if np.sqrt(np.mean(chunk**2)) < 3e-3:
            positions.append(None)
            expected = None if expected is None else (expected + len(chunk)) % period
            continue
        scores = np.fft.irfft(spectrum * np.conj(np.fft.rfft(chunk, size)), size)[:period]
        window = np.sqrt(np.maximum(energy[len(chunk) : period + len(chunk)] - energy[:period], 1e-5))
        matches = scores / (window * np.linalg.norm(chunk))
        candidates = np.flatnonzero(matches > 0.9 * matches.max())
        if expected is None:
            position = int(candidates[0])
        else:
            distance = np.abs((candidates - expected + period // 2) % period - period // 2)
            position = int(candidates[np.argmin(distance)])
        positions.append(position)
        expected = (position + len(chunk)) % period
    return positions


def band_levels(audio: np.ndarray, rate: int) -> list[float]:
    """The level (dB) of each of BANDS."""
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1 / rate)
    return [float(10 * np.log10(spectrum[(freqs >= lo) & (freqs < hi)].sum() + 1e-20)) for lo, hi in BANDS]


def compare(chunks: list[np.ndarray], rate: int, reference: np.ndarray) -> dict:
    """The received chunks (mono, at their own rate) against the reference (16 kHz, resampled to that rate):
    where one does not start where the one before ended (audio lost, repeated or swapped), and over the
    longest stretch without such a jump the correlation, level, SNR after the best gain and level per band."""
    sixteen_khz = reference
    reference = soxr.resample(reference, SAMPLE_RATE, rate, "VHQ") if rate != SAMPLE_RATE else reference
    period = len(reference)
    positions = chunk_positions(chunks, reference)
    jumps, stretches, first, offset = [], [], 0, 0  # stretches: (first, last) chunk indices
    expected = None
    for index, (chunk, position) in enumerate(zip(chunks, positions, strict=True)):
        if position is not None and expected is not None:
            jump = (position - expected + period // 2) % period - period // 2
            if abs(jump) > 8:  # a few samples: Chromium's resampling
                jumps.append({"chunk": index, "second": round(offset / rate, 2), "jump_seconds": jump / rate})
                stretches.append((first, index - 1))
                first = index
        if position is not None:
            expected = position + len(chunk)
        elif expected is not None:
            expected += len(chunk)
        offset += len(chunk)
    stretches.append((first, len(chunks) - 1))
    start, last = max(stretches, key=lambda stretch: sum(len(c) for c in chunks[stretch[0] : stretch[1] + 1]))
    received = np.concatenate(chunks[start : last + 1]).astype(np.float64)
    ends = np.cumsum([0] + [len(chunk) for chunk in chunks[start:last]])
    placed = zip(positions[start : last + 1], ends, strict=True)
    begins = [position - end for position, end in placed if position is not None]
    base = begins[0]  # the stretch's start in the reference: the median over its chunks (one may be off)
    begin = base + int(np.median([(b - base + period // 2) % period - period // 2 for b in begins]))
    # at 16 kHz, where the reference was made: the stretch's start refined to the sample
    received = soxr.resample(received, rate, SAMPLE_RATE, "HQ")
    looped = np.tile(sixteen_khz, 3 + len(received) // len(sixteen_khz))
    guess = round(begin * SAMPLE_RATE / rate) % len(sixteen_khz) + len(sixteen_khz)
    middle = slice(len(received) // 4, len(received) * 3 // 4)  # clear of the resampler's edges
    shift = max(range(-8, 9), key=lambda s: received[middle] @ looped[guess + s :][middle])
    expected_audio = looped[guess + shift :][: len(received)]
    received, expected_audio = received[middle], expected_audio[middle]
    rate = SAMPLE_RATE
    speech = np.abs(expected_audio) > 1e-3
    gain = float(received @ expected_audio / (expected_audio @ expected_audio))
    rms = lambda x: float(np.sqrt(np.mean(x**2)))  # noqa: E731
    return {
        "jumps": jumps,  # + : audio skipped (lost), - : audio played again (repeated, or swapped chunks)
        # chunk-sized skips; longer jumps are chunks matched to the wrong pass of a looped clip
        "lost_seconds": round(sum(jump["jump_seconds"] for jump in jumps if 0 < jump["jump_seconds"] < 2), 3),
        "compared_seconds": round(len(received) / rate, 2),  # the middle half of the longest stretch
        "correlation": round(float(np.corrcoef(received, expected_audio)[0, 1]), 5),
        "best_gain_db": round(20 * np.log10(abs(gain)), 2),
        "level_db": round(20 * np.log10(rms(received[speech]) / rms(expected_audio[speech])), 2),
        "snr_db": round(20 * np.log10(rms(gain * expected_audio) / rms(received - gain * expected_audio)), 2),
        "band_level_db": {
            f"{lo}-{hi} Hz": round(r - f, 2)
            for (lo, hi), r, f in zip(
                BANDS, band_levels(received, rate), band_levels(expected_audio, rate), strict=True
            )
        },
    }


def streamed_wer(store, audio: np.ndarray, text: str) -> dict:
    """`specdec stream`'s decoding of `audio` (16 kHz) with the page's settings: its WER against `text`."""
    from specdec.streaming.playback import stream_audio
    from specdec.streaming.session import StreamOptions
    from specdec.wer import word_errors

    whisper = store.whisper(store.default_pair)
    final = list(stream_audio(whisper, audio, StreamOptions()))[-1]
    return {"wer": round(word_errors(text, final.committed_text).wer, 4), "text": final.committed_text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clip", type=Path)
    parser.add_argument("--loops", type=int, default=1, help="the clip this many times in a row")
    parser.add_argument("--rate", type=int, default=48000, help="the fake microphone file's sample rate")
    parser.add_argument("--real", action="store_true", help="the CPU default pair (else the demo models)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=["constraints", "transport"],
        help="serve the page without this part of app.microphone (as Gradio alone captures and sends)",
    )
    parser.add_argument(
        "--stream", action="store_true", help="also `specdec stream` the file and the received"
    )
    parser.add_argument("--browser-arg", action="append", default=[], help="one more Chromium flag")
    args = parser.parse_args()
    os.environ.setdefault("GRADIO_TEMP_DIR", tempfile.mkdtemp(prefix="specdec-received-"))
    args.out.mkdir(parents=True, exist_ok=True)
    from specdec.audio import to_mono
    from specdec.wer import word_errors

    wav, reference = fake_microphone_wav(args.clip, args.loops, args.rate, args.out)
    url, store = serve(args.real, set(args.without))
    chunks = record_chunks()
    seconds = len(reference) / SAMPLE_RATE - TAIL_SECONDS / 2  # one pass, Stop within the silence
    text = play(url, wav, seconds, args.browser_arg)
    rates = sorted({chunk["rate"] for chunk in chunks})
    if len(rates) != 1:
        raise SystemExit(f"chunks at several rates: {rates}")
    np.savez(
        args.out / "chunks.npz",
        *[chunk["samples"] for chunk in chunks],
        at=np.array([chunk["at"] for chunk in chunks]),
        reference=reference,
    )
    raw = [to_mono("chunk", chunk["samples"]) for chunk in chunks]
    received = soxr.resample(np.concatenate(raw), rates[0], SAMPLE_RATE, "HQ")
    sf.write(args.out / "received.wav", received, SAMPLE_RATE, subtype="FLOAT")
    gaps = np.diff([chunk["at"] for chunk in chunks])
    script = " ".join([args.clip.with_suffix(".txt").read_text().strip()] * args.loops)
    report = {
        "clip": str(args.clip),
        "loops": args.loops,
        "fake_microphone_rate": args.rate,
        "without": args.without,
        "browser_args": args.browser_arg,
        "chunks": len(chunks),
        "rate": rates[0],
        "dtype": str(chunks[0]["samples"].dtype),
        "shapes": sorted({str(chunk["samples"].shape[1:]) for chunk in chunks}),
        "chunk_seconds": sorted({round(len(c) / rates[0], 3) for c in raw}),
        "seconds_between_chunks": {"median": float(np.median(gaps)), "max": float(gaps.max())},
        "received_seconds": round(len(received) / SAMPLE_RATE, 2),
        "recorded_seconds": round(seconds, 2),
        "vs_file": compare(raw, rates[0], reference),
        "page": {"wer": round(word_errors(script, text).wer, 4), "text": text},
    }
    if args.stream:
        report["stream_file"] = streamed_wer(store, reference, script)
        report["stream_received"] = streamed_wer(store, received, script)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
