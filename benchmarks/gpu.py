"""`python -m benchmarks gpu`: the GPU record, every way to decode the same rows at batch 1, 4 and 8.

Per dtype and batch size: generate(), generate() with a static cache (compiled on CUDA), assisted
generation (batch 1), our target alone and each draft at planted α, eager and replayed (CUDA graphs, where
the engine has them). A compile or capture that fails is recorded and the run goes on; the record is
written as each phase ends. Each row's tokens are compared with generate()'s; docs/benchmarks.md reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks import harness
from benchmarks.checkpoints import DEFAULT_CACHE
from benchmarks.controlled import row_plans
from benchmarks.harness import ASSETS, LANGUAGE, Record, goal, median, ratio
from benchmarks.runners import Clip, Models, Run
from specdec.options import DecodeOptions
from specdec.whisper.models import DraftKind

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
    keep: bool = True  # rows of other dtypes already in --out from the same device stay
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


class GpuBench:
    """The models of one dtype, the clips, every row's plan; runs a configuration once."""

    def __init__(self, options: GpuBenchOptions, dtype: str, log: Callable[[str], None] = print) -> None:
        self.options, self.dtype, self.log = options, dtype, log
        self.models = Models(options.size, options.seed, options.cache_dir, options.device, dtype, log)
        self.on_cuda = self.models.device.type == "cuda"
        self.compiled = options.compile and self.on_cuda
        self.clips: list[Clip] = []
        alone = {}
        for index, clip in enumerate(self.models.clips(sorted(ASSETS.glob("*.wav")))):
            alone[clip.name] = self.run(
                GpuConfig("target-only", "specdec"), 1, options.max_new_tokens, [clip]
            )
            result = alone[clip.name].results[0]  # the target's tokens, to plant agreement on
            self.models.make_plans(clip, result, (options.alpha,), options.seed + index)
            # generate() is given the encoder's output, so a row must stay in its first window (always so
            # at large-v3 size; the demo models end some segments early and seek on)
            if len({token.window for token in result.tokens}) == 1:
                self.clips.append(clip)
            else:
                log(f"{clip.name}: left out, its target-alone decoding seeks past its first window")
        if not self.clips:
            raise SystemExit("gpu: every clip's decoding seeks past its first window; ask fewer tokens")
        self.row_clips = [self.clips[i % len(self.clips)] for i in range(max(options.batch_sizes))]
        references = [alone[c.name].results[0] for c in self.row_clips]
        self.plans = row_plans(references, options.alpha, options.seed)
        self._compiled_forward = None
        self.errors: list[str] = []  # what failed and was left out or done otherwise (compiling, replay)
        self.references: dict[int, list[Run]] = {}  # generate()'s rounds, by batch size

    def configs(self, batch: int, replayed: bool) -> list[GpuConfig]:
        """The configurations of one batch size but the static-cache generate(): the eager ones, or
        (replayed) those the replay changes."""
        k, alpha, mode = (
            self.options.num_draft_tokens,
            self.options.alpha,
            "replayed" if replayed else "eager",
        )
        drafts, found = self.models.pairs, [] if replayed else [GpuConfig("generate()", "generate")]
        if batch == 1 and not replayed:
            found += [
                GpuConfig(f"assisted {n} k={k} α={alpha:g}", "assisted", n) for n in self.models.assistants
            ]
        found.append(GpuConfig(f"specdec target-only {mode}", "specdec", None, replayed))
        found += [GpuConfig(f"specdec {n} k={k} α={alpha:g} {mode}", "specdec", n, replayed) for n in drafts]
        if batch == 1:  # as the app's Compare decodes: its figures are read beside these (`app_check`)
            found += [GpuConfig(f"specdec {n} adaptive {mode}", "specdec", n, replayed, True) for n in drafts]
        return found

    @property
    def _static_name(self) -> str:
        return "generate() static+compile" if self.compiled else "generate() static"

    def run(self, config: GpuConfig, batch: int, max_new_tokens: int, rows: list[Clip] | None = None) -> Run:
        """Decode the first `batch` rows together, one way, once."""
        rows = rows or self.row_clips[:batch]
        if config.engine == "assisted":
            k, alpha = self.options.num_draft_tokens, self.options.alpha
            return self.models.generate(rows[:1], max_new_tokens, config.draft, k, alpha)
        if config.engine == "generate":
            return self.models.generate(rows, max_new_tokens)
        if config.engine == "static":
            return self._static(rows, max_new_tokens)
        options = DecodeOptions(
            language=LANGUAGE,
            max_new_tokens=max_new_tokens,
            num_draft_tokens=self.options.num_draft_tokens,
            adaptive=config.adaptive,
        )
        plans = self.plans[: len(rows)] if config.draft and not config.adaptive else None
        return self.models.decode(config.draft, rows, options, plans)

    def _static(self, rows: list[Clip], max_new_tokens: int) -> Run:
        """generate() with a static cache (its own automatic compile off: the forward below is compiled)."""
        model, context = self.models.target.model, nullcontext()
        if self.compiled:
            model.forward = self._compiled()
            context = sdpa_kernel(SDPBackend.MATH)
        try:
            with context:
                return self.models.generate(
                    rows, max_new_tokens, cache_implementation="static", disable_compile=True
                )
        finally:
            model.__dict__.pop("forward", None)  # the class's forward again, for every other configuration

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
        return [self.models.target.model, *(pair.draft.model for pair in self.models.pairs.values())]

    def measure(self, batch: int) -> Iterator[list[dict]]:
        """Our configurations and transformers' but the static cache at one batch size, in phases whose
        rows come as each ends: the eager ones with generate(), then the replayed ones where the replay
        enables (a capture that fails is recorded, and no replayed rows come)."""
        outcomes = self._rounds(self.configs(batch, replayed=False), batch)
        self.references[batch] = outcomes[GpuConfig("generate()", "generate")]
        yield self._rows(batch, outcomes)
        if replay is None or not replay.enable(self.models.target.model):
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
        yield self._rows(batch, outcomes)

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
            self.models.target.model.__dict__.pop("forward", None)
            torch._dynamo.reset()
            outcomes = self._rounds([GpuConfig(self._static_name, "static")], batch)
        return self._rows(batch, outcomes)

    def _failed(self, what: str, error: Exception) -> None:
        self.errors.append(f"{what}: {type(error).__name__}: {str(error)[:400]}")
        self.log(f"!!! {self.errors[-1]}")

    def _rounds(self, configs: list[GpuConfig], batch: int) -> dict[GpuConfig, list[Run]]:
        tokens = self.options.max_new_tokens

        def warm_up(config: GpuConfig) -> None:  # first calls: new shapes, allocations, compiling
            for _ in range(2 if config.engine == "static" and self.compiled else 1):
                self.run(config, batch, tokens if self.on_cuda else min(tokens, 2))

        runs = harness.rounds(
            configs, lambda c, _: self.run(c, batch, tokens), self.options.repeats, warm_up=warm_up
        )
        return {config: runs[(config, None)] for config in configs}

    def _rows(self, batch: int, outcomes: dict[GpuConfig, list[Run]]) -> list[dict]:
        reference = self.references[batch][-1]
        generate_seconds = median(r.seconds for r in self.references[batch])
        rows = []
        for config, runs in outcomes.items():
            decode, last, pair = (
                median(run.seconds for run in runs),
                runs[-1],
                self.models.pairs.get(config.draft),
            )
            expected = reference.token_ids[: len(last.token_ids)]
            pairs = zip(last.token_ids, expected, strict=True)
            rows.append({
                "config": config.name, "batch": batch, "dtype": self.dtype, "decode_seconds": decode,
                "decode_speedup_vs_generate": generate_seconds / decode,
                "identical": last.token_ids == expected,
                "engine": config.engine, "draft": config.draft,
                "draft_kind": pair.kind.value if pair else None,
                "mode": "replayed" if config.replayed else "eager",
                "planted_alpha": self.options.alpha if config.draft and not config.adaptive else None,
                "compiled": config.engine == "static" and self.compiled,
                "rows": len(last.token_ids),  # assisted generation: 1 whatever the batch
                "tokens": sum(len(ids) for ids in last.token_ids), "target_passes": last.target_passes,
                "round_seconds": [run.seconds for run in runs],
                "mismatched_rows": [i for i, (mine, theirs) in enumerate(pairs) if mine != theirs],
            })  # fmt: skip
        return rows


