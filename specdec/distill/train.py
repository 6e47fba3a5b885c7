"""Training a self-draft on the target's own readings (`distill.data`): cross-entropy on the tokens the target
generated, plus a KL term on its whole next-token distribution, with the target frozen.

Only the draft's own weights learn (its decoder layers and final norm); the encoder states are the target's,
read once, and the embeddings and output projection are the target's, shared and frozen. After each epoch
the draft's next-token agreement with the target is measured on held-out windows (the share of positions
where its argmax is the token the target generated there, a close stand-in for greedy acceptance); the best
epoch is kept, and training stops when `patience` epochs in a row did not improve on it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from transformers import WhisperForConditionalGeneration

from specdec.distill.data import Dataset, Sequence
from specdec.engine.fast_draft import CPU_DRAFT, pooled_states, proposable_ids
from specdec.whisper.self_draft import make_student, own_parameters


@dataclass(frozen=True)
class TrainingOptions:
    layers: tuple[int, ...] | None = (
        None  # the target's decoder layers the draft starts from; None: first, last
    )
    epochs: int = 8  # at most
    batch_size: int = 8  # sequences per step
    learning_rate: float = 3e-4  # AdamW, after a linear warm-up of warmup_steps
    warmup_steps: int = 30
    kl_weight: float = 1.0  # the KL term beside cross-entropy on the generated tokens
    patience: int = 2  # epochs without a better held-out agreement before stopping
    # the draft learns to propose among this many most frequent text tokens (and every special token), as
    # the CPU draft runs (`engine.fast_draft.CPU_DRAFT`); None: the whole vocabulary (3x the work per step)
    vocabulary: int | None = CPU_DRAFT.vocabulary
    # the draft reads the target's encoder states averaged over this many frames, as the CPU draft runs
    # (`engine.fast_draft.pooled_states`); 1: every frame
    frame_pooling: int = CPU_DRAFT.frame_pooling
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("frame_pooling", "warmup_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")


@dataclass(frozen=True)
class Agreement:
    """Held-out next-token agreement per (language, timestamps) group and overall."""

    overall: float
    by_group: dict[str, float]  # "en", "en+timestamps", ...
    positions: int


def default_layers(target: WhisperForConditionalGeneration) -> tuple[int, ...]:
    last = target.config.decoder_layers - 1
    return (0, last) if last > 0 else (0,)


def train_draft(
    target: WhisperForConditionalGeneration,
    training: Dataset,
    held_out: Dataset,
    options: TrainingOptions = TrainingOptions(),
    on_step: Callable[[int, int, float], None] | None = None,
    on_epoch: Callable[[int, Agreement], None] | None = None,
    student: WhisperForConditionalGeneration | None = None,
) -> tuple[WhisperForConditionalGeneration, list[Agreement]]:
    """The trained draft (its best epoch) and the held-out agreement before training and after each epoch.
    on_step(step, steps_per_epoch, loss) follows each step; on_epoch(epoch, agreement) each epoch; student:
    a draft to train further (trained in place), instead of a new copy of options.layers."""
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    target.requires_grad_(False)
    student = student or make_student(target, options.layers or default_layers(target))
    decoder = student.model.decoder
    parameters = [*decoder.layers.parameters(), *decoder.layer_norm.parameters()]
    for parameter in parameters:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(parameters, lr=options.learning_rate, weight_decay=0.0)
    vocabulary = Proposable.of(student, options.vocabulary)
    history = [agreement(student, held_out, options.batch_size, vocabulary, options.frame_pooling)]
    if on_epoch is not None:
        on_epoch(0, history[0])
    best, best_state, stale, step = history[0].overall, _own_state(student), 0, 0
    order = list(range(len(training.sequences)))
    steps_per_epoch = math.ceil(len(order) / options.batch_size)
    for epoch in range(1, options.epochs + 1):
        rng.shuffle(order)
        student.train()
        for start in range(0, len(order), options.batch_size):
            batch = [training.sequences[i] for i in order[start : start + options.batch_size]]
            for group in optimizer.param_groups:
                group["lr"] = options.learning_rate * min(1.0, (step + 1) / options.warmup_steps)
            loss = _loss(student, training, batch, options.kl_weight, vocabulary, options.frame_pooling)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            step += 1
            if on_step is not None:
                on_step(start // options.batch_size + 1, steps_per_epoch, loss.item())
        history.append(agreement(student, held_out, options.batch_size, vocabulary, options.frame_pooling))
        if on_epoch is not None:
            on_epoch(epoch, history[-1])
        if history[-1].overall > best:
            best, best_state, stale = history[-1].overall, _own_state(student), 0
        else:
            stale += 1
            if stale >= options.patience:
                break
    _restore(student, best_state)
    student.requires_grad_(False)
    return student.eval(), history


@dataclass(frozen=True)
class Proposable:
    """The tokens a draft may propose: their rows of the output projection, each id's column (-1: none)."""

    weight: torch.Tensor  # (proposable, d_model), the target's rows (frozen)
    columns: torch.Tensor  # (vocab,) long

    @classmethod
    def of(cls, student: WhisperForConditionalGeneration, size: int | None) -> Proposable:
        vocab_size = student.config.vocab_size
        eos_id = student.generation_config.eos_token_id  # <|endoftext|>, as `_forward` pads with
        rows = torch.arange(vocab_size) if size is None else proposable_ids(vocab_size, size, eos_id)
        columns = torch.full((vocab_size,), -1, dtype=torch.long)
        columns[rows] = torch.arange(len(rows))
        return cls(student.proj_out.weight.detach()[rows], columns)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.weight.T  # (positions, proposable)


