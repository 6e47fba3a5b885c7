"""A checkpoints preset's models decoding the same rows every way, each timed on its decode alone: our
engine (`Models.decode`) and transformers' generate(), assisted too (`Models.generate`), on encoder output
computed once per clip and model; then the bundled pair's rivals, generate() on a waveform and faster-whisper.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from transformers import WhisperForCausalLM
from transformers.modeling_outputs import BaseModelOutput

from benchmarks.checkpoints import PRESETS, bench_models
from benchmarks.controlled import AcceptancePlan, WrongToken, assistant_plan, controlled, plan_from, planted
from benchmarks.harness import LANGUAGE, quiet_transformers, synchronize, timed
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.engine import kernels
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import PairFeatures, encode, features, window_features
from specdec.whisper.models import DraftKind, ModelPair, load_model, make_pair

PROMPT_TOKENS = 4  # generate()'s decoder prompt: start of transcript, language, task, no timestamps


@dataclass(frozen=True)
class Run:
    """One way of decoding some rows together, once."""

    seconds: float  # the decode: wall clock less encoder lookups
    first_pass_seconds: float  # the first target pass (cross-attention keys and values for every row)
    token_ids: tuple[tuple[int, ...], ...]  # per row (assisted generation: one row)
    target_passes: int  # batched target forward passes
    results: tuple[DecodeResult, ...] = ()  # ours, per row

    @property
    def steady_seconds(self) -> float:
        return self.seconds - self.first_pass_seconds


@dataclass(eq=False)  # a clip is itself: rounds key their results by it
class Clip:
    name: str
    features: dict[str, torch.Tensor]  # "target" and each own-encoder draft: log-mel (1, mel_bins, frames)
    encoder_seconds: dict[str, float] = field(default_factory=dict)  # window 0, per model
    plans: dict[float, AcceptancePlan] = field(default_factory=dict)  # by α (`Models.make_plans`)


class Models:
    """A preset's target and drafts on one device and dtype, and the assistants transformers can run."""

    def __init__(
        self, size: str, seed: int, cache_dir: Path, device: str = "cpu", dtype: str = "float32",
        log: Callable[[str], None] = print, assistants: bool = True,
    ) -> None:  # fmt: skip
        quiet_transformers()
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
            raise ValueError(f"unknown dtype {dtype!r}; choose float32, float16 or bfloat16")
        self.device, self.log = torch.device(device), log
        preset, paths = PRESETS[size], bench_models(size, cache_dir, seed)
        start, loaded = time.perf_counter(), {}
        for name, path in paths.items():  # the target first
            loaded[name] = load_model(str(path), self.device, torch_dtype)
            kernels.pack(loaded[name].model)  # as SpeculativeWhisper does (CPU float32 only; not generate())
        self.target = loaded.pop(preset.target)
        self.pairs = {name: make_pair(self.target, draft) for name, draft in loaded.items()}
        shared = {n: p for n, p in self.pairs.items() if p.kind is DraftKind.SHARED_ENCODER}
        self.assistants = {n: _assistant(p) for n, p in shared.items()} if assistants else {}
        self.encoded: dict[tuple[int, str], tuple[torch.Tensor, float]] = {}  # by (encoder, row digest)
        log(f"loaded {size} models ({device}, {dtype}) in {time.perf_counter() - start:.1f} s")

    def memo(self, model: torch.nn.Module, rows: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The engine's encoder: each row (mel_bins, frames) encoded once per model, every later call a
        lookup; (batch, frames / 2, d_model) and the seconds, which the decode's time is reported less."""
        start, hidden = time.perf_counter(), []
        for row in rows:
            digest = hashlib.sha1(row.float().cpu().contiguous().numpy().tobytes()).hexdigest()
            key = (id(model.model.encoder), digest)
            if key not in self.encoded:
                self.encoded[key] = encode(model, row[None])
            hidden.append(self.encoded[key][0])
        return torch.cat(hidden), time.perf_counter() - start

    def shared_encoder_first(self) -> list[str]:
        """The drafts, the shared-encoder (distil-size) one first."""
        return sorted(self.pairs, key=lambda n: self.pairs[n].kind is not DraftKind.SHARED_ENCODER)

    def clips(self, waveforms: dict[str, np.ndarray] | list[Path]) -> list[Clip]:
        """Each clip (by name, or a file) with features for every model, encoded once per model."""
        if not isinstance(waveforms, dict):
            waveforms = {path.stem: load_audio(path) for path in waveforms}
        own = {n: p.draft for n, p in self.pairs.items() if p.kind is not DraftKind.SHARED_ENCODER}
        models, found = {"target": self.target, **own}, []
        for name, waveform in waveforms.items():
            clip = Clip(name, {n: features(model, waveform) for n, model in models.items()})
            for n, model in models.items():
                clip.encoder_seconds[n] = self.memo(model.model, window_features(clip.features[n], 0))[1]
            self.log(f"clip {clip.name}: encoders {clip.encoder_seconds}")
            found.append(clip)
        return found

    def make_plans(self, clip: Clip, reference: DecodeResult, alphas: tuple[float, ...], seed: int) -> None:
        """Acceptance plans for every α (and 0) from the target-only trace; one seed per clip, so the
        planned agreements are nested across α (a position agreeing at α = 0.6 agrees at 0.8 too)."""
        clip.plans.update({alpha: plan_from(reference, alpha, seed=seed) for alpha in {0.0, *alphas}})

    def decode(self, draft: str | None, rows: list[Clip], options: DecodeOptions,
               plans: list[AcceptancePlan] | None = None) -> Run:  # fmt: skip
        """Our engine on the rows together: the target alone (draft None), or the draft, its proposals
        following plans[i] in row i where plans are given."""
        pair, make_drafter = self.pairs[draft] if draft else ModelPair(self.target, None, None, None), None
        if plans:
            make_drafter, options = controlled(pair, plans), planted(options)
        mels = [PairFeatures(clip.features["target"], clip.features.get(draft)) for clip in rows]
        start = time.perf_counter()
        results = decode_clips(pair, mels, options, draft is not None, make_drafter, encoder=self.memo)
        seconds = time.perf_counter() - start
        # rows share passes and encodings: each counted once
        encoder = sum({e.index: e.seconds for result in results for e in result.encodings}.values())
        passes = {p.index: p for result in results for p in result.passes}
        ids = tuple(r.token_ids for r in results)
        return Run(seconds - encoder, passes[min(passes)].verify_seconds, ids, len(passes), tuple(results))

    def generate(
        self, rows: list[Clip], max_new_tokens: int, assistant: str | None = None, num_draft_tokens: int = 0,
        alpha: float | None = None, **kwargs: object,
    ) -> Run:  # fmt: skip
        """transformers' generate() on the rows together, on their memoised encoder output (assisted
        with `assistant`, its choices following each clip's plan for α when given)."""
        any_plan = next(iter(rows[0].plans.values()), None)
        model, windows = self.target.model, len(any_plan.target_tokens) if any_plan else 1
        if windows == 1 and all(clip.features["target"].shape[-1] <= 3000 for clip in rows):
            hidden = self.memo(model, torch.cat([window_features(c.features["target"], 0) for c in rows]))[0]
            kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden)
            encoder_seconds = 0.0
        else:  # one row that generate() seeks through, re-encoding: less what its encoder passes cost
            kwargs["input_features"] = window_features(rows[0].features["target"], 0).to(model.dtype)
            encoder_seconds = rows[0].encoder_seconds["target"] * windows
        plan = nullcontext()
        if assistant:
            kwargs["assistant_model"] = helper = self.assistants[assistant]
            helper.generation_config.num_assistant_tokens = num_draft_tokens
            if alpha is not None:
                wrong = WrongToken(self.pairs[assistant])
                plan = assistant_plan(helper, rows[0].plans[alpha], PROMPT_TOKENS, wrong)
        with plan, target_passes(model) as passes, torch.inference_mode():
            call = lambda: model.generate(language=LANGUAGE, max_new_tokens=max_new_tokens, **kwargs)  # noqa: E731
            output, seconds = timed(call, model)
        ids = tuple(without_end(row.tolist(), model.generation_config.eos_token_id) for row in output)
        return Run(seconds - encoder_seconds, passes.first_seconds, ids, passes.calls)


