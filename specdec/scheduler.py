"""Many requests, one batch: continuous batching in front of the engine.

Requests come from any thread (`submit`: a 16 kHz waveform and its `TranscribeOptions`) and join the
running batch (`engine.windows.WindowBatch`) at its next step; a long file (sequential long-form) joins as one
row and each next window rejoins as a new row; a request leaves the batch when its last window is done and
its future is answered then. Every output is the one its request gets alone (greedy; a seeded sampled request
keeps the target's distribution, its very samples only alone: `engine.windows`).

The batch runs on one executor thread (the app's `MODEL_THREAD`, where all its model work runs), one step
per task: a task does one target pass and queues the next, so other work given to that thread (a Compare
run, a live update) runs between two steps, never inside one. `lock` (the app's models' lock) is held for
each step.

Drafting by load (`engine.draft_length.LoadAwareDraftLength`): a request alone drafts as it does outside the
scheduler (adaptive k per row); while several decode, each row's k is capped at the one the batch's measured
pass costs and the rows' acceptance find best (the cost-aware policy), so as the batch fills and the
target's verify pass turns compute-bound, the rows draft fewer tokens, or none.

A request may follow its decoding (`submit`'s on_tokens): after each step that settled more of its output
(`WindowBatch.settled`: tokens no later pass can change), it is called with all of them; what one call adds
is what that target pass accepted.

A request whose `stop` event is set leaves at the next step (its future raises `Cancelled`); `max_rows`
requests decode at once, the others wait in arrival order.

One request's failure is its own. A problem found before it joins (a language the target lacks) fails it
alone; a step that raises cannot say which row it came from, so the requests it held decode again from
their start, apart from everyone else, in halves (a half that fails again is halved again, a request that
fails alone gets the error): the one at fault fails alone, the others get exactly their own outputs, only
later (a sampled request draws its samples anew), and no request that arrives meanwhile joins until they
are through.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from specdec import longform
from specdec.audio import SAMPLE_RATE
from specdec.engine.cancel import Cancelled
from specdec.engine.clip_decoding import ClipDecoding
from specdec.engine.draft_length import DraftLength, LoadAwareDraftLength
from specdec.engine.windows import WindowBatch
from specdec.longform.sequential import clip_decoding, report_segment
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.whisper.tokens import check_previous_text, language_token_id

logger = logging.getLogger("specdec.scheduler")
MAX_ROWS = 16  # requests decoding at once; the others wait for a row


@dataclasses.dataclass(eq=False)
class _Request:
    waveform: np.ndarray
    options: TranscribeOptions
    name: str
    stop: threading.Event
    future: Future
    on_tokens: Callable[[list[int]], None] | None = None  # told each time its settled output grows
    clip: ClipDecoding | None = None  # once it joined
    told: int = 0  # settled tokens on_tokens was told of


class Scheduler:
    """Requests to one model pair (a `SpeculativeWhisper`) decoded together as they come."""

    def __init__(
        self,
        whisper,
        executor: Executor | None = None,
        lock: AbstractContextManager | None = None,
        max_rows: int = MAX_ROWS,
        policy: Callable[[], DraftLength] | None = None,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        """whisper: a `specdec.api.SpeculativeWhisper`; executor: where the batch runs (default: a thread of
        its own); lock: held for each step; policy: each batch's draft lengths (default: by load);
        on_idle: called (on the executor) when the last request has left (the app gives memory back)."""
        self.whisper = whisper
        self.executor = executor or ThreadPoolExecutor(1, thread_name_prefix="specdec-scheduler")
        self.lock = lock or nullcontext()
        self.max_rows = max_rows
        self.on_idle = on_idle
        policy = policy or LoadAwareDraftLength
        self.batch = WindowBatch(whisper.pair, on_window=self._on_window, policy=policy)
        self._guard = threading.Lock()  # arrivals come from other threads
        self._arrivals: list[_Request] = []
        self._scheduled = False  # a step is queued or running
        self._joined: list[_Request] = []  # (the batch's thread only)
        self._suspects: list[list[_Request]] = []  # groups that were in a failed step, to decode again apart
        self._apart = False  # the batch decodes one such group, and nobody else joins it

    def submit(
        self,
        waveform: np.ndarray,
        options: DecodeOptions | None = None,
        name: str = "audio",
        stop: threading.Event | None = None,
        on_tokens: Callable[[list[int]], None] | None = None,
    ) -> Future:
        """A future of the waveform's `Transcription` (16 kHz mono float32, any length up to the audio
        limit: over 30 s sequential long-form, timestamps on; options: `TranscribeOptions`, or
        `DecodeOptions` for a speculative request); `Cancelled` once stop is set. on_tokens(token_ids):
        called on the batch's thread with its settled output (target ids) each time a step grows it."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        options = TranscribeOptions.of(options)
        request = _Request(waveform, options, name, stop or threading.Event(), future, on_tokens)
        with self._guard:
            self._arrivals.append(request)
            start = not self._scheduled
            self._scheduled = True
        if start:
            self.executor.submit(self._run)
        return future

    @property
    def waiting(self) -> int:
        """Requests that have not joined the batch yet (or wait to decode again after a failed step)."""
        with self._guard:
            return len(self._arrivals) + sum(len(group) for group in self._suspects)

    @property
    def decoding(self) -> int:
        """Requests in the batch now."""
        return len(self._joined)

    def _run(self) -> None:
        """One step of the batch (joining arrivals first), then the next one queued while work is left."""
        try:
            with self.lock:
                self._join_arrivals()
                self._leave_stopped()
                finished = self.batch.step()
            self._tell_settled(finished)
            for clip in finished:
                self._answer(clip)
        except BaseException as error:  # noqa: BLE001 - the request at fault is found and told why
            self._step_failed(error)
        with self._guard:
            self._scheduled = bool(self._arrivals or self._suspects or self.batch.busy)
            again = self._scheduled
        if again:
            self.executor.submit(self._run)
        elif self.on_idle is not None:
            self.on_idle()

    def _join_arrivals(self) -> None:
        """Arrivals join while there is room; a group of suspects (`_step_failed`) joins an empty batch
        alone, and nobody joins until it has left."""
        if self._apart and self._joined:
            return
        self._apart = bool(self._suspects)
        if self._apart:
            self._join(self._suspects.pop(0))
            return
        with self._guard:
            room = max(self.max_rows - len(self._joined), 0)
            arrivals, self._arrivals = self._arrivals[:room], self._arrivals[room:]
        self._join(arrivals)

    def _join(self, requests: list[_Request]) -> None:
        """The requests' decodings from their start, into the batch (a request's own problem fails it)."""
        for request in requests:
            if request.stop.is_set():
                request.future.set_exception(Cancelled("stopped before it started"))
                continue
            try:
                request.clip = self._clip(request)
            except Exception as error:  # noqa: BLE001 - this request's own problem, told to it alone
                request.future.set_exception(error)
                continue
            request.clip.start_seconds = self.batch.clock.seconds()
            self._joined.append(request)
            self.batch.join([request.clip])

    def _clip(self, request: _Request) -> ClipDecoding:
        """The request's decoding, its problems (a language the target lacks, a control token in its previous
        text) found before it joins."""
        pair, options = self.whisper.pair, request.options
        config = pair.target.model.generation_config
        if options.language is not None and getattr(config, "is_multilingual", False):
            language_token_id(config, options.language)
        check_previous_text(config, options.prompt_ids)
        if longform.is_long(request.waveform) and (options.long_form != "sequential" or options.skip_silence):
            raise ValueError("requests decode long audio sequentially here (no chunks, no skipped silence)")
        return clip_decoding(pair, request.waveform, options, options.speculative)

    def _leave_stopped(self) -> None:
        for request in [r for r in self._joined if r.stop.is_set()]:
            self.batch.drop(request.clip)
            self._joined.remove(request)
            request.future.set_exception(Cancelled("the request was stopped"))

    def _answer(self, clip: ClipDecoding) -> None:
        request = next(r for r in self._joined if r.clip is clip)
        self._joined.remove(request)
        try:
            result = clip.result(self.whisper.pair.target.model.generation_config)
            seconds = len(request.waveform) / SAMPLE_RATE
            transcription = self.whisper.transcription(request.name, result, seconds)
        except Exception as error:  # noqa: BLE001 - this request's own problem, told to it alone
            request.future.set_exception(error)
            return
        request.future.set_result(transcription)

    def _tell_settled(self, finished: list[ClipDecoding]) -> None:
        """Each following request whose settled output grew in this step is told (a finished one too, before
        its answer)."""
        for request in self._joined:
            if request.on_tokens is None or request.clip is None:
                continue
            done = any(clip is request.clip for clip in finished)
            settled = request.clip.output if done else self.batch.settled(request.clip)
            if len(settled) > request.told:
                request.told = len(settled)
                try:
                    request.on_tokens(list(settled))
                except Exception:  # a listener's fault is its own: the decoding goes on, untold
                    logger.exception("a request's token listener failed; it is told no more")
                    request.on_tokens = None

    def _on_window(self, clip: ClipDecoding) -> None:
        request = next((r for r in self._joined if r.clip is clip), None)
        if request is not None and request.options.progress is not None and not clip.done:
            report_segment(request.options.progress, clip, len(request.waveform) / SAMPLE_RATE)

    def _step_failed(self, error: BaseException) -> None:
        """A step raised: the batch starts afresh. A request that was alone in it gets the error; several
        are suspects, decoded again from their start in two halves, each apart from everyone else."""
        held = [request for request in self._joined if not request.future.done()]
        self._joined = []
        self.batch = WindowBatch(self.whisper.pair, on_window=self._on_window, policy=self.batch.policy)
        if len(held) <= 1:
            for request in held:
                request.future.set_exception(error)
            return
        logger.warning("a step of %d requests failed; they decode again, apart", len(held), exc_info=error)
        half = len(held) // 2
        self._suspects[:0] = [held[:half], held[half:]]


def chained(future: Future, then: Callable) -> Future:
    """A future of then(future's result) (run where the result is set), or of its exception."""
    after: Future = Future()
    after.set_running_or_notify_cancel()

    def done(finished: Future) -> None:
        try:
            after.set_result(then(finished.result()))
        except BaseException as error:  # noqa: BLE001 - handed on to whoever waits
            after.set_exception(error)

    future.add_done_callback(done)
    return after
