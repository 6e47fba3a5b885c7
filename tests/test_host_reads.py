"""The loop waits for the device once a target pass and once a batched draft position, however many rows.

On a GPU every read of a tensor's values on the host (`int(t)`, `float(t)`, `.item()`, `.tolist()`, a
`nonzero()` whose size the host needs, a copy to the CPU) stalls the host until the device's queue drains.
The tests count those reads while the demo pair decodes on this machine's device: inside each step of the
loop (`Batch.step`: draft, verify, accept, record) at most one per target pass plus one per batched draft
position. Only the loop's steps are counted: what a window does once (language detection, the no-speech
verdict, the seek) is not a per-pass cost. Greedy rows only: a sampled row draws from its own generator
as it would alone, and `torch.multinomial` itself reads on the host.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from test_lossless import CLIPS
from torch.utils._python_dispatch import TorchDispatchMode

from specdec.engine.acceptance import greedy_check
from specdec.engine.host import read, send
from specdec.engine.loop import Batch
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.trace import ACCEPTED, CORRECTED, DRAFT_MODEL

aten = torch.ops.aten
SCALAR_READS = {aten._local_scalar_dense.default, aten.nonzero.default}  # int/float/bool/item; nonzero


class HostReads(TorchDispatchMode):
    """Counts the host's reads of tensor values while active: `_local_scalar_dense` (int, float, bool,
    item), `nonzero`, copies from another device to the CPU (a CUDA tensor's `.tolist()`, `.cpu()`), and,
    through `counting_lists`, `.tolist()` and `.numpy()` of a CPU tensor (which dispatch no operator)."""

    active: HostReads | None = None

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __enter__(self) -> HostReads:
        HostReads.active = self
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        HostReads.active = None
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SCALAR_READS or _copies_to_host(func, args, kwargs):
            self.count += 1
        return func(*args, **kwargs)


def _copies_to_host(func, args, kwargs) -> bool:
    if func not in (aten._to_copy.default, aten.copy_.default):
        return False
    source = args[1] if func is aten.copy_.default else args[0]
    destination = args[0].device if func is aten.copy_.default else kwargs.get("device", source.device)
    return source.device.type != "cpu" and torch.device(destination).type == "cpu"


@pytest.fixture
def counting_lists(monkeypatch):
    """`.tolist()` and `.numpy()` of a CPU tensor counted as reads while a `HostReads` is active."""
    for name in ("tolist", "numpy"):
        original = getattr(torch.Tensor, name)

        def counted(tensor, *args, _original=original, **kwargs):
            if HostReads.active is not None and tensor.device.type == "cpu":
                HostReads.active.count += 1
            return _original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.fixture
def reads_per_pass(monkeypatch, counting_lists) -> list[int]:
    """The reads of each `Batch.step` call, in order (the passes of one decoding, by pass index)."""
    counts: list[int] = []
    step = Batch.step

    def counted_step(batch: Batch) -> list:
        with HostReads() as reads:
            finished = step(batch)
        counts.append(reads.count)
        return finished

    monkeypatch.setattr(Batch, "step", counted_step)
    return counts


def test_the_count_sees_every_kind_of_read(counting_lists) -> None:
    values = torch.tensor([0.25, 0.0, 3.0])
    with HostReads() as reads:
        int(values[2]), float(values[0]), bool(values[0]), values[1].item()
        values.tolist(), values.numpy(), values.nonzero(), values.argmax().tolist()
        values.softmax(-1).gather(0, values.argmax()[None])  # device work: no read
    assert reads.count == 8


def test_greedy_check_reads_nothing(counting_lists) -> None:
    target_scores = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 1.0, 5.0]])
    with HostReads() as reads:
        target_choice, n_accepted = greedy_check(torch.tensor([1, 2]), target_scores)
    assert reads.count == 0
    assert target_choice.tolist() == [1, 0, 2] and int(n_accepted) == 1


def test_one_read_gives_each_tensor_its_exact_values() -> None:
    ids = torch.tensor([51864, 0, 50257])  # token ids, read with probabilities in one copy
    probs = torch.tensor([0.1, 1e-30, 0.7], dtype=torch.float32)
    half = torch.tensor(
        [0.3], dtype=torch.float16
    )  # promoted to float32 with the ids, not the ids to float16
    (read_ids, read_probs), (read_half, empty, count) = read([(ids, probs), (half, ids[:0], ids[1:].sum())])
    assert read_ids == ids.tolist() and read_probs == probs.tolist() and count == [50257]
    assert read_half == half.float().tolist() and empty == []
    assert read([]) == [] and read([()]) == [[]]


def test_sent_ids_are_long_tensors_on_the_device() -> None:
    sent = send([3, 50257], torch.device("cpu"))
    assert sent.dtype == torch.long and sent.tolist() == [3, 50257]
    assert send([], torch.device("cpu")).shape == (0,)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        (DecodeOptions(language="en", max_new_tokens=24), ["chirp-4s"]),  # the no-speech rule measuring
        (TranscribeOptions(language="de", timestamps=True, max_new_tokens=24, batch_size=3), list(CLIPS)),
    ],
    ids=["one-clip", "batch-of-3-timestamps"],
)
def test_one_read_per_pass_and_per_draft_position(separate_pair, reads_per_pass, options, names) -> None:
    results = [t.result for t in separate_pair.transcribe_waveforms([CLIPS[n] for n in names], options)]
    draft_positions: dict[int, int] = defaultdict(int)  # pass index -> batched draft-model passes
    for result in results:
        for step in result.steps:
            drafted = len(step.drafted) if step.source == DRAFT_MODEL else 0
            draft_positions[step.pass_index] = max(draft_positions[step.pass_index], drafted)
    assert len(reads_per_pass) == len(draft_positions) == max(draft_positions) + 1
    labels = {token.label for result in results for token in result.tokens}
    assert {ACCEPTED, CORRECTED} <= labels and max(draft_positions.values()) > 1
    allowed = [1 + draft_positions[index] for index in range(len(reads_per_pass))]  # by pass index
    over = [(index, n, allowed[index]) for index, n in enumerate(reads_per_pass) if n > allowed[index]]
    assert not over, f"(pass, host reads, allowed): {over[:5]}"
