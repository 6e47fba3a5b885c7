"""The Live view: the microphone streamed in chunks to one listener per page (`specdec.app.live`),
re-decoded at each update and committed word by word as two updates agree; Stop decodes what is left."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import gradio as gr

from specdec.app import live, uploads
from specdec.app.controls import LANGUAGES, pair_dropdown
from specdec.app.microphone import MICROPHONE_ELEMENT, PAGE_JS
from specdec.app.served import ON_ZERO_GPU, user_error
from specdec.app.store import ModelStore, UserError
from specdec.streaming.session import StreamOptions

LIVE_HELP = """Press **Record** and speak: every update re-decodes the audio so far with speculative decoding.
The words two updates agree on are **committed**, word by word as you speak; the rest is *tentative*
(grey) and may change.
Each token is coloured by who proposed it: the **previous hypothesis** (free: no model runs), the
**draft model**, or the **target** itself. Every update's text is exactly the target's own on that audio.
Only speech is decoded (Silero VAD): silence, noise and music are not, and a pause commits what you said.
Each recording starts a new transcript."""
PACE_HELP = f"at most; where an update takes long, the next waits for more speech ({StreamOptions().pace})"
LIVE_TIME_LIMIT = 1800  # seconds of streaming per recording, so that one listener cannot hold the models
STOP_STATUS_SECONDS = 0.5  # after Stop, how often the status says how much audio is still being decoded


def live_tab(store: ModelStore, choices: list[tuple[str, str]]) -> None:
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
            pair = pair_dropdown(store, choices)
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
