"""Where each text token starts, from the alignment heads' cross-attention: what transformers'
`WhisperGenerationMixin._extract_token_timestamps` computes for one sequence, step for step (the weights
normalised over the tokens, median-filtered, averaged over the heads, aligned by dynamic time warping),
with the warping computed one anti-diagonal at a time.

transformers' `_dynamic_time_warping` (openai-whisper's `dtw_cpu` without numba) visits every cell of the
(tokens, frames) cost matrix in a Python loop, on every window of word timestamps and every live update.
Each cell depends only on its left, upper and upper-left neighbours, so a whole anti-diagonal is computed
at once with the same comparisons and the same float32 rounding: the same path, cell for cell
(tests/test_word_times.py checks it against transformers' on real attention). openai-whisper gets its
speed from numba instead, a large dependency for one loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from specdec import internals

TIME_PRECISION = 0.02  # seconds per encoder frame


def token_starts(
    attentions: Sequence[torch.Tensor],
    heads: Sequence[tuple[int, int]],
    num_frames: int,
    first: int,
    median_filter_width: int,
) -> torch.Tensor:
    """(len(sequence) + 1,) seconds: 0 for the `first` rows, then where each later token starts (the last
    entry repeating the one before it), as `_extract_token_timestamps` returns them for one sequence.
    attentions: per decoder layer, (1, heads, tokens, frames) cross-attention probabilities."""
    weights = torch.stack([attentions[layer][:, head] for layer, head in heads]).permute([1, 0, 2, 3])
    weights = weights[..., : num_frames // 2][:, :, first:, :]
    starts = torch.zeros(attentions[0].shape[2] + 1, dtype=torch.float32)
    if weights.shape[2] == 0:
        return starts
    std = torch.std(weights, dim=-2, keepdim=True, unbiased=False)
    mean = torch.mean(weights, dim=-2, keepdim=True)
    weights = internals.median_filter((weights - mean) / std, median_filter_width).mean(dim=1)
    text_indices, time_indices = dynamic_time_warping(-weights[0].cpu().double().numpy())
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] * TIME_PRECISION
    starts[:] = torch.cat([torch.zeros(first), torch.tensor(jump_times), torch.tensor([jump_times[-1]])])
    return starts


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through `matrix` (tokens, frames): (token index, frame index) per step,
    transformers' `_dynamic_time_warping` exactly (its ties broken as it breaks them). Cell (i, j) of the
    cost matrix is kept on anti-diagonal i + j at place i, so that a diagonal's three neighbours are slices
    of the two diagonals before it."""
    rows, columns = matrix.shape
    diagonals = rows + columns + 1
    i, j = np.meshgrid(np.arange(1, rows + 1), np.arange(1, columns + 1), indexing="ij")
    skewed = np.zeros((diagonals, rows + 1))  # skewed[i + j, i] = matrix[i - 1, j - 1]
    skewed[i + j, i] = matrix[i - 1, j - 1]
    inside = np.zeros((diagonals, rows + 1), dtype=bool)
    inside[i + j, i] = True
    steps = np.zeros((diagonals, rows + 1), dtype=np.int8)  # 0: from (i-1, j-1), 1: (i-1, j), 2: (i, j-1)
    before = np.full(rows + 1, np.inf, dtype=np.float32)  # the cost on diagonal d - 2, then d - 1
    before[0] = 0
    last = np.full(rows + 1, np.inf, dtype=np.float32)
    for diagonal in range(2, diagonals):
        corner, up, left = before[:-1], last[:-1], last[1:]
        from_up = np.where((up < corner) & (up < left), 1, 2)
        step = np.where((corner < up) & (corner < left), 0, from_up).astype(np.int8)
        cheapest = np.where(step == 0, corner, np.where(step == 1, up, left))
        cost = np.full(rows + 1, np.inf, dtype=np.float32)
        np.add(skewed[diagonal, 1:], cheapest, out=cost[1:], where=inside[diagonal, 1:], casting="same_kind")
        steps[diagonal, 1:] = step
        before, last = last, cost
    trace = np.zeros((rows + 1, columns + 1), dtype=np.int8)
    trace[i, j] = steps[i + j, i]
    trace[0, :], trace[:, 0] = 2, 1
    trace = trace.tolist()
    row, column = rows, columns
    text_indices, time_indices = [], []
    while row > 0 or column > 0:
        text_indices.append(row - 1)
        time_indices.append(column - 1)
        step = trace[row][column]
        if step != 2:
            row -= 1
        if step != 1:
            column -= 1
    return np.array(text_indices)[::-1], np.array(time_indices)[::-1]
