"""A checkpoints preset's models decoding the same rows every way, each way timed on its decode alone.

`Models` loads the target and drafts (packed, as `SpeculativeWhisper` packs them); every clip is encoded
once per model (`EncoderMemo`) and later encoder calls are lookups subtracted from the decode time.
`decode` runs our engine, `generate` transformers' generate() (assisted too) on the memoised encoder
output; then the bundled pair's rivals: generate() on a waveform and faster-whisper.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import WhisperForCausalLM
from transformers.modeling_outputs import BaseModelOutput

from benchmarks.checkpoints import PRESETS, bench_models
from benchmarks.controlled import AcceptancePlan, AssistantPlan, WrongToken, controlled, plan_from, planted
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


class EncoderMemo:
    """The engine's encoder: each row encoded once per model, every later call a lookup (its time
    reported, and subtracted from the decode's)."""

    def __init__(self) -> None:
        self.outputs: dict[tuple[int, str], tuple[torch.Tensor, float]] = {}

    def __call__(self, model: torch.nn.Module, rows: torch.Tensor) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        hidden = []
        for row in rows:  # row: (mel_bins, frames)
            digest = hashlib.sha1(row.float().cpu().contiguous().numpy().tobytes()).hexdigest()
            key = (id(model.model.encoder), digest)
            if key not in self.outputs:
                self.outputs[key] = encode(model, row[None])
            hidden.append(self.outputs[key][0])
        # a first encoding's seconds are the encoder's, a lookup's are the hashing's
        return torch.cat(hidden), time.perf_counter() - start  # (batch, frames / 2, d_model)


class Models:
    """A preset's target and drafts on one device and dtype, and the assistants transformers can run."""

    def __init__(
        self,
        size: str,
        seed: int,
        cache_dir: Path,
        device: str = "cpu",
        dtype: str = "float32",
        log: Callable[[str], None] = print,
        assistants: bool = True,
    ) -> None:
        quiet_transformers()
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
            raise ValueError(f"unknown dtype {dtype!r}; choose float32, float16 or bfloat16")
        self.device, self.log = torch.device(device), log
        preset, paths = PRESETS[size], bench_models(size, cache_dir, seed)
        start = time.perf_counter()
        self.target = load_model(str(paths[preset.target]), self.device, torch_dtype)
        kernels.pack(self.target.model)  # as SpeculativeWhisper does (CPU float32 only; not generate())
        self.pairs: dict[str, ModelPair] = {}
        for name in preset.drafts:
            draft = load_model(str(paths[name]), self.device, torch_dtype)
            kernels.pack(draft.model)
            self.pairs[name] = make_pair(self.target, draft)
        shared = {n: p for n, p in self.pairs.items() if p.kind is DraftKind.SHARED_ENCODER}
        self.assistants = {n: _assistant(p) for n, p in shared.items()} if assistants else {}
        log(f"loaded {size} models ({device}, {dtype}) in {time.perf_counter() - start:.1f} s")
        self.memo = EncoderMemo()

    def pair(self, draft: str | None) -> ModelPair:
        return self.pairs[draft] if draft else ModelPair(self.target, None, None, None)

    def shared_encoder_first(self) -> list[str]:
        """The drafts, the shared-encoder (distil-size) one first."""
        return sorted(self.pairs, key=lambda n: self.pairs[n].kind is not DraftKind.SHARED_ENCODER)

    def clips(self, waveforms: dict[str, np.ndarray] | list[Path]) -> list[Clip]:
        """Each clip (by name, or a file) with features for every model, encoded once per model."""
        found = []
        if not isinstance(waveforms, dict):
            waveforms = {path.stem: load_audio(path) for path in waveforms}
        for name, waveform in waveforms.items():
            clip = Clip(name, {"target": features(self.target, waveform)})
            for name, pair in self.pairs.items():
                if pair.kind is not DraftKind.SHARED_ENCODER:
                    clip.features[name] = features(pair.draft, waveform)
            for name, mel in clip.features.items():
                model = self.target if name == "target" else self.pairs[name].draft
                clip.encoder_seconds[name] = self.memo(model.model, window_features(mel, 0))[1]
            self.log(f"clip {clip.name}: encoders {clip.encoder_seconds}")
            found.append(clip)
        return found

    def make_plans(self, clip: Clip, reference: DecodeResult, alphas: tuple[float, ...], seed: int) -> None:
        """Acceptance plans for every α (and 0) from the target-only trace; one seed per clip, so the
        planned agreements are nested across α (a position agreeing at α = 0.6 agrees at 0.8 too)."""
        for alpha in {0.0, *alphas}:
            clip.plans[alpha] = plan_from(reference, alpha, seed=seed)

    def decode(
        self,
        draft: str | None,
        rows: list[Clip],
        options: DecodeOptions,
        plans: list[AcceptancePlan] | None = None,
    ) -> Run:
        """Our engine on the rows together: the target alone (draft None), or the draft, its proposals
        following plans[i] in row i where plans are given."""
        pair, make_drafter = self.pair(draft), None
        if plans:
            make_drafter, options = controlled(pair, plans), planted(options)
        rows_features = [PairFeatures(clip.features["target"], clip.features.get(draft)) for clip in rows]
        start = time.perf_counter()
        results = decode_clips(
            pair, rows_features, options, draft is not None, make_drafter, encoder=self.memo
        )
        return self.run_of(results, time.perf_counter() - start)

    def run_of(self, results: list[DecodeResult], seconds: float) -> Run:
        """A Run of our results that took `seconds` of wall clock (passes and encodings shared by rows)."""
        encodings = {e.index: e for result in results for e in result.encodings}
        passes = {p.index: p for result in results for p in result.passes}
        first = passes[min(passes)].verify_seconds
        decode = seconds - sum(e.seconds for e in encodings.values())
        return Run(decode, first, tuple(r.token_ids for r in results), len(passes), tuple(results))

    def generate(
        self,
        rows: list[Clip],
        max_new_tokens: int,
        assistant: str | None = None,
        num_draft_tokens: int = 0,
        alpha: float | None = None,
        **kwargs: object,
    ) -> Run:
        """transformers' generate() on the rows together, on their memoised encoder output (assisted
        with `assistant`, its choices following each clip's plan for α when given)."""
        model, windows = self.target.model, len(_plan_windows(rows[0]))
        if windows == 1 and all(clip.features["target"].shape[-1] <= 3000 for clip in rows):
            hidden = self.memo(model, torch.cat([window_features(c.features["target"], 0) for c in rows]))[0]
            kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden)
            encoder_seconds = 0.0
        else:  # one row that generate() seeks through, re-encoding: less what its encoder passes cost
            kwargs["input_features"] = window_features(rows[0].features["target"], 0).to(model.dtype)
            encoder_seconds = rows[0].encoder_seconds["target"] * windows
        plan = nullcontext()
        if assistant:
            kwargs["assistant_model"] = self.assistants[assistant]
            kwargs["assistant_model"].generation_config.num_assistant_tokens = num_draft_tokens
            if alpha is not None:
                plan = AssistantPlan(
                    self.assistants[assistant], PROMPT_TOKENS, WrongToken(self.pairs[assistant])
                )
                plan.set_plan(rows[0].plans[alpha])
        with plan, target_passes(model) as passes, torch.inference_mode():
            call = lambda: model.generate(language=LANGUAGE, max_new_tokens=max_new_tokens, **kwargs)  # noqa: E731
            output, seconds = timed(call, model)
        eos = model.generation_config.eos_token_id
        ids = tuple(without_end(row.tolist(), eos) for row in output)
        return Run(seconds - encoder_seconds, passes.first_seconds, ids, passes.calls)


