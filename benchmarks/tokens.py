"""`python -m benchmarks tokens`: every way to decode the same clips, timed side by side in one run.

Configurations: transformers `generate()` (target alone), our loop target-only, transformers assisted
generation (same-vocabulary drafts), and specdec with fixed and adaptive k, each with the draft's own
choices and with controlled acceptance at planted rates α (`benchmarks.controlled`). Each clip is encoded
once per model (an encoder memo passed to the engine; decode times never include an encoder);
configurations run interleaved, `repeats` rounds, and each clip's decode time is the median over rounds.
Every configuration's output is compared with `generate()`'s. Statistics and the Leviathan et al. bound
are in `benchmarks.report`.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import WhisperForCausalLM, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from benchmarks.checkpoints import DEFAULT_CACHE, PRESETS, bench_models
from benchmarks.controlled import (
    AcceptancePlan,
    AssistantPlan,
    WrongToken,
    controlled,
    plan_from,
    planted,
)
from specdec.audio import load_audio
from specdec.engine import kernels
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.whisper.features import PairFeatures, encode, features, window_features
from specdec.whisper.models import DraftKind, ModelPair, load_model, make_pair

ASSETS = Path(__file__).resolve().parent.parent / "assets"
LANGUAGE = "en"  # forced for every configuration: no language-detection pass in any timing


@dataclass(frozen=True)
class BenchOptions:
    size: str = "small"  # a checkpoints preset: "small" (demo models) or "large-v3" (real architectures)
    quick: bool = False  # one clip, α in (0.6, 0.8, 0.95), 32 tokens
    audio: tuple[str, ...] = ()  # more clips besides assets/*.wav
    alphas: tuple[float, ...] | None = None  # controlled acceptance rates; None: by quick
    num_draft_tokens: int = 5  # k of the fixed-k configurations (and the start of adaptive)
    max_new_tokens: int | None = None  # per clip; None: 24 quick, 64 otherwise
    repeats: int | None = None  # interleaved rounds; None: 3
    seed: int = 0  # model weights and acceptance plans
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"
    dtype: str = "float32"  # the models' weights and activations: float32, float16 or bfloat16

    @property
    def rounds(self) -> int:
        return self.repeats or 3

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        dtype = getattr(torch, self.dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose float32, float16 or bfloat16")
        return dtype

    @property
    def tokens(self) -> int:
        return self.max_new_tokens or (32 if self.quick else 64)

    @property
    def rates(self) -> tuple[float, ...]:
        return self.alphas or ((0.6, 0.8, 0.95) if self.quick else (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0))


@dataclass(frozen=True)
class Config:
    """One way of decoding; `name` labels it in tables and plots."""

    name: str
    engine: str  # "generate", "assisted" (transformers) or "specdec"
    draft: str | None = None  # draft folder name; None: the target alone
    alpha: float | None = None  # planted agreement rate; None: the draft's own choices
    adaptive: bool = False
    num_draft_tokens: int = 0


@dataclass
class Measurement:
    """One configuration on one clip: the decode time of each round and the (deterministic) outcome."""

    seconds: list[float] = field(default_factory=list)
    draft_seconds: list[float] = field(default_factory=list)  # specdec: the draft's share of each round
    verify_seconds: list[float] = field(default_factory=list)  # specdec: the target passes' share
    prefill_seconds: list[float] = field(default_factory=list)  # the first target pass of each round
    token_ids: tuple[int, ...] = ()
    target_passes: int = 0
    result: DecodeResult | None = None  # specdec only

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_steady_seconds(self) -> float:
        """Decode time after the first target pass (which builds the cross-attention keys and values)."""
        return statistics.median(t - p for t, p in zip(self.seconds, self.prefill_seconds, strict=True))


class EncoderMemo:
    """`encode` once per (model, window features); later calls reuse the output and report the lookup."""

    def __init__(self) -> None:
        self.outputs: dict[tuple[int, str], torch.Tensor] = {}
        self.seconds: dict[tuple[int, str], float] = {}

    def __call__(self, model: WhisperForConditionalGeneration, features: torch.Tensor) -> tuple:
        start = time.perf_counter()
        digest = hashlib.sha1(features.float().cpu().contiguous().numpy().tobytes()).hexdigest()
        key = (id(model.model.encoder), digest)
        if key in self.outputs:  # the lookup's own time (hashing the features) is encoder time, not decode
            return self.outputs[key], time.perf_counter() - start
        hidden, seconds = encode(model, features)
        self.outputs[key], self.seconds[key] = hidden, seconds
        return hidden, seconds


@dataclass
class Clip:
    name: str
    features: dict[str, torch.Tensor]  # per model folder name: log-mel features (1, mel_bins, frames)
    encoder_seconds: dict[str, float] = field(default_factory=dict)  # window 0, per model
    plans: dict[float, AcceptancePlan] = field(default_factory=dict)


@dataclass
class PassTimer:
    calls: int = 0
    first_seconds: float = 0.0
    _start: float = 0.0


@contextmanager
def target_passes(model: torch.nn.Module) -> Iterator[PassTimer]:
    """Count the target's forward passes within the block, and time the first one (for transformers'
    generate(), which records neither; our engine's trace does).

    The first pass computes every layer's cross-attention keys and values from the encoder output
    (2 x 32 products of 1500 x 1280 by 1280 x 1280 for large-v3: ~1.2 s here), the same work in every
    configuration and once per window: timed apart, so that per-token speed is not hidden behind it.
    """
    timer = PassTimer()

    def before(*_: object) -> None:
        timer.calls += 1
        if timer.calls == 1:
            synchronize(model)
            timer._start = time.perf_counter()

    def after(*_: object) -> None:
        if timer.calls == 1 and not timer.first_seconds:
            synchronize(model)
            timer.first_seconds = time.perf_counter() - timer._start

    handles = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield timer
    finally:
        for handle in handles:
            handle.remove()


def synchronize(model: torch.nn.Module) -> None:
    """Wait for the model's queued GPU work, so that a wall clock read after it times the work itself."""
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Bench:
    """Models, clips and configurations of one benchmark run."""

    def __init__(self, options: BenchOptions, log: Callable[[str], None] = print) -> None:
        transformers.logging.set_verbosity_error()  # one max_length warning per generate() call otherwise
        transformers.logging.disable_progress_bar()
        self.options, self.log = options, log
        preset = PRESETS[options.size]
        paths = bench_models(options.size, options.cache_dir, options.seed)
        start = time.perf_counter()
        device, dtype = options.torch_device, options.torch_dtype
        self.target = load_model(str(paths[preset.target]), device, dtype)
        kernels.pack(self.target.model)  # as SpeculativeWhisper does (CPU float32 only; not generate())
        self.pairs: dict[str, ModelPair] = {}
        for name in preset.drafts:
            draft = load_model(str(paths[name]), device, dtype)
            kernels.pack(draft.model)
            self.pairs[name] = make_pair(self.target, draft)
        self.assistants = {
            n: _assistant(p) for n, p in self.pairs.items() if p.kind is DraftKind.SHARED_ENCODER
        }
        seconds = time.perf_counter() - start
        log(f"loaded {options.size} models ({options.device}, {options.dtype}) in {seconds:.1f} s")
        self.memo = EncoderMemo()
        self.configs = self._configs()

    def _configs(self) -> list[Config]:
        k = self.options.num_draft_tokens
        configs = [Config("generate()", "generate"), Config("specdec target-only", "specdec")]
        for name in self.pairs:
            configs.append(Config(f"specdec {name} k={k}", "specdec", name, num_draft_tokens=k))
            configs.append(
                Config(f"specdec {name} adaptive", "specdec", name, adaptive=True, num_draft_tokens=k)
            )
            # a useless draft (planted α = 0): what adaptive drafting costs when drafting cannot help
            configs.append(Config(f"specdec {name} adaptive α=0", "specdec", name, 0.0, True, k))
            if name in self.assistants:
                configs.append(Config(f"assisted {name} k={k}", "assisted", name, num_draft_tokens=k))
            for alpha in self.options.rates:
                label = f"α={alpha:g}"
                configs.append(Config(f"specdec {name} k={k} {label}", "specdec", name, alpha, False, k))
                if name in self.assistants:
                    configs.append(
                        Config(f"assisted {name} k={k} {label}", "assisted", name, alpha, False, k)
                    )
        return configs

    def clips(self) -> list[Clip]:
        """assets/*.wav (quick: the first) and the given files, with features for every model."""
        files = sorted(ASSETS.glob("*.wav"))[: 1 if self.options.quick else None]
        clips = []
        for path in [*files, *map(Path, self.options.audio)]:
            waveform = load_audio(path)
            clip_features = {"target": features(self.target, waveform)}
            for name, pair in self.pairs.items():
                if pair.kind is not DraftKind.SHARED_ENCODER:
                    clip_features[name] = features(pair.draft, waveform)
            clip = Clip(path.stem, clip_features)
            clip.encoder_seconds["target"] = self.memo(
                self.target.model, window_features(clip_features["target"], 0)
            )[1]
            for name, pair in self.pairs.items():
                if name in clip_features:
                    hidden = self.memo(pair.draft.model, window_features(clip_features[name], 0))
                    clip.encoder_seconds[name] = hidden[1]
            self.log(f"clip {clip.name}: encoders {clip.encoder_seconds}")
            clips.append(clip)
        return clips

    def run(self, config: Config, clip: Clip, max_new_tokens: int) -> Measurement:
        """Decode one clip one way; the measurement of this single run."""
        if config.engine == "specdec":
            return self._specdec(config, clip, max_new_tokens)
        return self._transformers(config, clip, max_new_tokens)

    def _specdec(self, config: Config, clip: Clip, max_new_tokens: int) -> Measurement:
        pair = self.pairs.get(config.draft) or ModelPair(self.target, None, None, None)
        options = DecodeOptions(
            language=LANGUAGE,
            max_new_tokens=max_new_tokens,
            num_draft_tokens=config.num_draft_tokens or 1,
            adaptive=config.adaptive,
        )
        clip_features = PairFeatures(clip.features["target"], clip.features.get(config.draft))
        make_drafter = None
        if config.alpha is not None:
            make_drafter, options = controlled(pair, [clip.plans[config.alpha]]), planted(options)
        (result,) = decode_clips(
            pair, [clip_features], options, config.draft is not None, make_drafter, encoder=self.memo
        )
        first_pass = result.passes[0].verify_seconds  # builds the cross-attention keys and values
        return Measurement(
            [result.decode_seconds], [result.draft_seconds], [result.verify_seconds], [first_pass],
            result.token_ids, result.num_target_passes, result,
        )  # fmt: skip

    def _transformers(self, config: Config, clip: Clip, max_new_tokens: int) -> Measurement:
        kwargs = {"language": LANGUAGE, "max_new_tokens": max_new_tokens}
        features = clip.features["target"]
        if features.shape[-1] <= 3000 and len(self._plan_windows(clip)) <= 1:
            # one window: give generate() the memoised encoder output, so that it times the decoder only
            hidden = self.memo(self.target.model, window_features(features, 0))[0]
            kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden)
            encoder_seconds = 0.0
        else:  # generate() seeks within the window and re-encodes: subtract what its encoder passes cost
            kwargs["input_features"] = window_features(features, 0).to(self.target.model.dtype)
            encoder_seconds = clip.encoder_seconds["target"] * len(self._plan_windows(clip))
        if config.engine == "assisted":
            kwargs["assistant_model"] = self.assistants[config.draft]
            kwargs["assistant_model"].generation_config.num_assistant_tokens = config.num_draft_tokens
        pair = self.pairs.get(config.draft)
        with self._assistant_plan(config, clip, pair), target_passes(self.target.model) as passes:
            start = time.perf_counter()
            with torch.inference_mode():
                output = self.target.model.generate(**kwargs)
            synchronize(self.target.model)
            seconds = time.perf_counter() - start - encoder_seconds
        ids = output[0].tolist()
        eos = self.target.model.generation_config.eos_token_id
        while ids and ids[-1] == eos:  # end-of-text and padding
            ids.pop()
        return Measurement(
            [seconds],
            prefill_seconds=[passes.first_seconds],
            token_ids=tuple(ids),
            target_passes=passes.calls,
        )

    def _plan_windows(self, clip: Clip) -> tuple:
        plan = next(iter(clip.plans.values()), None)
        return plan.target_tokens if plan else ((),)

    def _assistant_plan(self, config: Config, clip: Clip, pair: ModelPair | None):
        if config.alpha is None or config.engine != "assisted":
            return nullcontext()
        plan = AssistantPlan(
            self.assistants[config.draft], 4, WrongToken(pair)
        )  # sot, language, task, notimestamps
        plan.set_plan(clip.plans[config.alpha])
        return plan

    def make_plans(self, clip: Clip, reference: DecodeResult, seed: int) -> None:
        """Acceptance plans for every α from the target-only trace; one seed per clip, so the planned
        agreements are nested across α (a position agreeing at α = 0.6 agrees at 0.8 too)."""
        for alpha in {0.0, *self.options.rates}:
            clip.plans[alpha] = plan_from(reference, alpha, seed=seed)


