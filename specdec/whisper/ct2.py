"""Import of CTranslate2 (faster-whisper) Whisper checkpoints as transformers folders.

A CTranslate2 Whisper folder holds `model.bin`, `config.json` (suppressed tokens, alignment heads,
language ids), `tokenizer.json` (it stops before the timestamp tokens) and usually `vocabulary.txt` (every
id's token, timestamps included). `model.bin` (binary version 6, as ctranslate2's `ModelSpec.save` writes
it) is: version, spec name, spec revision, then named variables (name, rank, shape, dtype id, byte count,
raw little-endian bytes), then aliases (`decoder/projection/weight` is `decoder/embeddings/weight`).

Every Whisper tensor maps onto `WhisperForConditionalGeneration` with nothing missing or left over:
self-attention `linear_0` is the fused q/k/v projection (its k part has a zero bias that transformers does
not have), cross-attention (`attention`) `linear_0` is q and `linear_1` the fused k/v, the last linear of
each attention its output projection, `ffn/linear_0|1` are fc1/fc2, `gamma`/`beta` the layer norms.

`import_ct2(src, out)` writes a folder that `from_pretrained` loads like a hub checkpoint (weights as float32
safetensors, as the hub's Whisper checkpoints are; config, generation config, feature extractor, tokenizer).
We read the format ourselves because ctranslate2 has no reader for it, and a read file can be hashed as it
streams.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizer,
)
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec.whisper.tokenizer import END_OF_TEXT, whisper_tokenizer

BINARY_VERSION = 6
SPEC_NAME = "WhisperSpec"
DTYPES = {
    0: torch.float32,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.float16,
    5: torch.bfloat16,
}
GELU = 3  # ctranslate2's ActivationType.GELU, Whisper's activation
MULTILINGUAL_VOCAB_SIZE = 51865  # openai/whisper: a model is multilingual iff n_vocab >= 51865
FORMAT_VERSION = 2  # of the folders written here: a cache of older ones is converted again


class CheckpointError(ValueError):
    """The folder is not a CTranslate2 Whisper checkpoint this importer understands; the message says why."""


@dataclass(frozen=True)
class Checkpoint:
    """The variables of a `model.bin` and the SHA-256 of its bytes."""

    variables: dict[str, torch.Tensor]
    sha256: str
    num_bytes: int


class _HashingReader:
    """Reads the concatenation of `paths` front to back, hashing every byte it returns."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths = list(paths)
        self._file: io.BufferedReader | None = None
        self.hash = hashlib.sha256()
        self.num_bytes = 0

    def read(self, size: int) -> bytes:
        chunks = []
        while size > 0:
            if self._file is None:
                if not self._paths:
                    break
                self._file = open(self._paths.pop(0), "rb")  # noqa: SIM115 (closed when exhausted)
            chunk = self._file.read(size)
            if not chunk:
                self._file.close()
                self._file = None
                continue
            chunks.append(chunk)
            size -= len(chunk)
        data = b"".join(chunks)
        self.hash.update(data)
        self.num_bytes += len(data)
        return data

    def exact(self, size: int) -> bytes:
        data = self.read(size)
        if len(data) != size:
            raise CheckpointError("model.bin ends early: the file is truncated")
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def read_model_bin(parts: Sequence[str | Path]) -> Checkpoint:
    """Read a `model.bin` given as one path or as parts to concatenate in order; aliases become entries."""
    reader = _HashingReader([Path(part) for part in parts])
    try:
        variables = _read_variables(reader)
        if reader.read(1):
            raise CheckpointError("model.bin has bytes after its last alias: not a file this importer knows")
    finally:
        reader.close()
    return Checkpoint(variables, reader.hash.hexdigest(), reader.num_bytes)