def device_name(device: str) -> str:
    """The device the record was measured on, by name."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu: {harness.machine()['cpu']}"


def kept_rows(path: Path, device: str, options: GpuBenchOptions) -> list[dict]:
    """The rows of an earlier record at `path` on the same device whose dtype this run does not measure."""
    earlier = json.loads(path.read_text()) if path.exists() else {}
    if earlier.get("device") != device:
        return []
    return [row for row in earlier.get("rows", []) if row["dtype"] not in options.dtypes]


def goals(rows: list[dict]) -> list[dict]:
    """The GPU goals at batch 1 (float16 where measured, else the first dtype), batch 8 for pass cost."""
    dtype = (
        "float16" if any(row["dtype"] == "float16" for row in rows) else rows[0]["dtype"] if rows else None
    )
    mine = [row for row in rows if row["dtype"] == dtype]

    def seconds(batch: int, predicate: Callable[[dict], bool]) -> float | None:
        found = [row["decode_seconds"] for row in mine if row["batch"] == batch and predicate(row)]
        return min(found) if found else None  # replayed where measured: the faster of eager and replayed

    target_alone = seconds(1, lambda r: r["engine"] == "specdec" and r["draft"] is None)
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
            goal(f"speculative ({label}) over our target alone", ratio(target_alone, ours), ">=", 2.0),
            goal(f"speculative ({label}) over the faster of static+compile and assisted",
                 ratio(transformers_best, ours), ">=", 1.5),
        ]  # fmt: skip
    eight = seconds(8, lambda r: r["engine"] == "specdec" and r["draft"] is None)
    label = "batch 8 pass cost over batch 1 (target alone), at most"
    return [*found, goal(label, ratio(eight, target_alone), "<", 1.5)]


def _planted(row: dict) -> bool:
    """Our speculative decoding at planted agreement (the goals' configuration)."""
    return row["engine"] == "specdec" and row["planted_alpha"] is not None


COLUMNS = [
    ("dtype", "dtype", "<9"),
    ("batch", "batch", ">5"),
    ("  configuration", lambda row: f"  {row['config']}", "<46"),
    ("decode s", "decode_seconds", ">9.3f"),
    ("x gen", "decode_speedup_vs_generate", ">7.2f"),
    ("passes", "target_passes", ">7"),
    ("  same", lambda row: "  yes" if row["identical"] else f"  NO: rows {row['mismatched_rows']}", ""),
]


def run_and_report(options: GpuBenchOptions, out: Path, command: str) -> dict:
    """Measure every dtype and batch size, writing the record after each; print the table and goals."""
    path, device = harness.record_path(out, Path(GpuBenchOptions.OUT).name), device_name(options.device)
    rows = kept_rows(path, device, options) if options.keep else []
    record = Record(command, options, device=device, replay_available=replay is not None, rows=rows)

    def add(rows: list[dict], bench: GpuBench) -> None:  # printed, and the record written again
        print(harness.table(rows, COLUMNS), flush=True)
        record["rows"] += rows
        record.update(identical=all(row["identical"] for row in record["rows"]), goals=goals(record["rows"]))
        record.update(compiled=bench.compiled, errors=bench.errors)
        record.write(path, quiet=True)

    for dtype in options.dtypes:
        bench = GpuBench(options, dtype)
        # ours and generate() at every batch size first, then the static cache compiled (the slowest to
        # start, and read by one goal only)
        for batch in options.batch_sizes:
            for found in bench.measure(batch):
                add(found, bench)
        for batch in options.batch_sizes:
            add(bench.measure_static(batch), bench)
        del bench
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    mismatched = [
        f"{r['config']} {r['dtype']} batch {r['batch']}" for r in record["rows"] if not r["identical"]
    ]
    same = f"every row of {len(record['rows'])} configurations equals generate()'s, token for token"
    record.verdict(mismatched, same, record["goals"])
    record.write(path)
    return record
