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
SEARCH_SECONDS = 2.0  # how far from where the chunk before ended a chunk is looked for
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
    from specdec.app import live_tab, microphone
    from specdec.app import store as stores
    from specdec.whisper.demo import build_demo_models

    live_tab.PAGE_JS = "".join(
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


def best_match(piece: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalised cross-correlation of `piece` at every offset in `window` (FFT), and those offsets."""
    size = 1 << int(np.ceil(np.log2(len(window) + len(piece))))
    scores = np.fft.irfft(np.fft.rfft(window, size) * np.conj(np.fft.rfft(piece, size)), size)
    offsets = np.arange(len(window) - len(piece) + 1)
    energy = np.concatenate([[0.0], np.cumsum(window**2)])
    norms = np.sqrt(np.maximum(energy[offsets + len(piece)] - energy[offsets], 1e-5)) * np.linalg.norm(piece)
    return scores[offsets] / norms, offsets


def chunk_positions(chunks: list[np.ndarray], reference: np.ndarray, rate: int) -> list[int | None]:
    """Where each chunk starts in the reference played in a loop (same rate; None for a quiet chunk): the
    first found anywhere, each later one within SEARCH_SECONDS of where the chunk before it ended."""
    period, search = len(reference), round(SEARCH_SECONDS * rate)
    positions: list[int | None] = []
    expected = None
    for chunk in chunks:
        chunk = chunk.astype(np.float64)
        if np.sqrt(np.mean(chunk**2)) < 3e-3:
            positions.append(None)
            expected = None if expected is None else (expected + len(chunk)) % period
            continue
        if expected is None:
            window_start, window = 0, np.concatenate([reference, reference[: len(chunk)]])
        else:
            window_start = expected - search
            indices = np.arange(window_start, expected + search + len(chunk)) % period
            window = reference[indices]
        matches, offsets = best_match(chunk, window.astype(np.float64))
        position = (window_start + int(offsets[np.argmax(matches)])) % period
        positions.append(position)
        expected = (position + len(chunk)) % period
    return positions


def band_levels(audio: np.ndarray, rate: int) -> list[float]:
    """The level (dB) of each of BANDS."""
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1 / rate)
    return [float(10 * np.log10(spectrum[(freqs >= lo) & (freqs < hi)].sum() + 1e-20)) for lo, hi in BANDS]


def figures(received: np.ndarray, expected: np.ndarray) -> dict:
    """Received against expected audio (16 kHz, aligned): correlation, gain, level, SNR, level per band."""
    received, expected = received.astype(np.float64), expected.astype(np.float64)
    speech = np.abs(expected) > 1e-3
    gain = float(received @ expected / (expected @ expected))
    rms = lambda x: float(np.sqrt(np.mean(x**2)))  # noqa: E731
    bands = zip(BANDS, band_levels(received, SAMPLE_RATE), band_levels(expected, SAMPLE_RATE), strict=True)
    return {
        "seconds": round(len(received) / SAMPLE_RATE, 2),
        "correlation": round(float(np.corrcoef(received, expected)[0, 1]), 5),
        "best_gain_db": round(20 * np.log10(abs(gain)), 2),
        "level_db": round(20 * np.log10(rms(received[speech]) / rms(expected[speech])), 2),
        "snr_db": round(20 * np.log10(rms(gain * expected) / rms(received - gain * expected)), 2),
        "band_level_db": {f"{lo}-{hi} Hz": round(r - f, 2) for (lo, hi), r, f in bands},
    }


def aligned(received: np.ndarray, reference: np.ndarray, near: int | None = None) -> np.ndarray:
    """The stretch of `reference` (looped, as the fake microphone plays it) that lines up best with `received`
    as a whole (within 8 samples of `near`, where given)."""
    looped = np.tile(reference, 3 + len(received) // len(reference))[: 2 * len(reference) + len(received)]
    if near is None:
        size = 1 << int(np.ceil(np.log2(len(looped) + len(received))))
        scores = np.fft.irfft(np.fft.rfft(looped, size) * np.conj(np.fft.rfft(received, size)), size)
        start = int(np.argmax(scores[: len(reference)]))
    else:
        near = near % len(reference) + len(reference)
        start = max(range(near - 8, near + 9), key=lambda s: received @ looped[s : s + len(received)])
    return looped[start : start + len(received)]


def compare(chunks: list[np.ndarray], rate: int, reference: np.ndarray) -> dict:
    """The received chunks (mono, at their own rate) against the reference (16 kHz): the figures of all of
    it at one alignment (from 0.2 s on: Gradio's page drops the chunks that come while the stream opens);
    where a chunk does not start where the one before ended (audio lost, repeated or swapped: reliable on
    the raw signal only); the figures of the longest stretch without such a jump."""
    received = soxr.resample(np.concatenate(chunks), rate, SAMPLE_RATE, "HQ")[SAMPLE_RATE // 5 :]
    report = {"whole": figures(received, aligned(received, reference))}
    at_rate = soxr.resample(reference, SAMPLE_RATE, rate, "VHQ") if rate != SAMPLE_RATE else reference
    period = len(at_rate)
    positions = chunk_positions(chunks, at_rate, rate)
    jumps, stretches, first, offset, expected = [], [], 0, 0, None  # stretches: (first, last) chunk
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

    def heard(stretch: tuple[int, int]) -> int:  # samples of its chunks that are not quiet
        return sum(len(chunks[i]) for i in range(stretch[0], stretch[1] + 1) if positions[i] is not None)

    start, last = max(stretches, key=heard)
    ends = np.cumsum([0] + [len(chunk) for chunk in chunks[start:last]])
    placed = zip(positions[start : last + 1], ends, strict=True)
    begins = [position - end for position, end in placed if position is not None]
    base = begins[0]  # the stretch's start in the reference: the median over its chunks (one may be off)
    begin = base + int(np.median([(b - base + period // 2) % period - period // 2 for b in begins]))
    stretch = soxr.resample(np.concatenate(chunks[start : last + 1]), rate, SAMPLE_RATE, "HQ")
    middle = slice(len(stretch) // 4, len(stretch) * 3 // 4)  # clear of the resampler's edges
    near = round(begin * SAMPLE_RATE / rate) + middle.start
    report["jumps"] = jumps  # + : audio skipped (lost), - : audio played again (repeated, or swapped)
    # chunk-sized skips; longer jumps are chunks matched to the wrong pass of a looped clip
    report["lost_seconds"] = round(sum(j["jump_seconds"] for j in jumps if 0 < j["jump_seconds"] < 2), 3)
    report["longest_stretch"] = figures(stretch[middle], aligned(stretch[middle], reference, near))
    return report


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
    (args.out / "page.txt").write_text(text)
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
