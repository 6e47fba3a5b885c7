"""specdec web demo (minimal page until the full Compare view lands): transcribe with and without a draft.

python app.py                 # whisper-large-v3 with whisper-tiny (needs the hub or its cache)
python app.py --demo-models   # offline: random-weight demo checkpoints, transcripts are meaningless
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import gradio as gr

from specdec.audio import AudioError
from specdec.models import PairError, load_pair
from specdec.options import DecodeOptions
from specdec.transcriber import SpeculativeWhisper

DEMO_CACHE = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec")) / "demo-models"
_whisper: SpeculativeWhisper | None = None


def demo_model_paths() -> dict[str, Path]:
    """The random-weight demo pair, built on first use into the cache folder."""
    from specdec.demo_models import build_demo_models

    if not (DEMO_CACHE / "draft-separate" / "config.json").exists():
        return build_demo_models(DEMO_CACHE)
    return {name: DEMO_CACHE / name for name in ("target", "draft-separate", "draft-shared")}


def transcribe(audio: str | None, language: str) -> tuple[str, str, str, dict]:
    """Speculative and target-only transcripts of one clip, whether they are identical, and statistics."""
    if audio is None:
        raise gr.Error("Record or upload a clip first.")
    options = DecodeOptions(language=None if language == "auto" else language)
    try:
        speculative = _whisper.transcribe_one(audio, options)
        baseline = _whisper.transcribe_one(audio, options, speculative=False)
    except AudioError as error:
        raise gr.Error(str(error)) from error
    same = speculative.token_ids == baseline.token_ids
    identical = "✅ identical to the target alone" if same else "❌ DIFFERENT from the target alone"
    stats = {"speculative": speculative.result.stats(), "baseline": baseline.result.stats()}
    return speculative.text, baseline.text, identical, stats


def build_ui(banner: str) -> gr.Blocks:
    with gr.Blocks(title="specdec: speculative Whisper") as demo:
        gr.Markdown("# specdec: lossless speculative decoding for Whisper\n" + banner)
        audio = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Audio")
        language = gr.Dropdown(["auto", "en", "de", "fr", "es", "zh"], value="auto", label="Language")
        run = gr.Button("Transcribe", variant="primary")
        speculative = gr.Textbox(label="Speculative decoding")
        baseline = gr.Textbox(label="Target alone")
        identical = gr.Markdown()
        stats = gr.JSON(label="Statistics")
        outputs = [speculative, baseline, identical, stats]
        run.click(transcribe, [audio, language], outputs, api_name="transcribe")
    return demo


def main() -> None:
    global _whisper
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    demo_default = bool(os.environ.get("SPECDEC_DEMO_MODELS"))
    parser.add_argument("--demo-models", action="store_true", default=demo_default)
    parser.add_argument("--target", default="large-v3")
    parser.add_argument("--draft", default="tiny")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    args = parser.parse_args()
    banner = ""
    target, draft = args.target, args.draft
    if args.demo_models:
        paths = demo_model_paths()
        target, draft = str(paths["target"]), str(paths["draft-separate"])
        banner = "**Demo mode: random weights, transcripts are meaningless;** the decoding is real."
    try:
        _whisper = SpeculativeWhisper.from_pair(load_pair(target, draft))
    except PairError as error:
        message = f"Could not load the models: {error}\nOffline? Start with: python app.py --demo-models"
        raise SystemExit(message) from None
    build_ui(banner).launch(server_name=args.host, server_port=args.port)


if __name__ == "__main__":
    main()
