"""specdec web demo: Whisper decoding alone and with speculative decoding, side by side.

python app.py                 # real models: whisper-base <- its self-draft on a CPU (bundled, offline),
                              # whisper-large-v3 <- whisper-tiny on a GPU (from the hub)
python app.py --demo-models   # random-weight demo checkpoints for tests: transcripts are meaningless

Beside the page, on the same port: an OpenAI-compatible POST /v1/audio/transcriptions and GET /v1/models
(specdec/app/openai_api.py; --api-key or SPECDEC_API_KEY to require a key there, and --protect-page to put
the page and its Gradio API behind the same key). Both doors share one fair, bounded line for the models
(specdec/app/jobs.py).

The page and its launch: each view is built in specdec/app/ (compare_tab.py, live_tab.py), its handlers are
plain functions there.
"""

from __future__ import annotations

# ruff: noqa: E402 (the arguments are parsed before the heavy imports, so that --help answers at once)
import argparse
import os


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--demo-models",
        action="store_true",
        default=os.environ.get("SPECDEC_DEMO_MODELS", "").lower() not in ("", "0", "false", "no"),
        help="random-weight demo models, built offline (or set SPECDEC_DEMO_MODELS=1)",
    )
    parser.add_argument(
        "--target", help="target: hub id, short name or folder (with --draft: replaces the default pairs)"
    )
    parser.add_argument("--draft", action="append", help="allowed draft for --target (repeat)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(  # its names checked once the package loads (`options.COMPUTE_TYPES`)
        "--compute-type",
        default=os.environ.get("SPECDEC_COMPUTE_TYPE", "default"),
        help="what the targets' encoders compute in on a CPU, for the page and /v1 alike: default "
        "(float32), auto (bfloat16 where the CPU runs it natively), float32, bfloat16 or int8 (or set "
        "SPECDEC_COMPUTE_TYPE)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=os.environ.get("SPECDEC_MAX_SECONDS"),
        help="longest clip accepted, in seconds (or set SPECDEC_MAX_SECONDS); default: 10 minutes",
    )
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SPECDEC_API_KEY") or None,
        help="require 'Authorization: Bearer KEY' on the /v1 API (or set SPECDEC_API_KEY)",
    )
    parser.add_argument(
        "--protect-page",
        action="store_true",
        default=os.environ.get("SPECDEC_PROTECT_PAGE", "").lower() not in ("", "0", "false", "no"),
        help="with --api-key: the page and its Gradio API (/compare, /transcribe) need the key too, as the "
        "password of a login (any user name); or set SPECDEC_PROTECT_PAGE=1",
    )
    args = parser.parse_args(argv)
    from specdec.app.store import MAX_APP_SECONDS
    from specdec.audio import MAX_LONG_SECONDS

    args.max_seconds = MAX_APP_SECONDS if args.max_seconds is None else float(args.max_seconds)
    if not 0 < args.max_seconds <= MAX_LONG_SECONDS:
        parser.error(f"--max-seconds must be above 0 and at most {MAX_LONG_SECONDS:g}")
    if args.protect_page and not args.api_key:
        parser.error("--protect-page needs a key: --api-key KEY or SPECDEC_API_KEY")
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad flags are answered here, before gradio, torch and the models load

import html
import logging
import secrets
from collections.abc import Callable
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from specdec.app import downloads, openai_api, realtime
from specdec.app.cancel_one import CancelOneEvent
from specdec.app.compare_tab import compare_tab, downloads_folder
from specdec.app.jobs import MODEL_THREAD, Jobs
from specdec.app.live_tab import live_tab
from specdec.app.microphone import StreamInOrder
from specdec.app.served import (
    JOBS,
    ON_ZERO_GPU,
    STORES,
)
from specdec.app.store import (
    ModelStore,
    UserError,
    demo_store,
    offer_bfloat16,
    pairs_by_device,
    pairs_for,
    store_summary,
    without_paths,
)
from specdec.app.uploads import UPLOAD_CACHE
from specdec.options import COMPUTE_TYPES
from specdec.whisper.models import default_pair