def run_bench(options: BenchOptions, log: Callable[[str], None] = print) -> tuple[Bench, list[Clip], dict]:
    """Every configuration on every clip in `options.rounds` interleaved rounds; by (config, clip)."""
    bench = Bench(options, log)
    clips = bench.clips()
    tokens = options.tokens
    reference = Config("specdec target-only", "specdec")
    for index, clip in enumerate(clips):  # also warms our loop up
        bench.make_plans(clip, bench.run(reference, clip, tokens).result, options.seed + index)
    for config in bench.configs:  # first calls (allocations, lazy packing) are not timed
        bench.run(config, clips[0], warm_up_tokens(options.device, tokens))
    measurements = {(c.name, clip.name): Measurement() for c in bench.configs for clip in clips}
    for round_index in range(options.rounds):
        start = time.perf_counter()
        shift = round_index % len(bench.configs)  # a different order each round: no config always first
        for clip in clips:
            for config in bench.configs[shift:] + bench.configs[:shift]:
                measurement = bench.run(config, clip, tokens)
                kept = measurements[(config.name, clip.name)]
                kept.seconds += measurement.seconds
                kept.draft_seconds += measurement.draft_seconds
                kept.verify_seconds += measurement.verify_seconds
                kept.prefill_seconds += measurement.prefill_seconds
                kept.token_ids, kept.target_passes = measurement.token_ids, measurement.target_passes
                kept.result = measurement.result
        log(f"round {round_index + 1}/{options.rounds}: {time.perf_counter() - start:.0f} s")
    return bench, clips, measurements


def warm_up_tokens(device: str, tokens: int) -> int:
    """Tokens of each configuration's untimed first call: on a CPU two do (allocations, lazy packing); on
    a GPU every length the timed calls reach, since each new shape has first-use costs there (kernel
    choices, the allocator growing)."""
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
