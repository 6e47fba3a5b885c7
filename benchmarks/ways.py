"""Every way to decode the same rows, timed side by side: `python -m benchmarks tokens`, `batch` and `gpu`.

On a checkpoints preset's models (`runners.Models`), per dtype and batch size: transformers' generate()
(with a static cache, compiled on CUDA; assisted generation at batch 1) and our engine, the target alone
and each draft at planted acceptance α (`benchmarks.controlled`) or with its own choices, at fixed,
adaptive or cost-aware k, eager and replayed (CUDA graphs, where the engine has them), in rotated rounds.
Every row's tokens are compared with its batch's reference (generate()'s where it runs, else the target
alone's) and with its clip decoded alone. The three commands are three configurations of it (`Tokens`,
`Batch`, `Gpu`: their ways, goals and defaults); a compile or capture that fails is recorded and the run
goes on; the record is written as each phase ends. docs/benchmarks.md gives the method.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks import harness, plots
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.controlled import row_plans
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal, leviathan_bound, median, ratio
from benchmarks.runners import Clip, Models, Run
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, load_audio
from specdec.longform.chunked import CHUNK_BATCH_SIZE, plan_chunks
from specdec.options import DecodeOptions
from specdec.whisper.models import DraftKind

try:  # the engine's CUDA-graph replay, where this version has it
    from specdec.engine import replay
except ImportError:
    replay = None

RECOMPILE_LIMIT = 64  # compiled graphs kept per function: batch sizes x dtypes x (prompt, one token)


@dataclass(frozen=True)
class Way:
    """One way of decoding; `name` labels it in tables and plots."""

    name: str
    engine: str  # "generate", "static" (generate() with a static cache), "assisted" or "specdec"
    draft: str | None = None  # draft folder name; None: the target alone
    alpha: float | None = None  # planted agreement; None: the draft's own choices
    adaptive: bool = False  # specdec: adaptive k (else fixed at num_draft_tokens)
    cost_aware: bool = False  # specdec: k chosen each step from measured costs (`engine.draft_length`)
    replayed: bool = False  # specdec: decoder steps replayed as CUDA graphs (`engine.replay`)


@dataclass(frozen=True)
class WaysOptions:
    NAME: ClassVar[str] = "ways.json"  # the record's file in --out
    OUT: ClassVar[str | None] = None  # a record kept in the repository: where --out points unless told
    QUICK: ClassVar[dict] = {}  # --quick: these fields, where left at their defaults
    ASSISTED: ClassVar[bool] = True  # load the assistants transformers' assisted generation runs
    STATIC: ClassVar[bool] = False  # generate() with a static cache too, after the other ways
    REPLAY: ClassVar[bool] = False  # our ways again with decoder steps replayed, where the engine has it
    FIGURE: ClassVar[bool] = True  # the HTML figure beside the record
    size: str = "small"  # a checkpoints preset: "small" (demo models) or "large-v3" (real architectures)
    quick: bool = False  # a short run (see each benchmark's QUICK)
    audio: tuple[str, ...] = ()  # more clips besides assets/*.wav
    clips: int | None = None  # the first this many of assets/*.wav; None: all
    batch_sizes: tuple[int, ...] = (1,)  # rows cycle through the clips, each row its own plan
    dtypes: tuple[str, ...] = ("float32",)  # the models' weights and activations; each loads them anew
    alphas: tuple[float, ...] = (0.8,)  # planted agreement rates
    num_draft_tokens: int = 5  # k of the fixed-k ways (and where adaptive k starts)
    max_new_tokens: int = 64  # per row
    repeats: int = 3  # interleaved timed rounds
    every_clip: bool = False  # each batch size decodes every clip (in as many batches as needed)
    drafts: int | None = None  # the first this many drafts, the shared-encoder one first; None: all
    compile: bool = True  # CUDA: the static-cache generate() compiled; off, or on a CPU: uncompiled
    keep: bool = False  # rows of other dtypes already in the record from the same device stay
    seed: int = 0  # model weights; row i's plan is seeded seed + i
    cache_dir: Path = DEFAULT_CACHE
    device: str = "cpu"  # where the models run: "cpu" or "cuda"

    def resolved(self) -> WaysOptions:
        """With --quick, the QUICK fields that were left at their defaults."""
        defaults = {f.name: f.default for f in fields(self)}
        quick = {k: v for k, v in self.QUICK.items() if getattr(self, k) == defaults[k]} if self.quick else {}
        return replace(self, **quick)

    def ways(self, drafts: list[str], assistants: dict, batch: int, replayed: bool) -> list[Way]:
        raise NotImplementedError

    def goals(self, rows: list[dict]) -> list[dict]:
        return []

    def waveforms(self) -> dict[str, np.ndarray]:
        """The clips by name (16 kHz): assets/*.wav, then --audio."""
        paths = [*sorted(ASSETS.glob("*.wav"))[: self.clips], *map(Path, self.audio)]
        return {path.stem: load_audio(path) for path in paths}

    def summary(self, ways: Ways, rows: list[dict]) -> dict:
        """What the record adds for this benchmark (printed too)."""
        return {}


@dataclass(frozen=True)
class BenchOptions(WaysOptions):
    """`tokens`: every way at batch 1 on every clip, α swept, against Leviathan et al.'s bound."""

    NAME = "bench.json"
    QUICK = {"clips": 1, "alphas": (0.6, 0.8, 0.95), "max_new_tokens": 32}
    alphas: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)  # planted agreement rates
    every_clip: bool = True  # each batch size decodes every clip (in as many batches as needed)

    def ways(self, drafts: list[str], assistants: dict, batch: int, replayed: bool) -> list[Way]:
        k = self.num_draft_tokens
        found = [Way("generate()", "generate"), Way("specdec target-only", "specdec")]
        for name in drafts:
            assisted = name in assistants
            found += [
                Way(f"specdec {name} k={k}", "specdec", name),
                Way(f"specdec {name} adaptive", "specdec", name, adaptive=True),
                # a useless draft (planted α = 0): what adaptive drafting costs when drafting cannot help
                Way(f"specdec {name} adaptive α=0", "specdec", name, 0.0, adaptive=True),
                *([Way(f"assisted {name} k={k}", "assisted", name)] if assisted else []),
            ]
            for alpha in self.alphas:
                found.append(Way(f"specdec {name} k={k} α={alpha:g}", "specdec", name, alpha))
                if assisted:
                    found.append(Way(f"assisted {name} k={k} α={alpha:g}", "assisted", name, alpha))
        return found

    def goals(self, rows: list[dict]) -> list[dict]:
        by_name, k, found = {row["config"]: row for row in rows}, self.num_draft_tokens, []
        for draft in dict.fromkeys(row["draft"] for row in rows if row["draft"]):
            for alpha in (0.6, 0.8, 0.95):
                row = by_name.get(f"specdec {draft} k={k} α={alpha:g}")
                found.append(goal(f"efficiency {draft} α={alpha:g}", row and row["efficiency"], ">=", 0.9))
            row, assisted = (
                by_name.get(f"specdec {draft} k={k} α=0.8"),
                by_name.get(f"assisted {draft} k={k} α=0.8"),
            )
            label = f"speedup over generate() {draft} α=0.8"
            found.append(goal(label, row and row["x_generate_steady"], ">=", 1.5))
            if assisted is not None and row is not None:
                value = assisted["steady_seconds"] / row["steady_seconds"]
                found.append(goal(f"speedup over assisted generation {draft} α=0.8", value, ">=", 1.2))
            useless = by_name.get(f"specdec {draft} adaptive α=0")
            if useless is not None:
                slowdown = 1 / useless["x_alone_steady"] - 1
                found.append(goal(f"adaptive slowdown vs target-only, {draft} α=0", slowdown, "<", 0.1))
        return found


@dataclass(frozen=True)
class BatchBenchOptions(WaysOptions):
    """`batch`: batch sizes 1-16, each draft at fixed and cost-aware k, against the batched target alone."""

    NAME = "batch.json"
    QUICK = {"drafts": 1, "max_new_tokens": 24, "repeats": 1}
    ASSISTED = False
    GOALS: ClassVar[dict] = {8: 1.5, 16: 1.2}  # batch size -> speedup over the batched target alone
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)  # rows cycle through the clips, each row its own plan
    max_new_tokens: int = 32  # per row

    def ways(self, drafts: list[str], assistants: dict, batch: int, replayed: bool) -> list[Way]:
        k, alpha = self.num_draft_tokens, self.alphas[0]
        found = [Way("target alone", "specdec")]
        found += [Way(f"{name} k={k}", "specdec", name, alpha) for name in drafts]
        return found + [Way(f"{name} cost-aware", "specdec", name, alpha, cost_aware=True) for name in drafts]

    def goals(self, rows: list[dict]) -> list[dict]:
        found = []
        for name in dict.fromkeys(r["config"] for r in rows if r["draft"]):
            for batch, threshold in self.GOALS.items():
                row = next((r for r in rows if r["config"] == name and r["batch"] == batch), None)
                for part, key in (("steady", "x_alone_steady"), ("whole decode", "x_alone")):
                    label = f"speedup over the batched target alone ({part}), {name}, batch {batch}"
                    found.append(goal(label, row[key] if row else None, ">=", threshold))
        return found


@dataclass(frozen=True)
class GpuBenchOptions(WaysOptions):
    """`gpu`: the GPU record, in half precision at batch 1, 4 and 8, eager and replayed."""

    NAME = "bench-gpu-graphs.json"
    OUT = "docs/bench-gpu-graphs.json"
    STATIC, REPLAY, FIGURE = True, True, False
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    batch_sizes: tuple[int, ...] = (1, 4, 8)  # rows cycle through the clips, each row its own plan
    dtypes: tuple[str, ...] = ("float16", "bfloat16")  # the weights and activations; each loads them anew
    keep: bool = True  # rows of other dtypes already in the record from the same device stay

    def ways(self, drafts: list[str], assistants: dict, batch: int, replayed: bool) -> list[Way]:
        k, alpha, mode = self.num_draft_tokens, self.alphas[0], "replayed" if replayed else "eager"
        found = [] if replayed else [Way("generate()", "generate")]
        if batch == 1 and not replayed:
            found += [Way(f"assisted {n} k={k} α={alpha:g}", "assisted", n, alpha) for n in assistants]
        found.append(Way(f"specdec target-only {mode}", "specdec", replayed=replayed))
        found += [
            Way(f"specdec {n} k={k} α={alpha:g} {mode}", "specdec", n, alpha, replayed=replayed)
            for n in drafts
        ]
        if batch == 1:  # as the app's Compare decodes: its figures are read beside these (`benchmarks app`)
            found += [
                Way(f"specdec {n} adaptive {mode}", "specdec", n, None, True, replayed=replayed)
                for n in drafts
            ]
        return found

    def goals(self, rows: list[dict]) -> list[dict]:
        """At batch 1 (float16 where measured, else the first dtype), batch 8 for pass cost."""
        dtype = (
            "float16" if any(r["dtype"] == "float16" for r in rows) else rows[0]["dtype"] if rows else None
        )
        mine = [row for row in rows if row["dtype"] == dtype]

        def seconds(batch: int, predicate: Callable[[dict], bool]) -> float | None:
            found = [row["decode_seconds"] for row in mine if row["batch"] == batch and predicate(row)]
            return min(found) if found else None  # replayed where measured: the faster of eager and replayed

        alone = seconds(1, lambda r: r["engine"] == "specdec" and r["draft"] is None)
        generated = seconds(1, lambda r: r["engine"] == "generate")
        transformers_best = seconds(1, lambda r: r["engine"] in ("static", "assisted"))
        found = []
        for kind, label in (
            (DraftKind.SEPARATE_OTHER_VOCAB, "tiny-size"),
            (DraftKind.SHARED_ENCODER, "distil-size"),
        ):
            ours = seconds(1, lambda r, kind=kind: _planted(r) and r["draft_kind"] == kind.value)
            found += [
                goal(f"speculative ({label}) over generate(), {dtype}", ratio(generated, ours), ">=", 5.0),
                goal(f"speculative ({label}) over our target alone", ratio(alone, ours), ">=", 2.0),
                goal(f"speculative ({label}) over the faster of static+compile and assisted",
                     ratio(transformers_best, ours), ">=", 1.5),
            ]  # fmt: skip
        eight = seconds(8, lambda r: r["engine"] == "specdec" and r["draft"] is None)
        label = "batch 8 pass cost over batch 1 (target alone), at most"
        return [*found, goal(label, ratio(eight, alone), "<", 1.5)]


@dataclass(frozen=True)
class LongBenchOptions(WaysOptions):
    """`long`: a long clip in chunked mode, its chunks the rows, in batches as the app decodes them."""

    NAME = "long.json"
    ASSISTED = False
    size: str = "large-v3"  # a checkpoints preset: "large-v3" (real architectures) or "small" (demo models)
    minutes: float = 10.0  # length of the clip made from assets/*.wav, a second of silence between them
    audio: tuple[str, ...] = ()  # a long file to use instead
    alphas: tuple[float, ...] = (0.8,)  # planted agreement per chunk; none: the draft's own agreement
    draft: str | None = None  # draft folder name; None: the shared-encoder (distil-size) draft
    cost_aware: bool = True  # each step's k from the batch's measured costs, as the app's chunked mode
    batch_sizes: tuple[int, ...] = (CHUNK_BATCH_SIZE,)  # chunks decoded together
    max_new_tokens: int = 32  # per chunk
    repeats: int = 2  # interleaved timed rounds
    every_clip: bool = True  # each batch size decodes every clip (in as many batches as needed)

    def ways(self, drafts: list[str], assistants: dict, batch: int, replayed: bool) -> list[Way]:
        draft, alpha = self.draft or drafts[0], self.alphas[0] if self.alphas else None
        k = "cost-aware" if self.cost_aware else f"k={self.num_draft_tokens}"
        return [
            Way("target alone", "specdec"),
            Way(f"{draft} {k}", "specdec", draft, alpha, cost_aware=self.cost_aware),
        ]

    def waveform(self) -> np.ndarray:
        return (
            load_audio(self.audio[0], max_seconds=MAX_LONG_SECONDS) if self.audio else long_clip(self.minutes)
        )

    def waveforms(self) -> dict[str, np.ndarray]:
        """The long clip's chunks (`longform.chunked.plan_chunks`), by their place."""
        waveform = self.waveform()
        return {f"chunk {i}": waveform[c.start : c.stop] for i, c in enumerate(plan_chunks(len(waveform)))}

    def summary(self, ways: Ways, rows: list[dict]) -> dict:
        """The clip's length and each way's real-time factor, every chunk's encoders (once) included."""
        audio, draft = len(self.waveform()) / SAMPLE_RATE, rows[-1]["draft"]
        encoder = sum(c.encoder_seconds.get(name, 0.0) for c in ways.clips for name in ("target", draft))
        rtf = {row["config"]: (row["decode_seconds"] + encoder) / audio for row in rows}
        return {
            "audio_seconds": audio,
            "chunks": len(ways.clips),
            "encoder_seconds": encoder,
            "real_time_factor": rtf,
        }


def long_clip(minutes: float) -> np.ndarray:
    """assets/*.wav one after another, a second of silence between them, cut at `minutes` (16 kHz)."""
    clips = [load_audio(path) for path in sorted(ASSETS.glob("*.wav"))]
    gap, wanted = np.zeros(SAMPLE_RATE, dtype=np.float32), round(minutes * 60 * SAMPLE_RATE)
    pieces = [
        part
        for _ in range(wanted // sum(len(c) + len(gap) for c in clips) + 1)
        for c in clips
        for part in (c, gap)
    ]
    return np.concatenate(pieces)[:wanted]


def _planted(row: dict) -> bool:
    return row["engine"] == "specdec" and row["planted_alpha"] is not None


class Ways:
    """The models of one dtype, the clips, the rows and every row's plans; decodes a group of rows one way."""

    def __init__(self, options: WaysOptions, dtype: str, log: Callable[[str], None] = print) -> None:
        self.options, self.dtype, self.log = options, dtype, log
        self.models = Models(
            options.size, options.seed, options.cache_dir, options.device, dtype, log, options.ASSISTED
        )
        self.on_cuda, self.errors = self.models.device.type == "cuda", []
        self.compiled, self._compiled_forward = options.compile and self.on_cuda, None
        self.drafts = self.models.shared_encoder_first()[: options.drafts]
        self.clips: list[Clip] = []
        self.alone = {}  # clip name -> the target alone's result (batched as the smallest batch size)
        clips, size = self.models.clips(options.waveforms()), min(options.batch_sizes)
        results = [
            r
            for i in range(0, len(clips), size)
            for r in self.run(Way("alone", "specdec"), clips[i : i + size]).results
        ]
        for index, (clip, result) in enumerate(zip(clips, results, strict=True)):
            self.alone[clip.name] = result
            self.models.make_plans(clip, result, options.alphas, options.seed + index)
            # generate() is given the encoder's output, so a batched row must stay in its first window
            # (always so at large-v3 size; the demo models end some segments early and seek on)
            if not self._one_window or len({token.window for token in result.tokens}) == 1:
                self.clips.append(clip)
            else:
                log(f"{clip.name}: left out, its target-alone decoding seeks past its first window")
        if not self.clips:
            raise SystemExit("every clip's decoding seeks past its first window; ask fewer tokens")
        self.groups = {batch: self._groups(batch) for batch in options.batch_sizes}
        count = max(index for groups in self.groups.values() for group in groups for index in group) + 1
        self.row_clips = [self.clips[i % len(self.clips)] for i in range(count)]
        references = [self.alone[clip.name] for clip in self.row_clips]
        self.plans = {alpha: row_plans(references, alpha, options.seed) for alpha in {0.0, *options.alphas}}
        if not self.on_cuda and all(len({t.window for t in r.tokens}) == 1 for r in self.alone.values()):
            self._release_target_encoder()  # every window the ways need is memoised
        self.references: dict[int, dict] = {}  # by batch size: generate()'s and the target alone's runs
        # our rows equal their clips decoded alone whatever the batch in float32 on a CPU; in half
        # precision or on CUDA kernels differ by batch shape, and the batch's own reference rules
        self.batch_invariant = dtype == "float32" and not self.on_cuda

    @property
    def _one_window(self) -> bool:
        """Whether a row must stay in its first window: generate() given the encoder's output, batched."""
        batch = max(self.options.batch_sizes)
        ways = self.options.ways(self.drafts, {}, batch, replayed=False)
        return batch > 1 and (self.options.STATIC or any(way.engine != "specdec" for way in ways))

    def _groups(self, batch: int) -> list[tuple[int, ...]]:
        """Each batch's rows: every clip, `batch` at a time (`every_clip`), else the first `batch`."""
        count = len(self.clips) if self.options.every_clip else batch
        return [tuple(range(first, min(first + batch, count))) for first in range(0, count, batch)]

    def _release_target_encoder(self) -> None:
        """Free the weights of the target's encoder (2.5 GB for large-v3; the shared-encoder draft's too):
        its outputs are memoised, keyed by the module, which stays and refuses to run."""
        encoder = self.models.target.model.model.encoder
        for parameter in encoder.parameters():
            parameter.data = parameter.data.new_empty(0)
        encoder.register_forward_pre_hook(_released)

    def run(self, way: Way, rows: list[Clip], tokens: int | None = None, plans: list | None = None) -> Run:
        """Decode the rows together, one way, once."""
        tokens = tokens or self.options.max_new_tokens
        if way.engine == "static":
            return self._static(rows, tokens)
        return decode(self.models, way, rows, tokens, self.options.num_draft_tokens, plans)

    def run_group(self, way: Way, group: tuple[int, ...], tokens: int | None = None) -> Run:
        plans = self.plans[way.alpha] if way.draft and way.alpha is not None else None
        rows = [self.row_clips[i] for i in group]
        return self.run(way, rows, tokens, plans and [plans[i] for i in group])

    def _static(self, rows: list[Clip], tokens: int) -> Run:
        """generate() with a static cache (its own automatic compile off: the forward below is compiled)."""
        model, context = self.models.target.model, nullcontext()
        if self.compiled:
            model.forward = self._compiled()
            context = sdpa_kernel(SDPBackend.MATH)
        try:
            with context:
                return self.models.generate(rows, tokens, cache_implementation="static", disable_compile=True)
        finally:
            model.__dict__.pop("forward", None)  # the class's forward again, for every other way

    def _compiled(self) -> Callable:
        """The target's forward compiled once, as transformers documents it for a static cache."""
        if self._compiled_forward is None:
            config = torch._dynamo.config
            for name in ("recompile_limit", "cache_size_limit"):  # the name changed between versions
                if hasattr(config, name):
                    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
            model = self.models.target.model
            self._compiled_forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        return self._compiled_forward

    def replay_models(self) -> list[torch.nn.Module]:
        """The models whose decoder steps the replay captures: the target's first, then each draft's."""
        return [self.models.target.model, *(self.models.pairs[name].draft.model for name in self.drafts)]

    def measure(self, batch: int) -> Iterator[list[dict]]:
        """Every way but the static cache at one batch size, in phases whose rows come as each ends: the
        eager ones, then the replayed ones where the replay enables (a capture that fails is recorded,
        and no replayed rows come)."""
        ways = self.options.ways(self.drafts, self.models.assistants, batch, replayed=False)
        outcomes = self._rounds(ways, batch)
        generated = next((outcomes[w] for w in ways if w.engine == "generate"), None)
        self.references[batch] = {"generate": generated, "alone": outcomes[_alone(ways)]}
        yield self._rows(batch, outcomes)
        if not self.options.REPLAY or replay is None or not replay.enable(self.models.target.model):
            return
        try:
            for model in self.replay_models()[1:]:
                replay.enable(model)
            ways = self.options.ways(self.drafts, self.models.assistants, batch, replayed=True)
            outcomes = self._rounds(ways, batch)
        except Exception as error:  # one unattended run on a GPU: the other rows still count
            self._failed(f"replayed, batch {batch}", error)
            return
        finally:
            for model in self.replay_models():
                replay.disable(model)
        yield self._rows(batch, outcomes)

    @property
    def _static_way(self) -> Way:
        return Way("generate() static+compile" if self.compiled else "generate() static", "static")

    def measure_static(self, batch: int) -> list[dict]:
        """The static-cache generate() at a batch size `measure` has run: compiling takes minutes, and a
        compile that fails is recorded, and the static cache runs uncompiled from then on."""
        try:
            outcomes = self._rounds([self._static_way], batch)
        except Exception as error:
            if not self.compiled:
                raise
            self._failed(f"torch.compile, batch {batch}", error)
            self.compiled = False
            self.models.target.model.__dict__.pop("forward", None)
            torch._dynamo.reset()
            outcomes = self._rounds([self._static_way], batch)
        return self._rows(batch, outcomes)

    def _failed(self, what: str, error: Exception) -> None:
        self.errors.append(f"{what}: {type(error).__name__}: {str(error)[:400]}")
        self.log(f"!!! {self.errors[-1]}")

    def _rounds(self, ways: list[Way], batch: int) -> dict[Way, dict[tuple, list[Run]]]:
        """way -> group -> each round's run; every way's first calls untimed (on a CPU at the smallest
        batch only, two tokens: allocations and lazy packing; on CUDA every shape the rounds reach)."""
        groups, tokens = self.groups[batch], self.options.max_new_tokens

        def warm_up(way: Way) -> None:
            if self.on_cuda or batch == min(self.options.batch_sizes):
                for _ in range(2 if way.engine == "static" and self.compiled else 1):
                    self.run_group(way, groups[0], tokens if self.on_cuda else 2)

        runs = harness.rounds(ways, self.run_group, self.options.repeats, groups, warm_up, log=self.log)
        return {way: {group: runs[(way, group)] for group in groups} for way in ways}

    def _rows(self, batch: int, outcomes: dict[Way, dict[tuple, list[Run]]]) -> list[dict]:
        return [self._row(batch, way, runs) for way, runs in outcomes.items()]

    def _row(self, batch: int, way: Way, runs: dict[tuple, list[Run]]) -> dict:
        """One way at one batch size: times summed over groups (each the median of its rounds), speedups
        over the batch's generate() and target alone, the drafting statistics, the identity checks."""
        generated, alone = self.references[batch]["generate"], self.references[batch]["alone"]
        decode, steady = _total(runs), _total(runs, "steady_seconds")
        last = [group[-1] for group in runs.values()]  # greedy: every round's tokens are the same
        expected = [group[-1] for group in (generated or alone).values()]
        mismatched_rows, mismatched_alone = [], []
        for group, run, reference in zip(runs, last, expected, strict=True):
            for index, ids, theirs in zip(group, run.token_ids, reference.token_ids, strict=False):
                mismatched_rows += [index] if ids != theirs else []
                if self.batch_invariant and ids != self.alone[self.row_clips[index].name].token_ids:
                    mismatched_alone.append(index)
        results = [result for run in last for result in run.results]
        tokens, steps = (
            sum(len(ids) for run in last for ids in run.token_ids),
            [s for r in results for s in r.steps],
        )
        pair, fixed = self.models.pairs.get(way.draft), way.draft and not (way.adaptive or way.cost_aware)
        row = {
            "config": way.name, "batch": batch, "dtype": self.dtype, "engine": way.engine, "draft": way.draft,
            "draft_kind": pair.kind.value if pair else None, "mode": "replayed" if way.replayed else "eager",
            "planted_alpha": way.alpha if way.draft else None, "adaptive": way.adaptive,
            "cost_aware": way.cost_aware, "k": self.options.num_draft_tokens if fixed else None,
            "compiled": way.engine == "static" and self.compiled,
            "decode_seconds": decode, "first_pass_seconds": decode - steady, "steady_seconds": steady,
            "round_seconds": [sum(g[i].seconds for g in runs.values()) for i in range(self.options.repeats)],
            "x_generate": ratio(generated and _total(generated), decode),
            "x_generate_steady": ratio(generated and _total(generated, "steady_seconds"), steady),
            "x_alone": ratio(_total(alone), decode),
            "x_alone_steady": ratio(_total(alone, "steady_seconds"), steady),
            "rows": sum(len(run.token_ids) for run in last),  # assisted generation: 1 a group
            "tokens": tokens, "tokens_per_second": tokens / decode if decode else 0.0,
            "target_passes": sum(run.target_passes for run in last),
            "tokens_per_pass": tokens / len(steps) if steps else None,  # per row: over that row's passes
            "identical": not mismatched_rows, "mismatched_rows": mismatched_rows,
            "mismatched_alone": mismatched_alone,
        }  # fmt: skip
        return row | (
            self._drafting(row, steps, runs, alone) if way.engine == "specdec" and way.draft else {}
        )

    def _drafting(self, row: dict, steps: list, runs: dict, alone: dict) -> dict:
        """α and mean k; at batch 1 also the draft's cost ratio c (a drafted token's seconds over a steady
        target-alone pass's), Leviathan's bound at k (adaptive: the best fixed k's) and the efficiency."""
        drafted = sum(len(step.drafted) for step in steps)
        accepted, judged = sum(s.n_accepted for s in steps), sum(s.num_judged for s in steps)
        alone_passes = sum(len(group[-1].token_ids[0]) - 1 for group in alone.values())
        per_pass = _total(alone, "steady_seconds") / max(alone_passes, 1)
        draft_seconds = sum(median(r.results[0].draft_seconds for r in group) for group in runs.values())
        c = draft_seconds / drafted / per_pass if drafted and row["batch"] == 1 else 0.0
        counts = (accepted, judged, drafted, sum(1 for s in steps if s.drafted))
        stats = harness.draft_statistics(*counts, c, row["k"])
        if row["k"] is None:  # the best any fixed k could do, k = 0 (no draft) included
            stats["bound"] = max([1.0] + [leviathan_bound(stats["alpha"], k, c) for k in range(1, 13)])
        found = {"alpha": stats["alpha"] if judged else None, "mean_k": stats["mean_k"],
                 "accepted_over_drafted": ratio(accepted, drafted)}  # fmt: skip
        if not c:
            return found | dict.fromkeys(("cost_ratio", "bound", "efficiency"))
        efficiency = row["x_alone_steady"] / stats["bound"]
        return found | {"cost_ratio": c, "bound": stats["bound"], "efficiency": efficiency}


def _total(runs: dict[tuple, list[Run]], key: str = "seconds") -> float:
    """Summed over groups, each the median of its rounds."""
    return sum(median(getattr(run, key) for run in group) for group in runs.values())


def decode(models: Models, way: Way, rows: list[Clip], tokens: int, k: int, plans: list | None = None) -> Run:
    """One way but the static cache on the rows together, once; a planted way's proposals follow `plans`
    (row i's), else each clip's own plan at its α (`Models.make_plans`)."""
    if way.engine == "assisted":
        return models.generate(rows[:1], tokens, way.draft, k, way.alpha)
    if way.engine == "generate":
        return models.generate(rows, tokens)
    options = DecodeOptions(
        language=LANGUAGE, max_new_tokens=tokens, num_draft_tokens=k, adaptive=way.adaptive,
        cost_aware=way.cost_aware,
    )  # fmt: skip
    if way.draft and way.alpha is not None:
        plans = plans or [clip.plans[way.alpha] for clip in rows]
    return models.decode(way.draft, rows, options, plans if way.draft and way.alpha is not None else None)


def _alone(ways: list[Way]) -> Way:
    return next(w for w in ways if w.engine == "specdec" and w.draft is None)


def _released(*_: object) -> None:
    raise RuntimeError("every clip is encoded once, before the target's encoder is released")


def _same(row: dict) -> str:
    if row["identical"] and not row["mismatched_alone"]:
        return "  yes"
    return f"  NO: rows {row['mismatched_rows']}" + (
        f", alone {row['mismatched_alone']}" if row["mismatched_alone"] else ""
    )


COLUMNS = [
    ("dtype", "dtype", "<9"), ("batch", "batch", ">5"),
    ("  configuration", lambda r: f"  {r['config']}", "<44"),
    ("decode s", "decode_seconds", ">9.3f"), ("1st pass", "first_pass_seconds", ">9.3f"),
    ("steady", "steady_seconds", ">8.3f"), ("x gen", "x_generate", ">7.2f"),
    ("x gen steady", "x_generate_steady", ">13.2f"), ("x alone", "x_alone", ">8.2f"),
    ("x alone steady", "x_alone_steady", ">15.2f"), ("α", "alpha", ">6.2f"), ("k", "mean_k", ">5.1f"),
    ("tok/pass", "tokens_per_pass", ">9.2f"), ("c", "cost_ratio", ">7.3f"), ("bound", "bound", ">7.2f"),
    ("eff", "efficiency", ">6.2f"), ("passes", "target_passes", ">7"), ("  same", _same, ""),
]  # fmt: skip


def figure(rows: list[dict], title: str) -> plots.go.Figure:
    """Speedup over our target alone (steady steps) against planted α at batch 1, with Leviathan et al.'s
    bound, and against batch size."""
    by_alpha, by_batch, alphas = [], [], [i / 100 for i in range(101)]
    for colour, draft in zip(
        plots.COLOURS, dict.fromkeys(r["draft"] for r in rows if r["draft"]), strict=False
    ):
        ours = [
            r
            for r in rows
            if r["draft"] == draft and _planted(r) and r["batch"] == 1 and r["k"] and r["bound"]
        ]
        group = {"legendgroup": draft, "marker": {"color": colour}}
        if len({r["planted_alpha"] for r in ours}) > 1:
            x, y = [r["alpha"] for r in ours], [r["x_alone_steady"] for r in ours]
            cost_ratio = statistics.median(r["cost_ratio"] for r in ours)
            bound = [leviathan_bound(a, ours[0]["k"], cost_ratio) for a in alphas]
            by_alpha.append(plots.scatter(x, y, f"specdec {draft}", mode="markers", **group))
            name = f"bound {draft} (c={cost_ratio:.3f})"
            by_alpha.append(
                plots.scatter(alphas, bound, name, mode="lines", line={"color": colour, "dash": "dash"})
            )
        for config in dict.fromkeys(r["config"] for r in rows if r["draft"] == draft):
            mine = [r for r in rows if r["config"] == config]
            if len(mine) > 1:
                x, y = [r["batch"] for r in mine], [r["x_alone_steady"] for r in mine]
                by_batch.append(plots.scatter(x, y, config, line={"color": colour}))
    axes = [
        {"x": {"title_text": "acceptance rate α (planted)"}},
        {"x": {"type": "log", "dtick": 0.30103, "title_text": "batch size"}},
    ]
    panels = {
        "speedup over the target alone vs α, and the bound": by_alpha,
        "speedup over the batched target alone": by_batch,
    }
    return plots.figure(title, panels, axes, height=460)


def kept_rows(path: Path, device: str, options: WaysOptions) -> list[dict]:
    """The rows of an earlier record at `path` on the same device whose dtype this run does not measure."""
    earlier = json.loads(path.read_text()) if path.exists() else {}
    if earlier.get("device") != device:
        return []
    return [row for row in earlier.get("rows", []) if row["dtype"] not in options.dtypes]


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu: {harness.machine()['cpu']}"


def run_and_report(options: WaysOptions, out: Path, command: str) -> dict:
    """Every dtype and batch size, the record written after each phase; the table, goals and figure."""
    options = options.resolved()
    path, device = harness.record_path(out, options.NAME), device_name(options.device)
    rows = kept_rows(path, device, options) if options.keep else []
    record = Record(command, options, device=device, replay_available=replay is not None, rows=rows)

    def add(rows: list[dict], ways: Ways) -> None:  # printed, and the record written again
        print(harness.table(rows, COLUMNS), flush=True)
        record["rows"] += rows
        record.update(
            identical=all(r["identical"] for r in record["rows"]), goals=options.goals(record["rows"])
        )
        record.update(compiled=ways.compiled, errors=ways.errors)
        record.write(path, quiet=True)

    for dtype in options.dtypes:
        ways, first = Ways(options, dtype, record.log), len(record["rows"])
        drafts = {name: ways.models.pairs[name].draft.name for name in ways.drafts}
        record.update(
            models={"target": ways.models.target.name, **drafts},
            clips=[{"name": c.name, "encoder_seconds": c.encoder_seconds} for c in ways.clips],
            planned_alpha={f"{a:g}": [p.planned_rate for p in plans] for a, plans in ways.plans.items()},
        )  # fmt: skip
        # every way at every batch size first, then the static cache (compiled: the slowest to start)
        for batch in options.batch_sizes:
            for found in ways.measure(batch):
                add(found, ways)
        for batch in options.batch_sizes if options.STATIC else ():
            add(ways.measure_static(batch), ways)
        record.update(summary := options.summary(ways, record["rows"][first:]))
        print("".join(f"{key}: {value}\n" for key, value in summary.items()), end="")
        del ways
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    rows = record["rows"]
    mismatched = [f"{r['config']} {r['dtype']} batch {r['batch']}" for r in rows if _same(r) != "  yes"]
    same = f"every row of {len(rows)} configurations equals its reference, token for token"
    record.verdict(mismatched, same, record["goals"], digits=3)
    title = f"{command}: {options.size} models, {options.device} ({record['date']})"
    record.write(path, (lambda: [figure(rows, title)]) if options.FIGURE else None, title)
    return record