@torch.no_grad()
def agreement(
    student: WhisperForConditionalGeneration,
    dataset: Dataset,
    batch_size: int = 8,
    vocabulary: Proposable | None = None,
    frame_pooling: int = 1,
) -> Agreement:
    """The share of generated positions where the draft's argmax (among the tokens it may propose) is the
    target's token, with teacher forcing, the draft reading the encoder states pooled by frame_pooling."""
    vocabulary = vocabulary or Proposable.of(student, None)
    student.eval()
    hits: dict[str, list[int]] = {}
    for start in range(0, len(dataset.sequences), batch_size):
        batch = dataset.sequences[start : start + batch_size]
        hidden, labels, _, owners = _forward(student, dataset, batch, frame_pooling)
        correct = (vocabulary.logits(hidden).argmax(-1) == vocabulary.columns[labels]).tolist()
        for owner, hit in zip(owners, correct, strict=True):
            sequence = batch[owner]
            key = sequence.language + ("+timestamps" if sequence.timestamps else "")
            hits.setdefault(key, [0, 0])
            hits[key][0] += hit
            hits[key][1] += 1
    total = sum(n for _, n in hits.values())
    overall = sum(h for h, _ in hits.values()) / max(total, 1)
    return Agreement(overall, {key: h / n for key, (h, n) in sorted(hits.items())}, total)


def _loss(
    student: WhisperForConditionalGeneration,
    dataset: Dataset,
    batch: list[Sequence],
    kl_weight: float,
    vocabulary: Proposable,
    frame_pooling: int,
) -> torch.Tensor:
    """Cross-entropy on the target's tokens the draft may propose, plus kl_weight times KL(target || draft)
    over the proposable tokens (both distributions renormalised there)."""
    hidden, labels, target_hidden, _ = _forward(student, dataset, batch, frame_pooling)
    logits = vocabulary.logits(hidden)  # (positions, proposable)
    loss = F.cross_entropy(logits, vocabulary.columns[labels], ignore_index=-1)
    if kl_weight > 0:
        target_log_probs = F.log_softmax(vocabulary.logits(target_hidden.float()), -1)
        kl = F.kl_div(F.log_softmax(logits, -1), target_log_probs, log_target=True, reduction="batchmean")
        loss = loss + kl_weight * kl
    return loss


def _forward(
    student: WhisperForConditionalGeneration, dataset: Dataset, batch: list[Sequence], frame_pooling: int
):
    """The draft's final hidden states at every generated position of the batch (positions, d_model), the
    target's tokens there, the target's hidden states there, and each position's sequence in the batch;
    the draft reads the target's encoder states pooled by frame_pooling."""
    length = max(len(s.tokens) for s in batch) - 1
    eos = student.generation_config.eos_token_id
    inputs = torch.full((len(batch), length), eos, dtype=torch.long)
    mask = torch.zeros(len(batch), length, dtype=torch.bool)
    for row, sequence in enumerate(batch):
        inputs[row, : len(sequence.tokens) - 1] = sequence.tokens[:-1]
        mask[row, sequence.prompt_length - 1 : len(sequence.tokens) - 1] = (
            True  # positions that predict output
        )
    states = torch.stack([dataset.encoder_states[s.window] for s in batch]).float()
    states = pooled_states(states, frame_pooling)
    decoder = student.model.decoder
    hidden = decoder(input_ids=inputs, encoder_hidden_states=states, use_cache=False).last_hidden_state
    labels = torch.cat([s.tokens[s.prompt_length :] for s in batch])
    target_hidden = torch.cat([s.target_hidden[s.prompt_length - 1 :] for s in batch])
    owners = torch.cat([torch.full((len(s.tokens) - s.prompt_length,), row) for row, s in enumerate(batch)])
    return hidden[mask], labels, target_hidden, owners.tolist()


def _own_state(student: WhisperForConditionalGeneration) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in own_parameters(student).items()}


def _restore(student: WhisperForConditionalGeneration, state: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, tensor in own_parameters(student).items():
            tensor.copy_(state[name])
