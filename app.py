"""specdec web demo: Whisper decoding alone and with speculative decoding, side by side.

python app.py                 # real models: whisper-base <- its self-draft on a CPU (bundled, offline),
                              # whisper-large-v3 <- whisper-tiny on a GPU (from the hub)
python app.py --demo-models   # random-weight demo checkpoints for tests: transcripts are meaningless

Beside the page, on the same port: an OpenAI-compatible POST /v1/audio/transcriptions and GET /v1/models
(specdec/app/openai_api.py; --api-key or SPECDEC_API_KEY to require a key there, and --protect-page to put
the page and its Gradio API behind the same key). Both doors share one fair, bounded line for the models
(specdec/app/jobs.py).

Layout and wiring only; the handlers are plain functions in specdec/app/.
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
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from specdec.app import compare, downloads, live, openai_api, realtime, served, uploads, views, word_view
from specdec.app.cancel_one import CancelOneEvent
from specdec.app.highlight import STYLE, legend_html
from specdec.app.jobs import MODEL_THREAD, Jobs
from specdec.app.microphone import MICROPHONE_ELEMENT, PAGE_JS, StreamInOrder
from specdec.app.served import (
    JOBS,
    MODEL_EVENTS,
    ON_ZERO_GPU,
    STORES,
    compare_on_gpu,
    transcribe_on_gpu,
    user_error,
)
from specdec.app.store import (
    ModelStore,
    UserError,
    demo_store,
    pairs_by_device,
    pairs_for,
    store_summary,
    without_paths,
)
from specdec.app.uploads import GRADIO_CACHE, UPLOAD_CACHE
from specdec.audio import AudioError, duration_text, load_audio
from specdec.longform import LONG_FORM_MODES
from specdec.options import (
    WHISPER_COMPRESSION_RATIO_THRESHOLD,
    WHISPER_LOGPROB_THRESHOLD,
    WHISPER_NO_SPEECH_THRESHOLD,
    DecodeOptions,
    TranscribeOptions,
)
from specdec.streaming.session import StreamOptions
from specdec.vad import rms_dbfs
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
LANGUAGES = ["auto", "en", "de", "fr", "es", "it", "pt", "nl", "ja", "zh", "ru", "ar", "hi", "ko"]
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

LIVE_HELP = """Press **Record** and speak: every update re-decodes the audio so far with speculative decoding.
The words two updates agree on are **committed**, word by word as you speak; the rest is *tentative*
(grey) and may change.
Each token is coloured by who proposed it: the **previous hypothesis** (free: no model runs), the
**draft model**, or the **target** itself. Every update's text is exactly the target's own on that audio.
Only speech is decoded (Silero VAD): silence, noise and music are not, and a pause commits what you said.
Each recording starts a new transcript."""
LONG_FORM_HELP = (
    "sequential: Whisper's own long-form algorithm, segment by segment (the same output as generate()) · "
    "chunked: 30 s chunks with 5 s overlap decoded as a batch, merged like the transformers ASR pipeline"
)
SKIP_SILENCE_HELP = (
    "Silero VAD: only the speech is decoded, times stay the file's; the output is then not generate()'s "
    "on the whole file, and the badge compares with the target alone on the same speech"
)
NO_SPEECH_HELP = (
    f"openai-whisper's transcribe() defaults (no-speech probability over {WHISPER_NO_SPEECH_THRESHOLD:g} and "
    f"average log-probability under {WHISPER_LOGPROB_THRESHOLD:g}): a window judged silence is left empty; "
    "off, every window is decoded, as generate() does by default"
)
FALLBACK_HELP = (
    f"openai-whisper's transcribe() defaults: a window whose tokens compress more than "
    f"{WHISPER_COMPRESSION_RATIO_THRESHOLD:g} times under zlib (a loop) or whose average log-probability is "
    f"under {WHISPER_LOGPROB_THRESHOLD:g} is decoded again, sampled, at the next temperature up to 1 by 0.2, "
    "as generate() does with those options; off: one temperature, generate()'s default"
)
LOSSY_HELP = (
    "above 0 the output is NO LONGER the target's: a draft token is kept where the target gives it at least "
    "this share of its own top probability (greedy only); Compare shows what that cost against the target "
    "alone beside what it saved"
)
PACE_HELP = f"at most; where an update takes long, the next waits for more speech ({StreamOptions().pace})"
OTHER_LANGUAGES = (  # the word error rates behind "often": docs/app.md (The example clips)
    "<small>The CPU default target, whisper-base, is a small model: outside English it mishears often "
    "(compare the Spanish, French and Dutch recordings against their references with the WER box). On a "
    "GPU the page runs whisper-large-v3.</small>"
)
LIVE_TIME_LIMIT = 1800  # seconds of streaming per recording, so that one listener cannot hold the models
STOP_STATUS_SECONDS = 0.5  # after Stop, how often the status says how much audio is still being decoded
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


def _pair_dropdown(store: ModelStore, choices: list[tuple[str, str]]) -> gr.Dropdown:
    return gr.Dropdown(
        choices,
        value=store.default_pair,
        label="Models: target ← draft",
        info="A pair marked unavailable cannot be loaded here (no hub access); the bundled pair always can.",
    )


def _compare_tab(store: ModelStore, choices: list[tuple[str, str]]) -> None:
    """The Compare view: the same clip decoded by the target alone and speculatively, side by side."""

    async def run_compare(
        audio,
        pair,
        language,
        task,
        timestamps,
        draft_length,
        num_draft_tokens,
        temperature,
        seed,
        long_form,
        reference,
        skip_silence,
        word_timestamps=False,
        detect_no_speech=True,
        fallback=True,
        acceptance_threshold=0.0,
        request: gr.Request = None,
        progress=gr.Progress(),
    ):
        asked = compare.CompareRequest(
            audio=audio, pair=pair, language=language, task=task, timestamps=timestamps,
            draft_length=draft_length, num_draft_tokens=num_draft_tokens, temperature=temperature,
            seed=seed, reference=reference, baseline_first=store.next_baseline_first(), long_form=long_form,
            skip_silence=skip_silence, word_timestamps=word_timestamps, detect_no_speech=detect_no_speech,
            fallback=fallback, acceptance_threshold=acceptance_threshold,
        )  # fmt: skip
        view = await served.shown_to_user(compare_on_gpu, asked, progress, request.session_hash)
        return (
            view.baseline_text,
            view.speculative_text,
            view.verdict_html,
            view.tokens_html,
            view.metrics,
            view.timeline,
            view.steps,
            view.breakdown,
            view.wer_html,
            views.details(view),
            view.windows,
            word_view.words_html(word_view.word_dicts(view.comparison.speculative.words), audio),
            view.comparison.speculative,  # for the downloads
        )

    async def run_transcribe(
        audio,
        pair,
        language,
        task,
        timestamps,
        draft_length,
        num_draft_tokens,
        temperature,
        seed,
        long_form,
        skip_silence,
        word_timestamps=False,
        detect_no_speech=True,
        fallback=True,
        acceptance_threshold=0.0,
        request: gr.Request = None,
        progress=gr.Progress(),
    ):
        asked = compare.CompareRequest(
            audio=audio, pair=pair, language=language, task=task, timestamps=timestamps,
            draft_length=draft_length, num_draft_tokens=num_draft_tokens, temperature=temperature, seed=seed,
            long_form=long_form, skip_silence=skip_silence, word_timestamps=word_timestamps,
            detect_no_speech=detect_no_speech, fallback=fallback, acceptance_threshold=acceptance_threshold,
        )  # fmt: skip
        submit = compare.submit_clip if asked.batchable else None  # joins the batch of other requests
        shown = await served.shown_to_user(transcribe_on_gpu, asked, progress, request.session_hash, submit)
        text, tokens, stats = shown
        return text, tokens, stats, word_view.words_html(stats.get("words"), audio)

    pair = _pair_dropdown(store, choices)  # the page's width: a pair's name is read whole
    with gr.Row():
        with gr.Column(scale=3):
            limit = duration_text(store.max_seconds)
            audio = gr.Audio(
                sources=["upload", "microphone"],
                type="filepath",
                label=f"Audio (up to {limit}; over 30 s is decoded long-form)",
            )
            audio_note = gr.HTML("", elem_id="audio-note")  # what is wrong with a clip, when it arrives
            # the audio box takes only what the browser types audio/*, not a video or a .webm recording
            video = gr.UploadButton(
                "Or upload a video (mp4, webm, mov, mkv): its first audio track",
                file_types=["audio", "video", ".m4a", ".webm", ".mkv", ".mov"],
                size="sm",
            )
            reference = gr.Textbox(
                "",
                label=f"Reference text (optional, for WER; up to {compare.MAX_REFERENCE_CHARS:,} characters "
                f"and {compare.MAX_REFERENCE_WORDS:,} words)",
                lines=2,
                max_length=compare.MAX_REFERENCE_CHARS,
            )
        with gr.Column(scale=2):
            with gr.Row():
                language = gr.Dropdown(LANGUAGES, value="auto", label="Language", allow_custom_value=True)
                task = gr.Radio(["transcribe", "translate"], value="transcribe", label="Task")
            with gr.Row():
                draft_length = gr.Radio(
                    ["adaptive", "fixed"],
                    value="adaptive",
                    label="Draft length",
                    info="adaptive: k follows the acceptance (chunked, greedy: the batch's measured costs)",
                )
                num_draft_tokens = gr.Slider(
                    DecodeOptions.min_draft_tokens,
                    DecodeOptions.max_draft_tokens,
                    value=DecodeOptions.num_draft_tokens,
                    step=1,
                    label="Draft tokens k (start value)",
                )
            with gr.Row():
                temperature = gr.Slider(0.0, 1.2, value=0.0, step=0.1, label="Temperature (0 = greedy)")
                # bounds checked by compare.checked_seed: Gradio's own check prints a traceback per call
                seed = gr.Number(value=0, precision=0, label=f"Seed (0 to {compare.MAX_SEED})")
            timestamps = gr.Checkbox(
                label="Timestamps", info="segment times; the SRT and WebVTT downloads need them"
            )
            word_timestamps = gr.Checkbox(
                label="Word timestamps",
                info="each word timed from the target's own alignment heads; click a word to play the clip "
                "from it (one more decoder pass a window, in both runs of a Compare)",
            )
            long_form = gr.Radio(
                list(LONG_FORM_MODES),
                value=TranscribeOptions.long_form,
                label="Long audio (over 30 s)",
                info=LONG_FORM_HELP,
            )
            skip_silence = gr.Checkbox(label="Skip long silences (audio over 30 s)", info=SKIP_SILENCE_HELP)
            no_speech = gr.Checkbox(True, label="Leave windows of no speech empty", info=NO_SPEECH_HELP)
            fallback = gr.Checkbox(True, label="Temperature fallback against loops", info=FALLBACK_HELP)
            with gr.Accordion("Lossy speed-up (off: the output is the target's own)", open=False):
                acceptance_threshold = gr.Slider(
                    0.0, 1.0, value=0.0, step=0.05, label="Acceptance threshold (0 = exact)",
                    info=LOSSY_HELP, elem_id="acceptance-threshold",
                )  # fmt: skip
    with gr.Row():
        run = gr.Button("Compare: target alone vs speculative", variant="primary", elem_id="run")
        quick = gr.Button("Transcribe (speculative only)", variant="secondary")
    gr.Examples(
        examples(),
        [audio, reference, language],
        label="Example clips: people speaking (a LibriVox reading, John F. Kennedy in 1961, phone prompts, "
        "a game's Dutch voice acting), then two espeak-ng voices",
    )
    gr.Markdown(OTHER_LANGUAGES)
    verdict = gr.HTML(label="Verdict", elem_id="verdict")
    with gr.Row():
        baseline_text = gr.Textbox(label="Target alone", lines=3, elem_id="baseline-text")
        speculative_text = gr.Textbox(label="Speculative decoding", lines=3, elem_id="speculative-text")
    with gr.Row():  # the speculative transcript as files, after a Compare run
        download_buttons = [
            gr.DownloadButton(f"Download {label}", visible=False, size="sm", elem_id=f"download-{name}")
            for name, label in downloads.DOWNLOADS.items()
        ]
    transcript = gr.State(None, time_to_live=UPLOAD_CACHE[1])  # the last run's speculative Transcription
    gr.Markdown("### Speculative transcript, token by token (hover a token for its step and probabilities)")
    tokens = gr.HTML(STYLE + legend_html(), label="Tokens", elem_id="tokens")
    words = gr.HTML("", label="Words", elem_id="words", js_on_load=word_view.JS)
    metrics = gr.Dataframe(
        headers=["metric", "target alone", "speculative"],
        label="Metrics",
        interactive=False,
        max_height=2000,  # every row in view (Gradio's 500 px hid the last ones behind a scroll bar)
        elem_id="metrics",
    )
    with gr.Row():
        timeline = gr.Plot(label="Tokens over time")
        breakdown = gr.Plot(label="Time breakdown")
    steps = gr.Plot(label="Per target pass")
    windows = gr.Plot(label="File timeline (windows / chunks)")
    word_errors = gr.HTML(label="Word error rate", elem_id="wer")
    with gr.Accordion("Details (JSON)", open=False):
        details = gr.JSON(label="Statistics")

    settings = [
        audio,
        pair,
        language,
        task,
        timestamps,
        draft_length,
        num_draft_tokens,
        temperature,
        seed,
        long_form,
    ]
    outputs = [
        baseline_text,
        speculative_text,
        verdict,
        tokens,
        metrics,
        timeline,
        steps,
        breakdown,
        word_errors,
        details,
        windows,  # late, so that API clients' indices of the outputs before it still hold
        words,
        transcript,  # a State: never sent to API clients
    ]

    def cleared(request: gr.Request):  # before a run: no output of an earlier run stays beside the new one
        downloads.clear(_downloads_folder(request))
        hidden = [gr.DownloadButton(value=None, visible=False) for _ in download_buttons]
        return ["", "", "", STYLE + legend_html(), None, None, None, None, "", None, None, "", None, *hidden]

    def offer_downloads(transcription, request: gr.Request):
        files = downloads.write(transcription, _downloads_folder(request))
        return [gr.DownloadButton(value=path, visible=path is not None) for path in files]

    run.click(cleared, None, [*outputs, *download_buttons], queue=False, api_visibility="private").then(
        run_compare,
        [*settings, reference, skip_silence, word_timestamps, no_speech, fallback, acceptance_threshold],
        outputs,
        api_name="compare",
        concurrency_limit=MODEL_EVENTS,
        concurrency_id="models",
    ).success(offer_downloads, transcript, download_buttons, queue=False, api_visibility="private")
    quick.click(cleared, None, [*outputs, *download_buttons], queue=False, api_visibility="private").then(
        run_transcribe,
        [*settings, skip_silence, word_timestamps, no_speech, fallback, acceptance_threshold],
        [speculative_text, tokens, details, words],
        api_name="transcribe",
        concurrency_limit=MODEL_EVENTS,
        concurrency_id="models",
    )
    video.upload(lambda path: path, video, audio, queue=False, api_visibility="private")  # into the audio box
    audio.change(  # uploads, recordings, examples and videos are read as a run would, when they arrive
        lambda path: checked_clip(path, store.max_seconds),
        audio,
        [audio, audio_note],
        concurrency_limit=2,
        concurrency_id="clip-check",
        show_progress="minimal",
        api_visibility="private",
    )


def checked_clip(path: str | None, max_seconds: float) -> tuple:
    """(the audio box, the note beside it) for a clip that just arrived, read as a run reads it: a clip
    that a run would refuse (unreadable, cut off, silent, too long) is taken out of the box and deleted,
    and the note says what is wrong; a good one stays, and the note is emptied."""
    if not path:
        return gr.skip(), gr.skip()  # (emptied: by the user, or here)
    name = Path(path).name
    try:
        waveform = load_audio(path, max_seconds=max_seconds)
    except AudioError as error:
        problem = str(error).replace(str(path), name)  # the file by its own name, not the server's path
    else:
        if rms_dbfs(waveform) >= compare.SILENT_DBFS:
            return gr.skip(), ""
        problem = f"{name}: the recording is silent (below {compare.SILENT_DBFS:.0f} dBFS); nothing to decode"
    logger.warning("user error: %s", problem[:300])
    uploads.delete_upload(path)
    return None, f'<p class="specdec-audio-note" style="color:#b91c1c">⚠️ {html.escape(problem)}</p>'


def _live_tab(store: ModelStore, choices: list[tuple[str, str]]) -> None:
    """The Live view: the microphone streamed in chunks, re-decoded at each update, committed as it agrees."""
    if ON_ZERO_GPU:  # every chunk would wait for its own GPU allocation
        gr.Markdown("The Live view needs a dedicated GPU or CPU Space; ZeroGPU allocates a GPU per call.")
        return
    gr.Markdown(LIVE_HELP)
    with gr.Row():
        with gr.Column(scale=2):
            microphone = gr.Audio(
                sources=["microphone"],
                streaming=True,
                type="filepath",  # each chunk's upload is read and deleted at once (uploads.take_chunk)
                label="Microphone",
                elem_id=MICROPHONE_ELEMENT,
                waveform_options=gr.WaveformOptions(show_recording_waveform=False),
            )
            gr.HTML("", js_on_load=PAGE_JS)  # the raw signal, every chunk in order (app.microphone)
            clear = gr.Button("Clear", elem_id="live-clear")
        with gr.Column(scale=3):
            pair = _pair_dropdown(store, choices)
            with gr.Row():
                language = gr.Dropdown(LANGUAGES, value="auto", label="Language", allow_custom_value=True)
                chunk_seconds = gr.Slider(
                    0.5, 3.0, value=1.0, step=0.25, label="Update every (s of audio)", info=PACE_HELP
                )
            reuse = gr.Checkbox(True, label="Previous hypothesis as a free draft (hypothesis reuse)")
    transcript = gr.HTML(live.transcript_html(None), elem_id="live-text")
    stats = gr.HTML(elem_id="live-stats")
    latency = gr.Plot(label="Latency and target passes per update")
    # per browser session: two listeners never share audio or text; a closed page ends its worker
    listener = gr.State(None, time_to_live=3600, delete_callback=lambda old: old and old.close(wait=False))

    def hear(audio, current, pair_label, language_code, seconds, reuse_hypothesis):
        try:
            audio = uploads.take_chunk(audio)
            if current is None or current.stopped:  # each recording starts a new transcript
                current = live.open_listener(store, pair_label, language_code, seconds, reuse_hypothesis)
            if not live.hear(current, audio):
                return current, gr.skip(), gr.skip(), gr.skip()  # no whole chunk yet: nothing new to show
        except UserError as error:
            raise user_error(error) from None
        return current, live.transcript_html(current), live.stats_html(current), live.latency_figure(current)

    def forget(current):
        if current is not None:
            current.close(wait=False)
        return None, live.transcript_html(None), "", live.latency_figure(None)

    shown = [listener, transcript, stats, latency]
    microphone.stream(  # the handler only hands chunks to the listener's worker and returns at once
        hear,
        [microphone, listener, pair, language, chunk_seconds, reuse],
        shown,
        stream_every=0.5,
        time_limit=LIVE_TIME_LIMIT,
        concurrency_limit=None,
        show_progress="hidden",  # no spinner over the text twice a second (it costs the browser CPU)
        api_name=False,
    )
    microphone.stop_recording(  # the page says what it does after Stop, not Gradio's "processing"
        stop_listening,
        [listener],
        shown,
        concurrency_limit=None,
        show_progress="hidden",
        api_visibility="private",
    )
    clear.click(forget, [listener], shown, api_visibility="private")


def stop_listening(current: live.Listener | None) -> Iterator[tuple]:
    """The Stop button's (listener, transcript, status, plot): at once a status that says the recording
    stopped and how much audio is still being decoded (again every STOP_STATUS_SECONDS while it is), then,
    once the last audio is decoded, the committed text."""
    if current is None or current.stopped:
        yield current, gr.skip(), gr.skip(), gr.skip()
        return
    stopping = threading.Thread(target=current.stop, name="specdec-stop", daemon=True)
    stopping.start()
    while stopping.is_alive():
        yield current, gr.skip(), live.stopping_html(current), gr.skip()
        stopping.join(STOP_STATUS_SECONDS)
    page = live.transcript_html(current, finished=True)
    yield current, page, live.stats_html(current), live.latency_figure(current)


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
                _compare_tab(store, choices)
            with gr.Tab("Live", id="live", elem_id="live-tab"):
                _live_tab(store, choices)
        demo.unload(_page_closed)  # its running jobs stop
    return demo


def _page_closed(request: gr.Request) -> None:
    downloads.clear(_downloads_folder(request))
    stopped = JOBS["served"].stop_session(request.session_hash)
    if stopped:
        logger.info("a page closed: stopped %d running job(s)", stopped)


def _downloads_folder(request: gr.Request) -> Path:
    return downloads.session_folder(GRADIO_CACHE, request.session_hash)


def make_store(args: argparse.Namespace) -> tuple[ModelStore, str | None]:
    """The model store from the server's flags, its default pair loaded and warmed up (or why not)."""
    if args.demo_models:
        store = demo_store(args.device)
    elif args.target or args.draft:
        target, draft = default_pair(args.device)
        store = ModelStore(pairs_for(args.target or target, args.draft or [draft]), args.device)
    else:
        store = ModelStore(pairs_by_device(args.device), args.device)
    store.warm_up = not ON_ZERO_GPU
    store.max_seconds = args.max_seconds
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