def _read_variables(reader: _HashingReader) -> dict[str, torch.Tensor]:
    def number(fmt: str) -> int:
        return struct.unpack("<" + fmt, reader.exact(struct.calcsize(fmt)))[0]

    def string() -> str:
        return reader.exact(number("H"))[:-1].decode("utf-8")  # length includes a trailing NUL

    version = number("I")
    if version != BINARY_VERSION:
        raise CheckpointError(
            f"model.bin binary version {version}; this importer reads version {BINARY_VERSION}"
        )
    spec = string()
    if spec != SPEC_NAME:
        raise CheckpointError(f"model.bin holds a {spec}, not a Whisper model ({SPEC_NAME})")
    number("I")  # spec revision
    variables: dict[str, torch.Tensor] = {}
    for _ in range(number("I")):
        name = string()
        shape = [number("I") for _ in range(number("B"))]
        dtype_id, num_bytes = number("B"), number("I")
        if dtype_id not in DTYPES:
            raise CheckpointError(f"{name}: unknown dtype id {dtype_id}")
        data = bytearray(reader.exact(num_bytes))
        variables[name] = torch.frombuffer(data, dtype=DTYPES[dtype_id]).reshape(shape)
    for _ in range(number("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return variables


# --- tensors -----------------------------------------------------------------------------------------------


def _layers(variables: dict[str, torch.Tensor], stack: str) -> int:
    indices = {int(m.group(1)) for name in variables if (m := re.match(rf"{stack}/layer_(\d+)/", name))}
    if indices != set(range(len(indices))) or not indices:
        raise CheckpointError(f"model.bin: the {stack} layers are not numbered 0..n-1")
    return len(indices)


def _linear(state: dict, variables: dict, source: str, target: str) -> None:
    state[f"{target}.weight"] = variables[f"{source}/weight"]
    state[f"{target}.bias"] = variables[f"{source}/bias"]


def _norm(state: dict, variables: dict, source: str, target: str) -> None:
    state[f"{target}.weight"] = variables[f"{source}/gamma"]
    state[f"{target}.bias"] = variables[f"{source}/beta"]


def _split(state: dict, variables: dict, source: str, targets: Sequence[str]) -> None:
    """A fused projection -> its parts; a key projection has no bias in transformers (CTranslate2's is 0)."""
    weights = variables[f"{source}/weight"].chunk(len(targets))
    biases = variables[f"{source}/bias"].chunk(len(targets))
    for target, weight, bias in zip(targets, weights, biases, strict=True):
        state[f"{target}.weight"] = weight
        if target.endswith("k_proj"):
            if bias.count_nonzero():
                raise CheckpointError(f"{source}: a key projection with a bias, which Whisper does not have")
        else:
            state[f"{target}.bias"] = bias


def _layer(state: dict, variables: dict, stack: str, index: int) -> None:
    source, target = f"{stack}/layer_{index}", f"model.{stack}.layers.{index}"
    attention = f"{target}.self_attn"
    _norm(state, variables, f"{source}/self_attention/layer_norm", f"{target}.self_attn_layer_norm")
    _split(state, variables, f"{source}/self_attention/linear_0", [f"{attention}.{p}_proj" for p in "qkv"])
    _linear(state, variables, f"{source}/self_attention/linear_1", f"{attention}.out_proj")
    if stack == "decoder":
        cross = f"{target}.encoder_attn"
        _norm(state, variables, f"{source}/attention/layer_norm", f"{target}.encoder_attn_layer_norm")
        _linear(state, variables, f"{source}/attention/linear_0", f"{cross}.q_proj")
        _split(state, variables, f"{source}/attention/linear_1", [f"{cross}.k_proj", f"{cross}.v_proj"])
        _linear(state, variables, f"{source}/attention/linear_2", f"{cross}.out_proj")
    _norm(state, variables, f"{source}/ffn/layer_norm", f"{target}.final_layer_norm")
    _linear(state, variables, f"{source}/ffn/linear_0", f"{target}.fc1")
    _linear(state, variables, f"{source}/ffn/linear_1", f"{target}.fc2")


def state_dict(variables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' WhisperForConditionalGeneration state dict (proj_out tied to the token embeddings)."""
    _check_flags(variables)
    state: dict[str, torch.Tensor] = {}
    for conv in ("conv1", "conv2"):
        _linear(state, variables, f"encoder/{conv}", f"model.encoder.{conv}")
    for stack in ("encoder", "decoder"):
        state[f"model.{stack}.embed_positions.weight"] = variables[f"{stack}/position_encodings/encodings"]
        for index in range(_layers(variables, stack)):
            _layer(state, variables, stack, index)
        _norm(state, variables, f"{stack}/layer_norm", f"model.{stack}.layer_norm")
    state["model.decoder.embed_tokens.weight"] = variables["decoder/embeddings/weight"]
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]  # tied, as in every Whisper
    if not torch.equal(variables.get("decoder/projection/weight", state["model.decoder.embed_tokens.weight"]),
                       state["model.decoder.embed_tokens.weight"]):  # fmt: skip
        raise CheckpointError("model.bin: the output projection is not the token embeddings, as Whisper's is")
    return state


def _check_flags(variables: dict[str, torch.Tensor]) -> None:
    """The spec's scalar settings must be Whisper's: pre-norm, GELU, unscaled embeddings, no ALiBi."""
    expected = {
        "decoder/activation": GELU,
        "decoder/pre_norm": 1,
        "decoder/scale_embeddings": 0,
        "decoder/alibi": 0,
    }
    for name, value in expected.items():
        if name in variables and int(variables[name]) != value:
            raise CheckpointError(f"model.bin: {name} is {int(variables[name])}, Whisper's is {value}")


def model_config(
    variables: dict[str, torch.Tensor], tokenizer: WhisperTokenizer, generation: GenerationConfig
) -> WhisperConfig:
    """The WhisperConfig that the tensors' shapes and the tokenizer's ids describe (its suppressed tokens,
    as the hub's configs have them, those of the generation config)."""
    embeddings = variables["decoder/embeddings/weight"]
    ids = tokenizer.convert_tokens_to_ids
    end_of_text = ids(END_OF_TEXT)
    return WhisperConfig(
        vocab_size=embeddings.shape[0],
        num_mel_bins=variables["encoder/conv1/weight"].shape[1],
        d_model=embeddings.shape[1],
        encoder_layers=_layers(variables, "encoder"),
        encoder_attention_heads=int(variables["encoder/num_heads"]),
        encoder_ffn_dim=variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_layers=_layers(variables, "decoder"),
        decoder_attention_heads=int(variables["decoder/num_heads"]),
        decoder_ffn_dim=variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=variables["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=variables["decoder/position_encodings/encodings"].shape[0],
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
        pad_token_id=end_of_text,
        decoder_start_token_id=ids("<|startoftranscript|>"),
        suppress_tokens=generation.suppress_tokens,
        begin_suppress_tokens=generation.begin_suppress_tokens,
        dtype=torch.float32,
    )


# --- tokenizer and generation config ------------------------------------------------------------------------


def load_tokenizer(folder: Path, vocab_size: int) -> WhisperTokenizer:
    """The checkpoint's tokenizer.json completed with the timestamp tokens, checked against vocabulary.txt."""
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec["model"]
    if model.get("type") != "BPE":
        raise CheckpointError("tokenizer.json: not a byte-level BPE tokenizer as Whisper's is")
    merges = [
        tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]
    ]
    added = sorted(spec["added_tokens"], key=lambda token: token["id"])
    specials = [token["content"] for token in added if token["content"] != END_OF_TEXT]
    tokenizer = whisper_tokenizer(model["vocab"], merges, specials)
    for token in added:
        if tokenizer.convert_tokens_to_ids(token["content"]) != token["id"]:
            raise CheckpointError(f"tokenizer.json: {token['content']} is not at id {token['id']}")
    if len(tokenizer) != vocab_size:
        raise CheckpointError(
            f"the tokenizer with timestamps has {len(tokenizer)} tokens, "
            f"the model's embeddings {vocab_size} rows"
        )
    vocabulary_file = folder / "vocabulary.txt"
    if vocabulary_file.exists():
        lines = vocabulary_file.read_text(encoding="utf-8").split("\n")[:vocab_size]
        tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
        differing = [i for i, (line, token) in enumerate(zip(lines, tokens, strict=False)) if line != token]
        if differing or len(lines) != vocab_size:
            first = differing[0] if differing else len(lines)
            raise CheckpointError(f"vocabulary.txt and tokenizer.json disagree from id {first}")
    return tokenizer


def generation_config(folder: Path, tokenizer: WhisperTokenizer, vocab_size: int) -> GenerationConfig:
    """A generation config laid out like the hub's Whisper ones, from the checkpoint's config.json."""
    settings = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    ids = tokenizer.convert_tokens_to_ids
    vocab = tokenizer.get_vocab()
    end_of_text = ids(END_OF_TEXT)
    # An English-only model has no language ids (generate() would detect a language if it had). Like the
    # hub's configs, forced_decoder_ids give generate() its default prompt when it is given no task.
    by_vocabulary = {"forced_decoder_ids": [[1, ids("<|notimestamps|>")]]}
    if vocab_size >= MULTILINGUAL_VOCAB_SIZE:
        by_vocabulary = {
            "lang_to_id": {
                f"<|{code}|>": vocab[f"<|{code}|>"] for code in LANGUAGES if f"<|{code}|>" in vocab
            },
            "task_to_id": {task: ids(f"<|{task}|>") for task in ("transcribe", "translate")},
            "forced_decoder_ids": [[1, None], [2, ids("<|transcribe|>")]],
        }
    return GenerationConfig(
        alignment_heads=settings.get("alignment_heads"),
        begin_suppress_tokens=settings.get("suppress_ids_begin", [ids(" "), end_of_text]),
        suppress_tokens=settings.get("suppress_ids", []),
        bos_token_id=end_of_text,
        decoder_start_token_id=ids("<|startoftranscript|>"),
        eos_token_id=end_of_text,
        pad_token_id=end_of_text,
        is_multilingual=vocab_size >= MULTILINGUAL_VOCAB_SIZE,
        **by_vocabulary,
        max_initial_timestamp_index=50,  # openai/whisper's max_initial_timestamp of 1 s
        max_length=448,
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
    )


# --- the folder --------------------------------------------------------------------------------------------


def model_parts(folder: Path) -> list[Path]:
    """`model.bin`, or its parts `model.bin.part1`, `model.bin.part2`, ... in order."""
    if (folder / "model.bin").exists():
        return [folder / "model.bin"]
    parts = sorted(
        folder.glob("model.bin.part*"), key=lambda p: int(p.name.removeprefix("model.bin.part") or 0)
    )
    if not parts:
        raise CheckpointError(f"{folder}: no model.bin (is this a CTranslate2 / faster-whisper folder?)")
    return parts


def is_ct2_folder(folder: str | Path) -> bool:
    """A CTranslate2 model folder: a model.bin beside a config.json that is not a transformers config."""
    folder = Path(folder)
    config = folder / "config.json"
    if not (folder / "model.bin").exists() or not config.exists():
        return False
    try:
        return "model_type" not in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def import_ct2(
    src: str | Path,
    out: str | Path,
    parts: Sequence[Path] | None = None,
    expected_sha256: str | None = None,
) -> Path:
    """Convert the CTranslate2 Whisper folder `src` into a transformers folder `out`; returns `out`.

    parts: the model.bin pieces when they live elsewhere than `src` (default: found in `src`).
    expected_sha256: refuse the weights unless the bytes read hash to it.
    """
    src, out = Path(src), Path(out)
    checkpoint = read_model_bin(parts or model_parts(src))
    if expected_sha256 is not None and checkpoint.sha256 != expected_sha256:
        raise CheckpointError(
            f"the weights read from {src} ({checkpoint.num_bytes:,} bytes) have SHA-256 {checkpoint.sha256}, "
            f"not the recorded {expected_sha256}: the package changed, so they are refused"
        )
    variables = checkpoint.variables
    vocab_size = variables["decoder/embeddings/weight"].shape[0]
    tokenizer = load_tokenizer(src, vocab_size)
    generation = generation_config(src, tokenizer, vocab_size)
    config = model_config(variables, tokenizer, generation)
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    weights = {name: tensor.float() for name, tensor in state_dict(variables).items()}
    model.load_state_dict(weights, strict=True, assign=True)
    model.tie_weights()
    model.generation_config = generation
    model.eval().save_pretrained(out)
    features = WhisperFeatureExtractor(feature_size=config.num_mel_bins)
    WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(out)
    return out