def without_end(ids: list[int], eos: int) -> tuple[int, ...]:
    """A generate() row without its end-of-text and padding (the same id)."""
    while ids and ids[-1] == eos:
        ids.pop()
    return tuple(ids)


@contextmanager
def target_passes(model: torch.nn.Module) -> Iterator[SimpleNamespace]:
    """Count the model's forward passes within the block and time the first (generate() records neither;
    our engine's trace does)."""
    count = SimpleNamespace(calls=0, first_seconds=0.0, started=0.0)

    def before(*_: object) -> None:
        count.calls += 1
        if count.calls == 1:
            synchronize(model)
            count.started = time.perf_counter()

    def after(*_: object) -> None:
        if count.calls == 1:  # the first pass ends
            synchronize(model)
            count.first_seconds = time.perf_counter() - count.started

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield count
    finally:
        for handle in handles:
            handle.remove()


def _assistant(pair: ModelPair) -> WhisperForCausalLM:
    """The shared-encoder draft as transformers documents it for assisted generation: decoder only."""
    draft = pair.draft.model
    assistant = WhisperForCausalLM(draft.config).eval().to(draft.device, draft.dtype)
    state = {k: v for k, v in draft.state_dict().items() if k.startswith(("model.decoder.", "proj_out."))}
    assistant.load_state_dict(state, strict=True)
    assistant.generation_config = draft.generation_config
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    return assistant


