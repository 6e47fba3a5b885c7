"""Shared fixtures: the project's random-weight demo checkpoints, built once per test session, and the real
whisper-base and whisper-tiny.en that requirements.txt installs (converted once into specdec's cache)."""

from __future__ import annotations

import os
import tempfile

# Two busy-waiting OpenMP thread pools on 2 cores (pytest and a CLI subprocess, or a parallel job)
# slow torch 30-50x; passive waiting costs nothing when alone. Must be set before torch starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Each pytest-xdist worker serves its own app: its own Gradio upload cache, since a server that shuts down
# deletes every file it cached (delete_cache), and two servers would share files of the same content.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
os.environ["GRADIO_TEMP_DIR"] = os.path.join(tempfile.gettempdir(), f"specdec-tests-gradio-{WORKER}")

import contextlib  # noqa: E402
import socket  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import WhisperForConditionalGeneration, WhisperProcessor  # noqa: E402

from specdec.api import SpeculativeWhisper  # noqa: E402
from specdec.whisper.demo import build_demo_models  # noqa: E402
from specdec.whisper.models import DraftKind  # noqa: E402

# where the demo pairs run: "cpu" here and on CI; SPECDEC_TEST_DEVICE=cuda runs the same tests on a GPU
TEST_DEVICE = os.environ.get("SPECDEC_TEST_DEVICE", "cpu")

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n: one worker per core, one thread per worker
    torch.set_num_threads(1)

# the longest test files first: pytest-xdist hands whole files to workers in collection order, so a
# long file left for last would keep one worker busy while the other idles
LONGEST_FIRST = [
    "test_corpus", "test_doors", "test_lossless", "test_real_pair", "test_stream_real", "test_fallback",
    "test_no_speech", "test_scheduler", "test_self_draft", "test_gpu_bench", "test_real_self_draft",
    "test_streaming", "test_longform", "test_app_hardening", "test_cli", "test_replay", "test_app_soak",
]  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        stem = item.path.stem
        return LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order kept


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> dict[str, Path]:
    """target, draft-separate, draft-shared: written by the same code as `python -m specdec demo-models`."""
    return build_demo_models(tmp_path_factory.mktemp("demo-models"))


@pytest.fixture(scope="session")
def same_vocabulary_draft(demo_models, tmp_path_factory) -> Path:
    """A separate-encoder draft with the target's vocabulary (like large-v3-turbo for large-v3).

    Made from draft-shared by giving it its own, perturbed encoder, then saved and loaded back
    through from_pretrained like any checkpoint.
    """
    path = tmp_path_factory.mktemp("draft-same-vocabulary")
    model = WhisperForConditionalGeneration.from_pretrained(demo_models["draft-shared"])
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in model.model.encoder.parameters():
            parameter.add_(0.05 * parameter.std() * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(path)
    WhisperProcessor.from_pretrained(demo_models["draft-shared"]).save_pretrained(path)
    return path


def _whisper(target: Path, draft: Path, dtype: torch.dtype = torch.float32) -> SpeculativeWhisper:
    """As a user builds one: loaded by SpeculativeWhisper itself (on a CPU with the packed kernels)."""
    return SpeculativeWhisper(
        draft_model=str(draft), final_model=str(target), device=TEST_DEVICE, dtype=dtype
    )


@pytest.fixture(scope="session")
def separate_pair(demo_models) -> SpeculativeWhisper:
    return _whisper(demo_models["target"], demo_models["draft-separate"])


@pytest.fixture(scope="session")
def shared_pair(demo_models) -> SpeculativeWhisper:
    return _whisper(demo_models["target"], demo_models["draft-shared"])


@pytest.fixture(scope="session")
def same_vocabulary_pair(demo_models, same_vocabulary_draft) -> SpeculativeWhisper:
    return _whisper(demo_models["target"], same_vocabulary_draft)


@pytest.fixture(scope="session")
def float64_pair(demo_models) -> SpeculativeWhisper:
    return _whisper(demo_models["target"], demo_models["draft-separate"], torch.float64)


@pytest.fixture(scope="session")
def benchmark_checkpoints(tmp_path_factory) -> Path:
    """Where the benchmarks build their checkpoints (`--cache-dir`): once per test session, not per test."""
    return tmp_path_factory.mktemp("benchmark-checkpoints")


@pytest.fixture(scope="session")
def real_models() -> dict[str, Path]:
    """The bundled real checkpoints as transformers folders: "base" (multilingual) and "tiny.en"."""
    from specdec.whisper.bundled import BUNDLES, bundled_folder

    return {name: bundled_folder(BUNDLES[name]) for name in ("base", "tiny.en")}


@pytest.fixture(scope="session")
def real_pair(real_models) -> SpeculativeWhisper:
    """whisper-base with a whisper-tiny.en draft: real weights, an English-only draft for a multilingual
    target (other text ids, its own prompt)."""
    return _whisper(real_models["base"], real_models["tiny.en"])


@pytest.fixture(
    params=[DraftKind.SEPARATE_OTHER_VOCAB, DraftKind.SHARED_ENCODER, DraftKind.SEPARATE_SAME_VOCAB],
    ids=lambda kind: kind.value,
)
def pair_of_each_kind(request) -> tuple[DraftKind, SpeculativeWhisper]:
    fixture = {
        DraftKind.SEPARATE_OTHER_VOCAB: "separate_pair",
        DraftKind.SHARED_ENCODER: "shared_pair",
        DraftKind.SEPARATE_SAME_VOCAB: "same_vocabulary_pair",
    }[request.param]
    return request.param, request.getfixturevalue(fixture)


@pytest.fixture(scope="session")
def app_url(demo_models) -> str:
    """app.py's page on the demo models, launched in-process on a free port (closed after the session)."""
    import socket

    import app
    from specdec.app import store as stores

    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu")
    store.whisper(store.default_pair)
    demo = app.build_demo(store, app.banner_html(store, demo_mode=True, load_error=None))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    demo.queue(max_size=8, default_concurrency_limit=1)
    demo.launch(server_port=port, prevent_thread_lock=True, max_file_size=app.MAX_FILE_SIZE, css=app.CSS)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@contextlib.contextmanager
def _served(store, queue_size: int | None = None, **launch) -> Iterator[str]:
    """app.py's page and API for `store` on a free port, as `python app.py` serves them (launch:
    `app.launch`'s keywords); the app's served store and jobs (conftest's app_url page) come back after."""
    import app

    served = dict(app.STORES), dict(app.JOBS)
    banner = app.banner_html(store, demo_mode=True, load_error=None)
    sizes = {} if queue_size is None else {"queue_size": queue_size}
    demo = app.build_demo(store, banner, **sizes)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.launch(demo, port=port, block=False, **launch)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        demo.close()
        app.STORES.update(served[0])
        app.JOBS.update(served[1])


@pytest.fixture(scope="session")
def serve_app():
    """A context manager: `with serve_app(store, queue_size, api_key=...) as url:` app.py on a free port."""
    return _served
