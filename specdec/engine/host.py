"""Numbers between the host and the device: where the loop waits for the device, and where it need not.

On a GPU a read of a tensor's values (`int(t)`, `float(t)`, `.item()`, `.tolist()`, `.cpu()`) waits until
every kernel queued before it has run, and the device idles while the host then decides what to queue
next. The loop reads once per target pass and once per batched draft position, everything it needs of
every row in one copy (`read`). A plain copy of host numbers to a GPU waits for its queue to drain too
(the copy is followed by a stream synchronisation); `send` copies from pinned memory, which does not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import reduce
from itertools import accumulate, islice

import torch


def read(groups: Sequence[Sequence[torch.Tensor]]) -> list[list[list[float]]]:
    """Each tensor's values, flattened, as Python numbers, group by group, from one copy to the host.

    The tensors are concatenated dtype by dtype (a concatenation of mixed dtypes copies them one by one),
    then in their promoted dtype, at least float32 when any is a float: token ids (below 2**24) and every
    float32 or float64 value come back exactly."""
    tensors = [value if value.dim() == 1 else value.reshape(-1) for group in groups for value in group]
    by_dtype: dict[torch.dtype, list[int]] = defaultdict(list)  # which tensors, in order
    for index, tensor in enumerate(tensors):
        if tensor.numel():
            by_dtype[tensor.dtype].append(index)
    if not by_dtype:
        return [[[] for _ in group] for group in groups]
    dtype = reduce(torch.promote_types, by_dtype)
    if dtype in (torch.float16, torch.bfloat16):  # a token id above 2048 (256) has no exact value in them
        dtype = torch.float32
    parts = [torch.cat([tensors[i] for i in indices]).to(dtype) for indices in by_dtype.values()]
    flat = iter(torch.cat(parts).tolist())
    values: list[list[float]] = [[] for _ in tensors]
    for indices in by_dtype.values():
        for index in indices:
            values[index] = list(islice(flat, tensors[index].numel()))
    ends = list(accumulate(len(group) for group in groups))
    return [values[end - len(group) : end] for group, end in zip(groups, ends, strict=True)]


def send(ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Token ids as a (len(ids),) long tensor on `device`, queued without waiting for the device."""
    tensor = torch.tensor(ids, dtype=torch.long)
    if device.type == "cuda":  # the pinned buffer is kept until the copy has run (PyTorch records it)
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
