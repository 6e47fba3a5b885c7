"""What the served page's handlers share: the model store and its line of jobs (registered by
`app.build_demo`), the page's message for a problem the user can fix, and, on Hugging Face Spaces'
ZeroGPU, the GPU tasks (a GPU held only while decoding; elsewhere plain calls).
"""

from __future__ import annotations

import asyncio
import logging

import gradio as gr

from specdec.app import compare, uploads, views
from specdec.app.jobs import PAGE, Caller, Jobs
from specdec.app.store import ModelStore, RefusedAudio, UserError, without_paths

logger = logging.getLogger("specdec.app")

STORES: dict[str, ModelStore] = {}  # the served store, registered by app.build_demo
JOBS: dict[str, Jobs] = {}  # its running jobs

try:  # ZeroGPU on Hugging Face Spaces: hold a GPU only while decoding
    import spaces

    gpu_task, ON_ZERO_GPU = spaces.GPU(duration=compare.gpu_seconds), True  # longer for long clips
except ImportError:

    def gpu_task(function):
        return function

    ON_ZERO_GPU = False

# Gradio starts the model events at once: they wait in the fair, bounded line of app.jobs, where a cancel
# or a closed page takes them out at once (on ZeroGPU, which has no such line, one at a time in Gradio's)
MODEL_EVENTS = 1 if ON_ZERO_GPU else None


# ZeroGPU runs these in a worker process and pickles their arguments and results, so they take only
# the request (the store, with its models and lock, is inherited by the worker, never pickled).
@gpu_task
def compare_on_gpu(request: compare.CompareRequest, progress=None) -> views.CompareView:
    return compare.compare_clip(STORES["served"], request, progress)


@gpu_task
def transcribe_on_gpu(request: compare.CompareRequest, progress=None) -> tuple[str, str, dict]:
    return compare.transcribe_clip(STORES["served"], request, progress)


async def shown_to_user(
    task, request: compare.CompareRequest, progress: gr.Progress, session: str | None, submit=None
):
    """Run a GPU task as a cancellable job in the line for the models (the bar says how many jobs go
    first), or, given `submit` (`Jobs.batched`'s), as a decoding that joins the running batch; a
    UserError, a full line included, becomes a gr.Error the page shows (one log line, no traceback), a
    refused upload is deleted, and the app keeps serving."""

    def waiting(ahead: int) -> None:
        progress(0, desc=f"Waiting for the models: {ahead} job{'s' * (ahead != 1)} before this one")

    try:
        if ON_ZERO_GPU:  # the task runs in ZeroGPU's own process: no cancellation scope reaches it
            return await asyncio.to_thread(task, request, None)  # nor can it pickle the progress tracker
        caller = Caller(PAGE, session)
        if submit is not None:
            return await JOBS["served"].batched(caller, submit, STORES["served"], request, progress)
        return await JOBS["served"].run(caller, task, request, progress, waiting=waiting)
    except RefusedAudio as error:
        uploads.delete_upload(request.audio)
        raise user_error(error) from None
    except UserError as error:
        raise user_error(error) from None


def user_error(error: Exception) -> gr.Error:
    """The page's message for a problem the user can fix, logged as one line (not Gradio's traceback)."""
    logger.warning("user error: %s", str(error)[:300])
    return gr.Error(without_paths(str(error)), duration=None, print_exception=False)  # no server path