def _plan_windows(clip: Clip) -> tuple:
    plan = next(iter(clip.plans.values()), None)
    return plan.target_tokens if plan else ((),)


def without_end(ids: list[int], eos: int) -> tuple[int, ...]:
    """A generate() row without its end-of-text and padding (the same id)."""
    while ids and ids[-1] == eos:
        ids.pop()
    return tuple(ids)


@dataclass
class PassCount:
    calls: int = 0
    first_seconds: float = 0.0
    started: float = 0.0


@contextmanager
def target_passes(model: torch.nn.Module) -> Iterator[PassCount]:
    """Count the model's forward passes within the block and time the first (generate() records neither;
    our engine's trace does)."""
    count = PassCount()

    def before(*_: object) -> None:
        count.calls += 1
        if count.calls == 1:
            synchronize(model)
            count.started = time.perf_counter()

    def after(*_: object) -> None:
        if count.calls == 1 and not count.first_seconds:
            synchronize(model)
            count.first_seconds = time.perf_counter() - count.started

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield count
    finally:
        for handle in handles:
            handle.remove()


def warm_up_tokens(device: str, tokens: int) -> int:
    """Tokens of each configuration's untimed first call: on a CPU two do (allocations, lazy packing); on
    a GPU every length the timed calls reach, since each new shape has first-use costs there."""
    return tokens if torch.device(device).type == "cuda" else 2


def _assistant(pair: ModelPair) -> WhisperForCausalLM:
    """The shared-encoder draft as transformers documents it for assisted generation: decoder only."""
    draft = pair.draft.model
    assistant = WhisperForCausalLM(draft.config).eval().to(draft.device, draft.dtype)
    state = {k: v for k, v in draft.state_dict().items() if k.startswith(("model.decoder.", "proj_out."))}
    assistant.load_state_dict(state, strict=True)
    assistant.generation_config = draft.generation_config
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    return assistant


# ---------------------------------------------------------------- the bundled real pair's rivals


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
    models = {
        compute_type: WhisperModel(str(folder), device="cpu", compute_type=compute_type, cpu_threads=threads)
        for compute_type in ("float32", "int8")
    }
    return models, f"faster-whisper: the bundled base weights ({folder}), {threads} threads, beam 1"


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
    source, parts = installed_files(bundle)
    folder = cache_dir() / "ct2" / f"base-{bundle.sha256[:12]}"
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
