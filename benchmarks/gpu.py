"""`python -m benchmarks gpu`: the GPU record, every way to decode the same rows at batch 1, 4 and 8.

Rows per (dtype, batch size): transformers `generate()`; `generate()` with a static cache and its forward
compiled (`torch.compile(mode="reduce-overhead", fullgraph=True)` under SDPA's math kernel: the recipe of
transformers' cache guide and the Whisper model cards; on CUDA only, a CPU runs the static cache
uncompiled); transformers' assisted generation with the shared-encoder draft (batch 1: it takes no batch);
our loop with the target alone and speculative with each draft at planted agreement α
(`benchmarks.controlled`, each row its own plan), and at batch 1 each draft deciding for itself (adaptive
k, as the app decodes), each "eager" and, where the engine's replay is available (CUDA), "replayed"
(`specdec.engine.replay`: the decoder steps replayed as captured CUDA graphs).

Clips are encoded once per model (`tokens.EncoderMemo`) and no timing includes an encoder: decode time is
the batch's wall clock, from the first decoder pass to the last token. Every configuration runs once
untimed at full length (on a CPU: 2 tokens; the compiled one twice, which compiles and captures), then
`repeats` interleaved rounds; medians. The replayed configurations run in rounds of their own after the
eager ones of their batch size, and the static-cache generate() after every batch size's (compiling takes
minutes); a compile or a capture that fails is recorded (`errors`) and the run goes on, the static cache
uncompiled, without replayed rows. Each row's tokens are compared with
`generate()`'s at the same batch size and dtype. The record is written as each phase ends, so a run cut
short keeps what it measured (`benchmarks.gpu_report`); docs/benchmarks.md ("On a GPU") reads it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.modeling_outputs import BaseModelOutput

from benchmarks.batch import RowEncoder
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.controlled import controlled, planted, row_plans
from benchmarks.tokens import LANGUAGE, Bench, BenchOptions, Clip, Config, synchronize, target_passes
from specdec.engine.windows import decode_clips
from specdec.options import DecodeOptions
from specdec.whisper.features import PairFeatures, window_features
from specdec.whisper.models import ModelPair

try:  # the engine's CUDA-graph replay, where this version has it
    from specdec.engine import replay
except ImportError:
    replay = None

RECOMPILE_LIMIT = 64  # compiled graphs kept per function: batch sizes x dtypes x (prompt, one token)


@dataclass(frozen=True)
class GpuBenchOptions:
    OUT: ClassVar[str] = "docs/bench-gpu-graphs.json"  # where --out points unless told
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    batch_sizes: tuple[int, ...] = (1, 4, 8)  # rows cycle through assets/*.wav, each row its own plan
    dtypes: tuple[str, ...] = ("float16", "bfloat16")  # each loads the models anew
    alpha: float = 0.8  # planted agreement of every speculative row
    num_draft_tokens: int = 5  # k
    max_new_tokens: int = 64  # per row
    repeats: int = 3  # interleaved timed rounds
    compile: bool = True  # CUDA: the static-cache generate() compiled; off, or on a CPU: uncompiled
    keep: bool = (
        True  # rows of other dtypes already in --out from the same device stay (a record in two runs)
    )
    seed: int = 0  # model weights; row i's plan is seeded seed + i
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"


@dataclass(frozen=True)
class GpuConfig:
    name: str
    engine: str  # "generate", "static" (generate() with a static cache), "assisted" or "specdec"
    draft: str | None = None  # draft folder name; None: the target alone
    replayed: bool = False  # specdec: decoder steps replayed as CUDA graphs (`engine.replay`)
    adaptive: bool = False  # specdec: the draft's own choices, adaptive k (as the app decodes), no plan


@dataclass
class Outcome:
    """One configuration at one batch size: each round's decode seconds, and the last round's output."""

    seconds: list[float]
    token_ids: list[tuple[int, ...]]  # per row
    target_passes: int = 0


class GpuBench:
    """The models of one dtype (`tokens.Bench`), the clips, every row's plan; runs a configuration once."""

    def __init__(self, options: GpuBenchOptions, dtype: str, log: Callable[[str], None] = print) -> None:
        self.options, self.dtype, self.log = options, dtype, log
        self.bench = Bench(
            BenchOptions(
                size=options.size, alphas=(options.alpha,), num_draft_tokens=options.num_draft_tokens,
                max_new_tokens=options.max_new_tokens, seed=options.seed, cache_dir=options.cache_dir,
                device=options.device, dtype=dtype,
            ),
            log,
        )  # fmt: skip
        self.on_cuda = self.bench.options.torch_device.type == "cuda"
        self.compiled = options.compile and self.on_cuda
        self.clips: list[Clip] = []
        alone = {}
        for index, clip in enumerate(self.bench.clips()):  # the target's tokens, to plant agreement on
            alone[clip.name] = self.bench.run(Config("target-only", "specdec"), clip, options.max_new_tokens)
            self.bench.make_plans(clip, alone[clip.name].result, options.seed + index)
            # generate() is given the encoder's output, so a row must stay in its first window (always so
            # at large-v3 size; the demo models end some segments early and seek on)
            if len({token.window for token in alone[clip.name].result.tokens}) == 1:
                self.clips.append(clip)
            else:
                log(f"{clip.name}: left out, its target-alone decoding seeks past its first window")
        if not self.clips:
            raise SystemExit("gpu: every clip's decoding seeks past its first window; ask fewer tokens")
        rows = max(options.batch_sizes)
        self.row_clips = [self.clips[i % len(self.clips)] for i in range(rows)]
        self.plans = row_plans([alone[c.name].result for c in self.row_clips], options.alpha, options.seed)
        self.encoder = RowEncoder(self.bench.memo)
        self._compiled_forward = None
        self.errors: list[str] = []  # what failed and was left out or done otherwise (compiling, replay)
        self.references: dict[int, Outcome] = {}  # generate()'s, by batch size

    def configs(self, batch: int, replayed: bool) -> list[GpuConfig]:
        """The configurations of one batch size but the static-cache generate(): the eager ones, or
        (replayed) those the replay changes."""
        k, alpha = self.options.num_draft_tokens, self.options.alpha
        mode = "replayed" if replayed else "eager"
        found = [] if replayed else [GpuConfig("generate()", "generate")]
        if batch == 1 and not replayed:
            found += [
                GpuConfig(f"assisted {name} k={k} α={alpha:g}", "assisted", name)
                for name in self.bench.assistants
            ]
        found.append(GpuConfig(f"specdec target-only {mode}", "specdec", None, replayed))
        found += [
            GpuConfig(f"specdec {name} k={k} α={alpha:g} {mode}", "specdec", name, replayed)
            for name in self.bench.pairs
        ]
        if batch == 1:  # as the app's Compare decodes: its figures are read beside these (`app_check`)
            found += [
                GpuConfig(f"specdec {n} adaptive {mode}", "specdec", n, replayed, True)
                for n in self.bench.pairs
            ]
        return found

    @property
    def _static_name(self) -> str:
        return "generate() static+compile" if self.compiled else "generate() static"

    def run(self, config: GpuConfig, batch: int, max_new_tokens: int) -> Outcome:
        """Decode the first `batch` rows together, one way, once."""
        rows = self.row_clips[:batch]
        if config.engine == "assisted":
            alpha = self.options.alpha
            tokens_config = Config(
                config.name, "assisted", config.draft, alpha, False, self.options.num_draft_tokens
            )
            measured = self.bench.run(tokens_config, rows[0], max_new_tokens)
            return Outcome(measured.seconds, [measured.token_ids], measured.target_passes)
        if config.engine == "specdec":
            return self._specdec(config, rows, max_new_tokens)
        return self._generate(rows, config.engine == "static", max_new_tokens)

    def _generate(self, rows: list[Clip], static: bool, max_new_tokens: int) -> Outcome:
        model = self.bench.target.model
        hidden = torch.cat(
            [self.bench.memo(model, window_features(c.features["target"], 0))[0] for c in rows]
        )
        kwargs = {
            "language": LANGUAGE,
            "max_new_tokens": max_new_tokens,
            "encoder_outputs": BaseModelOutput(last_hidden_state=hidden),  # (batch, frames, d_model)
        }
        context = nullcontext()
        if static:
            # generate()'s own automatic compile is off: the compiled forward below is the one compiled
            kwargs |= {"cache_implementation": "static", "disable_compile": True}
            if self.compiled:
                model.forward = self._compiled()
                context = sdpa_kernel(SDPBackend.MATH)
        try:
            with target_passes(model) as passes, context, torch.inference_mode():
                synchronize(model)
                start = time.perf_counter()
                output = model.generate(**kwargs)
                synchronize(model)
                seconds = time.perf_counter() - start
        finally:
            model.__dict__.pop("forward", None)  # the class's forward again, for every other configuration
        eos = model.generation_config.eos_token_id
        return Outcome([seconds], [_without_end(row.tolist(), eos) for row in output], passes.calls)

    def _compiled(self) -> Callable:
        """The target's forward compiled once, as transformers documents it for a static cache."""
        if self._compiled_forward is None:
            config = torch._dynamo.config
            for name in ("recompile_limit", "cache_size_limit"):  # the name changed between versions
                if hasattr(config, name):
                    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
            model = self.bench.target.model
            self._compiled_forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        return self._compiled_forward

    def _specdec(self, config: GpuConfig, rows: list[Clip], max_new_tokens: int) -> Outcome:
        batch = len(rows)
        pair = self.bench.pairs.get(config.draft) or ModelPair(self.bench.target, None, None, None)
        options = DecodeOptions(
            language=LANGUAGE,
            max_new_tokens=max_new_tokens,
            num_draft_tokens=self.options.num_draft_tokens,
            adaptive=config.adaptive,
        )
        make_drafter = None
        if config.draft and not config.adaptive:
            make_drafter, options = controlled(pair, self.plans[:batch]), planted(options)
        features = [PairFeatures(clip.features["target"], clip.features.get(config.draft)) for clip in rows]
        start = time.perf_counter()
        results = decode_clips(
            pair, features, options, config.draft is not None, make_drafter, encoder=self.encoder
        )
        encodings = {e.index: e for result in results for e in result.encodings}  # shared by the rows
        seconds = time.perf_counter() - start - sum(e.seconds for e in encodings.values())
        passes = {p.index for result in results for p in result.passes}
        return Outcome([seconds], [result.token_ids for result in results], len(passes))

    def replay_models(self) -> list[torch.nn.Module]:
        """The models whose decoder steps the replay captures: the target's first, then each draft's."""
        return [self.bench.target.model, *(pair.draft.model for pair in self.bench.pairs.values())]

    def measure(self, batch: int) -> Iterator[list[dict]]:
        """Our configurations and transformers' but the static cache at one batch size, in phases whose
        rows come as each ends: the eager ones with generate(), then the replayed ones where the replay
        enables (a capture that fails is recorded, and no replayed rows come)."""
        outcomes = self._rounds(self.configs(batch, replayed=False), batch)
        self.references[batch] = outcomes[GpuConfig("generate()", "generate")]
        yield self._rows(batch, outcomes, self.references[batch])
        if replay is None or not replay.enable(self.bench.target.model):
            return
        try:
            for model in self.replay_models()[1:]:
                replay.enable(model)
            outcomes = self._rounds(self.configs(batch, replayed=True), batch)
        except Exception as error:  # one unattended run on a GPU: the other rows still count
            self._failed(f"replayed, batch {batch}", error)
            return
        finally:
            for model in self.replay_models():
                replay.disable(model)
        yield self._rows(batch, outcomes, self.references[batch])

    def measure_static(self, batch: int) -> list[dict]:
        """The static-cache generate() at a batch size `measure` has run: compiling takes minutes, and a
        compile that fails is recorded, and the static cache runs uncompiled from then on."""
        try:
            outcomes = self._rounds([GpuConfig(self._static_name, "static")], batch)
        except Exception as error:
            if not self.compiled:
                raise
            self._failed(f"torch.compile, batch {batch}", error)
            self.compiled = False
            self.bench.target.model.__dict__.pop("forward", None)
            torch._dynamo.reset()
            outcomes = self._rounds([GpuConfig(self._static_name, "static")], batch)
        return self._rows(batch, outcomes, self.references[batch])

    def _failed(self, what: str, error: Exception) -> None:
        self.errors.append(f"{what}: {type(error).__name__}: {str(error)[:400]}")
        self.log(f"!!! {self.errors[-1]}")

    def _rounds(self, configs: list[GpuConfig], batch: int) -> dict[GpuConfig, Outcome]:
        tokens = self.options.max_new_tokens
        for config in configs:  # first calls (new shapes, allocations, compiling) are not timed
            for _ in range(2 if config.engine == "static" and self.compiled else 1):
                self.run(config, batch, tokens if self.on_cuda else min(tokens, 2))
        kept: dict[GpuConfig, Outcome] = {}
        for round_index in range(self.options.repeats):
            shift = round_index % len(configs)  # a different order each round
            for config in configs[shift:] + configs[:shift]:
                outcome = self.run(config, batch, tokens)
                if config in kept:
                    kept[config].seconds += outcome.seconds
                    kept[config].token_ids = outcome.token_ids
                else:
                    kept[config] = outcome
        return kept

    def _rows(self, batch: int, outcomes: dict[GpuConfig, Outcome], reference: Outcome) -> list[dict]:
        generate_seconds = statistics.median(reference.seconds)
        rows = []
        for config, outcome in outcomes.items():
            decode = statistics.median(outcome.seconds)
            pair = self.bench.pairs.get(config.draft)
            expected = reference.token_ids[: len(outcome.token_ids)]
            tokens = sum(len(ids) for ids in outcome.token_ids)
            rows.append({
                "config": config.name,
                "batch": batch,
                "dtype": self.dtype,
                "decode_seconds": decode,
                "decode_speedup_vs_generate": generate_seconds / decode,
                "identical": outcome.token_ids == expected,
                "engine": config.engine,
                "draft": config.draft,
                "draft_kind": pair.kind.value if pair else None,
                "mode": "replayed" if config.replayed else "eager",
                "planted_alpha": self.options.alpha if config.draft and not config.adaptive else None,
                "compiled": config.engine == "static" and self.compiled,
                "rows": len(outcome.token_ids),  # assisted generation: 1 whatever the batch
                "tokens": tokens,
                "target_passes": outcome.target_passes,
                "round_seconds": outcome.seconds,
                "mismatched_rows": [
                    i for i, (mine, theirs) in enumerate(zip(outcome.token_ids, expected, strict=True))
                    if mine != theirs
                ],
            })  # fmt: skip
        return rows


def _without_end(ids: list[int], eos: int) -> tuple[int, ...]:
    """A generate() row without its end-of-text and padding (the same id)."""
    while ids and ids[-1] == eos:
        ids.pop()
    return tuple(ids)
