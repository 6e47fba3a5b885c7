"""`python -m benchmarks cpu`: the bundled real pairs on this CPU, every way to decode the same English audio.

In one process, on the same waveforms (assets/en-*, a 30 s window of dense speech made of them, and any
--audio files), each `repeats` times in a rotated order on warm models: transformers' `generate()` on
the target, our loop with the target alone, our loop with each draft variant (`VARIANTS`: the draft as
loaded, then int8, a restricted vocabulary, audio-only encoding, the lean decoder step and pooled frames
for its cross-attention added one by one) at fixed k and adaptive k (and the cost-aware k for the
default variant), the default CPU pair's self-draft (`SELF_VARIANT`: whisper-base's own, the same
settings, beside the same target) at fixed k and adaptive k, and faster-whisper (CTranslate2, the same
whisper-base weights, the same thread count, beam 1) in float32 and int8 when it is installed, the same
way after ours in a child process (`faster_whisper_runs`: CTranslate2 loaded beside torch, its threads
left waiting after each call took our cores; our target alone's decode measured 1.32 s -> 2.08 s over
the four clips). Greedy, English forced, no timestamps. Every output of ours is compared with
`generate()`'s token ids, faster-whisper's with its text.

Apart from the decodes, each step kind is timed alone (a target step of 1 and of k+1 tokens, a draft step
of each variant, after a 20-token prompt, on the jfk clip's encoder states) and set against its memory
floor: the bytes a step reads (the decoder weights it multiplies by, the cross-attention keys and values,
the self-attention cache) over this machine's bandwidth, measured in the same run by copying a 256 MB
tensor between the rounds of steps. The table, the goals and the Plotly report are in
`benchmarks.cpu_report`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.real import run_generate
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.engine.cache import CachedDecoder
from specdec.engine.fast_draft import CPU_DRAFT, draft_frames, pooled_states, tune_draft
from specdec.engine.lean_decoder import lean_decoder
from specdec.options import TranscribeOptions
from specdec.trace import DRAFT_ENCODER, TARGET_ENCODER
from specdec.whisper.features import encode, features
from specdec.whisper.models import SELF_DRAFT, DraftSettings, load_self_draft, make_pair
from specdec.whisper.tokens import WINDOW_FRAMES

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DENSE = "en-dense-30s"  # English speech filling one whole 30 s window (see `clips`)
DENSE_PARTS = ("en-weather", "en-fellow-americans")
LANGUAGE = "en"
VARIANTS = {  # the draft variants, each adding one lever to the one before
    "float32": DraftSettings(),
    "int8": DraftSettings(int8=True),
    "int8+vocab": DraftSettings(int8=True, vocabulary=CPU_DRAFT.vocabulary),
    "int8+vocab+audio": DraftSettings(int8=True, vocabulary=CPU_DRAFT.vocabulary, audio_context=True),
    "int8+vocab+audio+lean": dataclasses.replace(CPU_DRAFT, frame_pooling=1),
    "int8+vocab+audio+lean+pool": CPU_DRAFT,
}
DEFAULT_VARIANT = "int8+vocab+audio+lean+pool"  # what SpeculativeWhisper runs on a CPU without being told
SELF_VARIANT = "self-draft"  # the default CPU pair's draft: whisper-base's own, with the same CPU settings
PROMPT_TOKENS = 20  # cached tokens before a timed step
COPY_BYTES = 256 * 2**20  # the bandwidth benchmark's tensor


@dataclass(frozen=True)
class CpuBenchOptions:
    repeats: int = 3  # rounds: every configuration decodes every clip once per round, order rotated
    num_draft_tokens: int = 5  # k of the fixed-k rows, and where adaptive k starts
    long_num_draft_tokens: int = 9  # k of one more fixed row of the CPU default: a cheap draft affords more
    audio: tuple[str, ...] = ()  # more English clips besides assets/en-*
    faster_whisper: bool = True  # time faster-whisper too when it is installed
    step_repeats: int = 40  # timed steps per step kind
    batch_size: int = 8  # the batched rows: this many clips (the clips in turn) decoded together


@dataclass(frozen=True)
class Config:
    name: str
    engine: str  # "generate()", "specdec" or "faster-whisper"
    variant: str | None = None  # specdec: the draft variant (None: the target alone)
    policy: str = ""  # specdec with a draft: "fixed", "adaptive" or "cost-aware"
    compute_type: str = ""  # faster-whisper: "float32" or "int8"
    num_draft_tokens: int | None = None  # specdec fixed: k when not the options' num_draft_tokens


@dataclass
class Run:
    """One configuration on one clip in one round."""

    end_to_end: float
    token_ids: list[int] | None = None  # None for faster-whisper (its text is compared)
    text: str = ""
    stats: dict = field(default_factory=dict)  # specdec: what the decoding recorded


def configs(options: CpuBenchOptions) -> list[Config]:
    """Our configurations, in the order every round starts from (faster-whisper's: `faster_whisper_runs`)."""
    found = [Config("generate()", "generate()"), Config("specdec target alone", "specdec")]
    k = options.num_draft_tokens
    for variant in VARIANTS:
        found.append(Config(f"specdec {variant}, k={k}", "specdec", variant, "fixed"))
        found.append(Config(f"specdec {variant}, adaptive", "specdec", variant, "adaptive"))
    long_k = options.long_num_draft_tokens
    if long_k != k:
        name = f"specdec {DEFAULT_VARIANT}, k={long_k}"
        found.append(Config(name, "specdec", DEFAULT_VARIANT, "fixed", num_draft_tokens=long_k))
    found.append(Config(f"specdec {DEFAULT_VARIANT}, cost-aware", "specdec", DEFAULT_VARIANT, "cost-aware"))
    found.append(Config(f"specdec {SELF_VARIANT}, k={k}", "specdec", SELF_VARIANT, "fixed"))
    found.append(Config(f"specdec {SELF_VARIANT}, adaptive", "specdec", SELF_VARIANT, "adaptive"))
    if long_k != k:
        name = f"specdec {SELF_VARIANT}, k={long_k}"
        found.append(Config(name, "specdec", SELF_VARIANT, "fixed", num_draft_tokens=long_k))
    return found


def clips(options: CpuBenchOptions) -> dict[str, np.ndarray]:
    """name -> 16 kHz waveform: the English assets, the dense 30 s window, the --audio files."""
    paths = sorted([*ASSETS.glob("en-*.wav"), *ASSETS.glob("en-*.flac")])
    found = {path.stem: load_audio(path) for path in paths}
    # two spoken clips with half a second of silence after each, repeated: whisper-base transcribes all
    # of it (94 tokens); in the other order, or with jfk's recording among them, it stops after a sentence
    pause = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    speech = np.concatenate([part for name in DENSE_PARTS for part in (found[name], pause)])
    window = WINDOW_FRAMES * SAMPLE_RATE // 100
    found[DENSE] = np.tile(speech, -(-window // len(speech)))[:window]
    found.update({Path(path).stem: load_audio(path) for path in options.audio})
    return found


class CpuBench:
    """The models, the configurations and how each decodes a clip."""

    def __init__(self, options: CpuBenchOptions) -> None:
        self.options = options
        self.whisper = SpeculativeWhisper(draft_model="tiny.en", final_model="base", device="cpu")
        self.variants = {
            name: SpeculativeWhisper.from_pair(tune_draft(self.whisper.pair, settings))
            for name, settings in VARIANTS.items()
        }
        target = self.whisper.pair.target  # the self-draft beside the same (packed) target
        self_pair = make_pair(target, load_self_draft(SELF_DRAFT, target))
        self.variants[SELF_VARIANT] = SpeculativeWhisper.from_pair(tune_draft(self_pair, CPU_DRAFT))
        self.configs = configs(options)

    def decode(self, config: Config, waveform: np.ndarray) -> Run:
        if config.engine == "generate()":
            token_ids, seconds = run_generate(self.whisper, waveform, LANGUAGE)
            return Run(seconds, token_ids, self.whisper.decode_text(token_ids))
        k = self.options.num_draft_tokens if config.num_draft_tokens is None else config.num_draft_tokens
        policy = {"adaptive": config.policy == "adaptive", "cost_aware": config.policy == "cost-aware"}
        speculative = config.variant is not None
        options = TranscribeOptions(language=LANGUAGE, num_draft_tokens=k, speculative=speculative, **policy)
        whisper = self.variants[config.variant or DEFAULT_VARIANT]
        start = time.perf_counter()
        (transcription,) = whisper.transcribe_waveforms([waveform], options)
        seconds = time.perf_counter() - start
        return Run(seconds, list(transcription.token_ids), transcription.text, _stats(transcription.result))

    def measure(self, waveforms: dict[str, np.ndarray], log) -> dict[tuple[str, str], list[Run]]:
        """(config, clip) -> one Run per round; a first untimed decode of the first clip warms each up."""
        return measure(self.configs, self.decode, waveforms, self.options.repeats, log)


def measure(
    configs: list[Config], decode, waveforms: dict[str, np.ndarray], repeats: int, log
) -> dict[tuple[str, str], list[Run]]:
    """(config, clip) -> one Run per round of decode(config, waveform), the configurations rotated each
    round; a first untimed decode of the first clip warms each up."""
    first = next(iter(waveforms.values()))
    for config in configs:
        decode(config, first)
    runs: dict[tuple[str, str], list[Run]] = {}
    for round_index in range(repeats):
        shift = round_index % len(configs)
        order = configs[shift:] + configs[:shift]
        for name, waveform in waveforms.items():
            for config in order:
                runs.setdefault((config.name, name), []).append(decode(config, waveform))
        log(f"round {round_index + 1}/{repeats} done")
    return runs


def faster_whisper_runs(
    options: CpuBenchOptions, waveforms: dict[str, np.ndarray], threads: int
) -> tuple[list[Config], dict[tuple[str, str], list[Run]], str]:
    """faster-whisper float32 and int8 measured as `measure` measures ours, in the process that runs this:
    a child of the benchmark's (spawned), so that CTranslate2 never runs beside our calls. Returns its
    configurations, their runs and a note on the models (or on why there are none)."""
    torch.set_num_threads(threads)
    models, note = _faster_whisper_models(options.faster_whisper)
    found = [Config(f"faster-whisper {t}", "faster-whisper", compute_type=t) for t in models]
    if not found:
        return [], {}, note
    decode = lambda config, waveform: _faster_whisper_run(models[config.compute_type], waveform)  # noqa: E731
    return found, measure(found, decode, waveforms, options.repeats, lambda message: None), note


BATCH_POLICIES = {
    "target alone": None,
    "fixed": {"adaptive": False},
    "cost-aware": {"adaptive": False, "cost_aware": True},
}


def batch_runs(bench: CpuBench, waveforms: dict[str, np.ndarray], log) -> dict[str, dict]:
    """options.batch_size clips (the clips in turn) decoded together by the default variant: the target
    alone, fixed k and cost-aware k, `repeats` rounds in a rotated order. policy -> median seconds of the
    whole batch, its token ids and its target passes (the batch's steps)."""
    names = list(waveforms)
    batch = [waveforms[names[i % len(names)]] for i in range(bench.options.batch_size)]
    whisper = bench.variants[DEFAULT_VARIANT]
    policies = list(BATCH_POLICIES)
    seconds: dict[str, list[float]] = {policy: [] for policy in policies}
    found: dict[str, dict] = {}
    for round_index in range(bench.options.repeats + 1):  # round 0 warms up
        shift = round_index % len(policies)
        for policy in policies[shift:] + policies[:shift]:
            extra = BATCH_POLICIES[policy]
            options = TranscribeOptions(
                language=LANGUAGE,
                num_draft_tokens=bench.options.num_draft_tokens,
                speculative=extra is not None,
                batch_size=len(batch),
                **(extra or {}),
            )
            start = time.perf_counter()
            transcriptions = whisper.transcribe_waveforms(batch, options)
            if round_index:
                seconds[policy].append(time.perf_counter() - start)
            found[policy] = {
                "token_ids": [list(t.token_ids) for t in transcriptions],
                "passes": max(t.result.num_target_passes for t in transcriptions),  # the batch's passes
                "accepted": sum(t.result.num_accepted for t in transcriptions),
                "drafted": sum(t.result.num_drafted for t in transcriptions),
            }
    log(f"batch of {len(batch)} done")
    for policy in policies:
        found[policy]["seconds"] = statistics.median(seconds[policy])
        found[policy]["all_rounds"] = seconds[policy]
    return found


def _stats(result) -> dict:
    """What a specdec decoding recorded, for the statistics (batch 1: one row per pass)."""
    first, steady = result.passes[0], result.passes[1:]
    steady_steps = result.steps[1:]
    return {
        "target_encoder": sum(e.seconds for e in result.encodings if e.model == TARGET_ENCODER),
        "draft_encoder": sum(e.seconds for e in result.encodings if e.model == DRAFT_ENCODER),
        "decode": result.decode_seconds,
        "first_pass": first.draft_seconds + first.verify_seconds,
        "steady": sum(p.draft_seconds + p.verify_seconds for p in steady),
        "steady_draft": sum(p.draft_seconds for p in steady),
        "steady_verify": sum(p.verify_seconds for p in steady),
        "tokens": result.num_generated,
        "steady_tokens": result.num_generated - min(result.steps[0].n_accepted + 1, result.num_generated),
        "passes": result.num_target_passes,
        "drafted": result.num_drafted,
        "accepted": result.num_accepted,
        "judged": sum(step.num_judged for step in result.steps),
        "drafting_steps": sum(bool(step.drafted) for step in result.steps),
        "steady_drafted": sum(len(step.drafted) for step in steady_steps),
    }


def _faster_whisper_models(wanted: bool) -> tuple[dict, str]:
    """{"float32": model, "int8": model} on the bundled base weights, or ({}, why not)."""
    if not wanted:
        return {}, "faster-whisper: left out (--no-faster-whisper)"
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        return {}, "faster-whisper: not installed (pip install faster-whisper), left out"
    folder = _ct2_base_folder()
    threads = torch.get_num_threads()
    models = {
        compute_type: WhisperModel(str(folder), device="cpu", compute_type=compute_type, cpu_threads=threads)
        for compute_type in ("float32", "int8")
    }
    return models, f"faster-whisper: the bundled base weights ({folder}), {threads} threads, beam 1"


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


def _faster_whisper_run(model, waveform: np.ndarray) -> Run:
    start = time.perf_counter()
    segments, _ = model.transcribe(
        waveform,
        language=LANGUAGE,
        beam_size=1,
        temperature=0.0,
        without_timestamps=True,
        condition_on_previous_text=False,
        vad_filter=False,
    )
    text = "".join(segment.text for segment in segments).strip()  # decoding happens while iterating
    return Run(time.perf_counter() - start, None, text)


# ---------------------------------------------------------------- step kinds against the memory floor


def copy_bandwidth(repeats: int = 10) -> float:
    """Bytes per second moved by copying a COPY_BYTES float32 tensor (read + write), median of repeats."""
    source = torch.rand(COPY_BYTES // 4)
    destination = torch.zeros_like(source)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        destination.copy_(source)
        seconds.append(time.perf_counter() - start)
    return 2 * COPY_BYTES / statistics.median(seconds)


def step_bytes(model: nn.Module, positions: int, width: int) -> int:
    """Bytes one decoder step of `width` tokens reads: the weights it multiplies by (not the
    cross-attention key/value projections: those run once per window), the cross-attention keys and
    values over `positions` encoder states, and the self-attention cache."""
    weights = 0
    for name, module in [*model.model.decoder.named_modules(), ("proj_out", model.proj_out)]:
        if name.endswith(("encoder_attn.k_proj", "encoder_attn.v_proj")):
            continue
        weights += _own_weight_bytes(module)
    config = model.config
    cache = 2 * config.decoder_layers * config.d_model * 4 * (positions + PROMPT_TOKENS + width)
    return weights + cache


def _own_weight_bytes(module: nn.Module) -> int:
    if isinstance(module, nn.Linear):
        return sum(p.numel() * p.element_size() for p in (module.weight, module.bias) if p is not None)
    if hasattr(module, "_packed_params"):  # a dynamically quantised int8 linear layer
        weight, bias = module._weight_bias()
        return weight.numel() + (bias.numel() * 4 if bias is not None else 0)
    return 0


def step_costs(bench: CpuBench, waveform: np.ndarray, log) -> dict:
    """Each step kind's median seconds, bytes read and memory floor; kinds interleaved over rounds."""
    target = bench.whisper.pair.target
    clip_features = features(target, waveform)
    k = bench.options.num_draft_tokens
    kinds = {
        "target, 1 token": (target.model, encode(target.model, clip_features)[0], 1, CachedDecoder),
        f"target, {k + 1} tokens": (
            target.model,
            encode(target.model, clip_features)[0],
            k + 1,
            CachedDecoder,
        ),
    }
    for name, whisper in bench.variants.items():
        draft, settings = whisper.pair.draft.model, whisper.pair.draft_settings
        frames = draft_frames(settings, clip_features, WINDOW_FRAMES)
        decoder = lean_decoder if settings.lean_step else CachedDecoder
        hidden = pooled_states(encode(draft, clip_features[..., :frames])[0], settings.frame_pooling)
        kinds[f"draft {name}, 1 token"] = (draft, hidden, 1, decoder)
    seconds: dict[str, list[float]] = {name: [] for name in kinds}
    bandwidths = []
    rounds = 4
    for _ in range(rounds):  # the bandwidth between the steps, so that both see the same load
        bandwidths.append(copy_bandwidth(repeats=3))
        for name, (model, hidden, width, decoder) in kinds.items():
            repeats = max(1, bench.options.step_repeats // rounds)
            seconds[name] += _time_steps(decoder(model, hidden), width, repeats)
    bandwidth = statistics.median(bandwidths)
    log(f"memory bandwidth (copy): {bandwidth / 1e9:.1f} GB/s")
    found = {}
    for name, (model, hidden, width, _) in kinds.items():
        read = step_bytes(model, hidden.shape[1], width)
        median = statistics.median(seconds[name])
        found[name] = {"seconds": median, "bytes": read, "floor_seconds": read / bandwidth}
    return {"bandwidth_bytes_per_second": bandwidth, "kinds": found}


def _time_steps(decoder: CachedDecoder, width: int, repeats: int) -> list[float]:
    decoder.feed([list(range(50, 50 + PROMPT_TOKENS))])
    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        decoder.feed([list(range(100, 100 + width))])
        seconds.append(time.perf_counter() - start)
        decoder.rollback([PROMPT_TOKENS])
    return seconds[1:]  # the first one grows the cache