ASSETS = Path(__file__).parent / "assets"
# people speaking first (assets/SOURCES.md says who and under which licence), then espeak-ng's voices
EXAMPLES = (
    "recorded/en-sense-and-sensibility.flac",
    "en-jfk.flac",
    "recorded/es-fuera-de-servicio.flac",
    "recorded/fr-pas-en-service.flac",
    "recorded/nl-glazen-oog.flac",
    "en-weather.wav",
    "de-bahnhof.wav",
)
MAX_FILE_SIZE = 25 * 1024 * 1024  # 25 MB: 10 min of 16 kHz mono 16-bit WAV is 19 MB (compressed holds more)
QUEUE_SIZE = 32  # jobs waiting for the models or using them, from the page and the API alike (app.jobs)
CSS = """
.wer-sub { background: #fde68a; border-radius: 3px; padding: 0 2px; }
.wer-del del { color: #b91c1c; }
.wer-ins b { color: #1d4ed8; }
.specdec-banner { padding: 10px 14px; border-radius: 8px; font-weight: 600; }
"""
HOW_IT_WORKS = """A small **draft** model proposes the next few tokens; the **target** checks them all in one
forward pass and keeps the longest prefix it agrees with, plus one token of its own. The output is the
target's own output, token for token (greedy) or in distribution (sampling), only in fewer target passes.
Both runs use the same device and warm models; which one runs first alternates from click to click."""

SESSIONS_KEPT = 100  # browser sessions whose last outputs Gradio keeps in memory (its default: 10,000)
logger = logging.getLogger("specdec.app")


def examples() -> list[list[str]]:
    """[clip, reference text, language] for each of EXAMPLES, in that order."""
    rows = []
    for name in EXAMPLES:
        clip = ASSETS / name
        reference = clip.with_suffix(".txt").read_text(encoding="utf-8").strip()
        rows.append([str(clip), reference, clip.stem.split("-")[0]])
    return rows


def banner_html(store: ModelStore, demo_mode: bool, load_error: str | None) -> str:
    if load_error:
        message, _, details = without_paths(load_error).partition(" (Details: ")
        details = f"<br><small style='font-weight:400'>{html.escape(details.removesuffix(')'))}</small>"
        style = "background:#fee2e2;color:#991b1b"
        return f'<div class="specdec-banner" style="{style}">⚠️ {html.escape(message)}{details}</div>'
    info = store_summary(store)
    if demo_mode:
        warning = (
            "Demo mode: the models have random weights, so the transcripts are meaningless. "
            "The decoding, the timings and the identical-output check are real. At this size the drafts "
            "cost nearly as much as the target, so expect no speed-up here: that needs a small draft and a "
            "large target (see the README's Performance section)."
        )
        return (
            f'<div class="specdec-banner" style="background:#fef3c7;color:#92400e">🎲 {warning}</div>'
            f"<p><small>{info}</small></p>"
        )
    return (
        f'<div class="specdec-banner" style="background:#dcfce7;color:#166534">🎙️ Real Whisper weights. '
        f'<span style="font-weight:400">{html.escape(info)}</span></div>'
    )


def build_demo(store: ModelStore, banner: str, queue_size: int = QUEUE_SIZE) -> gr.Blocks:
    """The page: the Compare and Live views wired to the store's handlers; at most `queue_size` jobs wait
    for the models or use them, from the page and the API together."""
    STORES["served"], JOBS["served"] = store, Jobs(store, queue_size)
    choices = store.choices()
    with gr.Blocks(title="specdec: speculative decoding for Whisper", delete_cache=UPLOAD_CACHE) as demo:
        gr.Markdown("# specdec: lossless speculative decoding for Whisper")
        gr.HTML(banner)
        with gr.Accordion("How it works", open=False):
            gr.Markdown(HOW_IT_WORKS)
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                compare_tab(store, choices, examples())
            with gr.Tab("Live", id="live", elem_id="live-tab"):
                live_tab(store, choices)
        demo.unload(_page_closed)  # its running jobs stop
    return demo