def generate_waveform(
    whisper: object, waveform: np.ndarray, language: str | None
) -> tuple[tuple[int, ...], float]:
    """generate() on a `SpeculativeWhisper`'s target, audio in memory -> tokens (after the prompt, without
    end-of-text): its tokens and end-to-end seconds."""
    target = whisper.pair.target
    start = time.perf_counter()
    mel = target.processor.feature_extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    with torch.inference_mode():
        output = target.model.generate(
            mel.input_features.to(target.model.dtype), language=language, task="transcribe"
        )
    seconds = time.perf_counter() - start
    return without_end(output[0].tolist(), target.model.generation_config.eos_token_id), seconds


def faster_whisper_models(wanted: bool = True) -> tuple[dict, str]:
    """faster-whisper (CTranslate2) on the bundled base weights, {"float32": model, "int8": model} with
    this process's thread count, and a note on them; ({}, why not) when not wanted or not installed."""
    if not wanted:
        return {}, "faster-whisper: left out (--no-faster-whisper)"
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        return {}, "faster-whisper: not installed (pip install faster-whisper), left out"
    folder, threads = _ct2_base_folder(), torch.get_num_threads()
    model = partial(WhisperModel, str(folder), device="cpu", cpu_threads=threads)
    return {
        kind: model(compute_type=kind) for kind in ("float32", "int8")
    }, f"faster-whisper: the bundled base weights ({folder}), {threads} threads, beam 1"


def faster_whisper_transcribe(model: object, audio: object, language: str | None = None, long: bool = False):
    """faster-whisper greedy (beam 1, no temperature fallback, no VAD; timestamps only on long audio):
    the text and the language it heard."""
    segments, info = model.transcribe(
        audio, language=language, beam_size=1, temperature=0.0, without_timestamps=not long,
        condition_on_previous_text=False, vad_filter=False,
    )  # fmt: skip
    return "".join(segment.text for segment in segments).strip(), info.language  # decoded while iterating


def _ct2_base_folder() -> Path:
    """The bundled whisper-base as a CTranslate2 folder (its model.bin assembled from the packages)."""
    from specdec.whisper.bundled import BUNDLES, cache_dir, installed_files

    bundle = BUNDLES["base"]
    (source, parts), folder = installed_files(bundle), cache_dir() / "ct2" / f"base-{bundle.sha256[:12]}"
    if not (folder / "model.bin").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():
            if path.is_file() and not path.name.startswith("model.bin"):
                (folder / path.name).write_bytes(path.read_bytes())
        partial = folder / "model.bin.partial"
        with partial.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        partial.rename(folder / "model.bin")
    return folder
