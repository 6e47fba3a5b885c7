"""The Compare view: the same clip decoded by the target alone and speculatively, side by side, or
speculatively alone (Transcribe); its controls, its outputs and their wiring to the handlers
(`specdec.app.compare`, run as jobs by `specdec.app.served`)."""

from __future__ import annotations

import dataclasses
import html
import inspect
import logging
from collections.abc import Callable
from pathlib import Path

import gradio as gr

from specdec.app import compare, downloads, served, uploads, views, word_view
from specdec.app.controls import LANGUAGES, control, info, pair_dropdown
from specdec.app.highlight import STYLE, legend_html
from specdec.app.served import MODEL_EVENTS, compare_on_gpu, transcribe_on_gpu
from specdec.app.store import ModelStore
from specdec.app.uploads import GRADIO_CACHE, UPLOAD_CACHE
from specdec.audio import AudioError, duration_text, load_audio
from specdec.vad import rms_dbfs

OTHER_LANGUAGES = (  # the word error rates behind "often": docs/app.md (The example clips)
    "<small>The CPU default target, whisper-base, is a small model: outside English it mishears often "
    "(compare the Spanish, French and Dutch recordings against their references with the WER box). On a "
    "GPU the page runs whisper-large-v3.</small>"
)
logger = logging.getLogger("specdec.app")


# The page's API (`/compare`, `/transcribe`): its parameters in the order clients give them, each named as
# the CompareRequest field it gives; newer ones come last, so that older calls still hold (a client may
# leave out any whose control has a value: Gradio's clients send the control's initial value)
COMPARE_API = (
    "audio", "pair", "language", "task", "timestamps", "draft_length", "num_draft_tokens", "temperature",
    "seed", "long_form", "reference", "skip_silence", "word_timestamps", "detect_no_speech", "fallback",
    "acceptance_threshold",
)  # fmt: skip
TRANSCRIBE_API = tuple(name for name in COMPARE_API if name != "reference")


def compare_tab(store: ModelStore, choices: list[tuple[str, str]], examples: list[list[str]]) -> None:
    """The Compare view: the same clip decoded by the target alone and speculatively, side by side."""

    async def run_compare(asked: compare.CompareRequest, request: gr.Request, progress: gr.Progress):
        asked = dataclasses.replace(asked, baseline_first=store.next_baseline_first())
        view = await served.shown_to_user(compare_on_gpu, asked, progress, request.session_hash)
        return {
            baseline_text: view.baseline_text,
            speculative_text: view.speculative_text,
            verdict: view.verdict_html,
            tokens: view.tokens_html,
            metrics: view.metrics,
            timeline: view.timeline,
            steps: view.steps,
            breakdown: view.breakdown,
            word_errors: view.wer_html,
            details: views.details(view),
            windows: view.windows,
            words: word_view.words_html(word_view.word_dicts(view.comparison.speculative.words), asked.audio),
            transcript: view.comparison.speculative,  # for the downloads
        }

    async def run_transcribe(asked: compare.CompareRequest, request: gr.Request, progress: gr.Progress):
        submit = compare.submit_clip if asked.batchable else None  # joins the batch of other requests
        shown = await served.shown_to_user(transcribe_on_gpu, asked, progress, request.session_hash, submit)
        text, tokens_html, stats = shown
        return {
            speculative_text: text,
            tokens: tokens_html,
            details: stats,
            words: word_view.words_html(stats.get("words"), asked.audio),
        }

    pair = pair_dropdown(store, choices)  # the page's width: a pair's name is read whole
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
                task = control("task", info=None)
            with gr.Row():
                draft_length = gr.Radio(
                    ["adaptive", "fixed"],
                    value="adaptive",
                    label="Draft length",
                    info="adaptive: k follows the acceptance (chunked, greedy: the batch's measured costs)",
                )
                num_draft_tokens = control("num_draft_tokens", info=None)
            with gr.Row():
                temperature = control("temperature", info=None)
                # bounds checked by compare.checked_seed: Gradio's own check prints a traceback per call
                seed = control("seed", value=0, label=f"Seed (0 to {compare.MAX_SEED})", info=None)
            timestamps = control("timestamps")
            word_timestamps = control(
                "word_timestamps", info=f"{info('word_timestamps')}; click a word to play the clip from it"
            )
            long_form = control("long_form")
            skip_silence = control("skip_silence")
            # the page runs Whisper's rules, as openai-whisper's transcribe() (the other doors: generate()'s)
            no_speech = control("detect_no_speech", value=True)
            fallback = control("fallback", value=True)
            with gr.Accordion("Lossy speed-up (off: the output is the target's own)", open=False):
                acceptance_threshold = control(
                    "acceptance_threshold", value=0.0, elem_id="acceptance-threshold"
                )
    with gr.Row():
        run = gr.Button("Compare: target alone vs speculative", variant="primary", elem_id="run")
        quick = gr.Button("Transcribe (speculative only)", variant="secondary")
    gr.Examples(
        examples,
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

    controls = {
        "audio": audio, "pair": pair, "language": language, "task": task, "timestamps": timestamps,
        "draft_length": draft_length, "num_draft_tokens": num_draft_tokens, "temperature": temperature,
        "seed": seed, "long_form": long_form, "reference": reference, "skip_silence": skip_silence,
        "word_timestamps": word_timestamps, "detect_no_speech": no_speech, "fallback": fallback,
        "acceptance_threshold": acceptance_threshold,
    }  # fmt: skip
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
        downloads.clear(downloads_folder(request))
        texts = dict.fromkeys([baseline_text, speculative_text, verdict, word_errors, words], "")
        empty = dict.fromkeys(outputs) | texts | {tokens: STYLE + legend_html()}  # the rest: None
        return empty | {button: gr.DownloadButton(value=None, visible=False) for button in download_buttons}

    def offer_downloads(transcription, request: gr.Request):
        files = downloads.write(transcription, downloads_folder(request))
        return [gr.DownloadButton(value=path, visible=path is not None) for path in files]

    run.click(cleared, None, [*outputs, *download_buttons], queue=False, api_visibility="private").then(
        api_handler(COMPARE_API, run_compare),
        [controls[name] for name in COMPARE_API],
        outputs,
        api_name="compare",
        concurrency_limit=MODEL_EVENTS,
        concurrency_id="models",
    ).success(offer_downloads, transcript, download_buttons, queue=False, api_visibility="private")
    quick.click(cleared, None, [*outputs, *download_buttons], queue=False, api_visibility="private").then(
        api_handler(TRANSCRIBE_API, run_transcribe),
        [controls[name] for name in TRANSCRIBE_API],
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


def api_handler(names: tuple[str, ...], run) -> Callable:
    """The Gradio handler of a button whose inputs are the controls `names`: the page's API, whose
    parameters are those names in that order. It calls `run(CompareRequest, gr.Request, gr.Progress)`
    with the request those values make."""

    async def handler(*values):
        *given, request, progress = values  # Gradio puts the request and the progress tracker last
        return await run(compare.CompareRequest(**dict(zip(names, given, strict=True))), request, progress)

    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter(name, keyword) for name in names]
    parameters += [
        inspect.Parameter("request", keyword, default=None, annotation=gr.Request),
        inspect.Parameter("progress", keyword, default=gr.Progress()),
    ]
    handler.__signature__ = inspect.Signature(parameters)  # what Gradio reads the API's parameters from
    handler.__annotations__ = {"request": gr.Request}  # and how it knows where the request goes
    return handler


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


def downloads_folder(request: gr.Request) -> Path:
    return downloads.session_folder(GRADIO_CACHE, request.session_hash)