def _page_closed(request: gr.Request) -> None:
    downloads.clear(downloads_folder(request))
    stopped = JOBS["served"].stop_session(request.session_hash)
    if stopped:
        logger.info("a page closed: stopped %d running job(s)", stopped)


def make_store(args: argparse.Namespace) -> tuple[ModelStore, str | None]:
    """The model store from the server's flags, its default pair loaded and warmed up (or why not)."""
    if args.compute_type not in COMPUTE_TYPES:
        raise SystemExit(
            f"--compute-type must be one of {', '.join(COMPUTE_TYPES)}, not {args.compute_type!r}"
        )
    if args.demo_models:
        store = demo_store(args.device)
    elif args.target or args.draft:
        target, draft = default_pair(args.device)
        store = ModelStore(pairs_for(args.target or target, args.draft or [draft]), args.device)
    else:
        store = ModelStore(pairs_by_device(args.device), args.device)
    store.warm_up = not ON_ZERO_GPU
    store.max_seconds, store.compute_type = args.max_seconds, args.compute_type
    if not args.demo_models:
        offer_bfloat16(store)
    try:  # on ZeroGPU every pair loads now: the GPU worker is forked per call and keeps nothing
        for label in store.pairs if ON_ZERO_GPU else [store.default_pair]:
            MODEL_THREAD.submit(store.whisper, label).result()  # where the jobs will run (jobs.py)
    except UserError as error:
        return store, str(error)
    return store, None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    store, load_error = make_store(args)
    if load_error:
        print(load_error)
    demo = build_demo(store, banner_html(store, args.demo_models, load_error))
    launch(demo, args.host, args.port, args.api_key, args.protect_page)


def launch(
    demo: gr.Blocks,
    host: str = "127.0.0.1",
    port: int = 7860,
    api_key: str | None = None,
    protect_page: bool = False,
    block: bool = True,
) -> None:
    """Serve the page, its Gradio API and the /v1 routes on one port (block=False: return once serving).

    With protect_page the page and its Gradio API ask for a login whose password is the API key: the
    browser's page calls the same endpoints as `gradio_client`, so no key can guard one and not the other
    (see docs/app.md)."""
    # Gradio's queue holds an event only until one of its workers is free; the models' line is app.jobs'
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    demo.launch(
        server_name=host,
        server_port=port,
        max_file_size=MAX_FILE_SIZE,
        css=CSS,
        state_session_capacity=SESSIONS_KEPT,
        prevent_thread_lock=not block,
        auth=page_login(api_key) if protect_page else None,
        auth_message="Log in with any user name and this server's API key as the password.",
        app_kwargs={  # Gradio's FastAPI app serves the /v1 routes beside the page
            "routes": api_routes(api_key),
            "middleware": [Middleware(CancelOneEvent), Middleware(StreamInOrder)],
        },
    )


def page_login(api_key: str) -> Callable[[str, str], bool]:
    """Gradio's login check for a protected page: any user name, the API key as the password."""

    def check(user: str, password: str) -> bool:
        return secrets.compare_digest(password.encode(), api_key.encode())

    return check


def api_routes(api_key: str | None) -> list:
    """The OpenAI-compatible /v1 routes on the served store and its jobs (the realtime websocket among
    them); none on ZeroGPU, where a GPU is held only inside the page's own tasks."""
    if ON_ZERO_GPU:
        return []
    store, jobs = STORES["served"], JOBS["served"]
    return openai_api.routes(store, jobs, MAX_FILE_SIZE, api_key) + realtime.routes(store, jobs, api_key)


if __name__ == "__main__":
    main()
