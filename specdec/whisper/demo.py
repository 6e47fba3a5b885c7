"""Three small, randomly initialised Whisper checkpoints that stand in for real ones in tests and the demo.

`build_demo_models(out_dir)` writes, each loadable with `from_pretrained` (model, processor, generation
config) like a hub checkpoint:

- `target` plays whisper-large-v3: 128 mel bins, v3 vocabulary (51866 ids, 100 languages);
- `draft-separate` plays whisper-tiny: 80 mel bins, v2 vocabulary (51865 ids, no `<|yue|>`, so every special
  token from `<|translate|>` on is one id lower), its own shallower encoder and a shallower decoder;
- `draft-shared` plays distil-large-v3: the target's encoder (same config, same weights), shallower decoder.

Tokenizers hold openai/whisper's real vocabulary (`assets/multilingual.tiktoken`), special tokens at the hub
ids. The weights are random but deliberately shaped (`InitScales`), so that greedy transcripts are varied,
depend on the audio, end after a few dozen tokens, and the drafts agree with the target only in part:

- linear layers are N(0, 1/fan_in), activations keep unit scale; each residual branch has its own gain.
  Layers reading GELU outputs get zero-sum rows, or GELU's positive mean would be one direction shared by
  every state, and one token would win everywhere;
- token embeddings are random unit vectors and the decoder's final layer norm has gain `logit_scale`, so
  logits have about that standard deviation (peaked, like a trained model's). The first decoder layer's
  attention is weak, so its MLP makes the next token a random function of the current one (a bigram
  model); self-attention adds context and sharp cross-attention (large queries and keys, a few frames per
  token) adds the audio;
- dimension 0 of the decoder's residual stream is a position counter that no layer reads or writes and
  only `<|endoftext|>` reads: the end becomes likelier with every token. Timestamp embeddings share one
  direction, so in timestamp mode their summed probability sometimes beats the best text token;
- draft-shared is the target's encoder plus copies of its embeddings and first and last decoder layers
  (as distil-whisper was made); the target's middle decoder layers have weak residual branches
  (`middle_layer`), so they change its top-1 on a minority of positions;
- draft-separate has the same decoder copies (embedding rows matched by token string: its special ids
  differ) and copies of the target's first two encoder layers, its first convolution reading 80 mel bins
  by interpolating the target's 128-bin kernel along frequency. It hears the audio almost as the target
  does; the target's deeper encoder layers (`deep_encoder_layer`) and middle decoder layers make the rest.
"""

from __future__ import annotations

import base64
import math
import re
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
from transformers.convert_slow_tokenizer import TikTokenConverter
from transformers.models.whisper.modeling_whisper import WhisperDecoder, sinusoids
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec.whisper.tokenizer import NUM_TIMESTAMPS, whisper_tokenizer

VOCABULARY_FILE = Path(__file__).parent / "assets" / "multilingual.tiktoken"


@dataclass(frozen=True)
class Vocabulary:
    """One generation of Whisper's multilingual vocabulary."""

    num_languages: int  # 99 up to large-v2, 100 from large-v3 (`<|yue|>` added)
    no_speech_token: str  # `<|nocaptions|>` in v2 hub tokenizers, `<|nospeech|>` in v3


V2 = Vocabulary(num_languages=99, no_speech_token="<|nocaptions|>")
V3 = Vocabulary(num_languages=100, no_speech_token="<|nospeech|>")


@dataclass(frozen=True)
class DemoModelSpec:
    """Architecture of one demo checkpoint; layer widths are shared so that drafts can copy target layers."""

    vocabulary: Vocabulary
    num_mel_bins: int
    encoder_layers: int
    encoder_ffn_dim: int
    decoder_layers: int
    d_model: int = 256
    attention_heads: int = 4
    decoder_ffn_dim: int = 1024


TARGET = DemoModelSpec(V3, num_mel_bins=128, encoder_layers=4, encoder_ffn_dim=1024, decoder_layers=4)
DRAFT_SEPARATE = DemoModelSpec(V2, num_mel_bins=80, encoder_layers=2, encoder_ffn_dim=1024, decoder_layers=2)
DRAFT_SHARED = DemoModelSpec(V3, num_mel_bins=128, encoder_layers=4, encoder_ffn_dim=1024, decoder_layers=2)
SPECS = {"target": TARGET, "draft-separate": DRAFT_SEPARATE, "draft-shared": DRAFT_SHARED}
COPIED_DECODER_LAYERS = (0, 3)  # target decoder layers the drafts' decoders are copies of: first and last


@dataclass(frozen=True)
class InitScales:
    """Gains of the deliberate random initialisation (see the module docstring); 1 keeps unit scale."""

    logit_scale: float = 5.0  # gain of the decoder's final layer norm = std of the logits
    length_drift: float = 0.016  # growth per position of the decoder's position counter (dimension 0)
    eot_length_gain: float = 4.0  # how strongly `<|endoftext|>` reads that counter
    timestamp_norm: float = 1.3  # length of the timestamps' embeddings
    timestamp_spread: float = 0.3  # how far timestamp embeddings stray from their shared direction
    position_norm: float = 0.5  # length of each learned decoder position embedding
    conv_gain: float = 2.0  # encoder convolutions, so that audio outweighs the sinusoidal positions
    encoder_residual: float = 0.5  # encoder layers' out_proj and fc2
    self_attention: float = 0.5  # decoder self-attention out_proj
    self_attention_sharpness: float = 1.5  # decoder self-attention queries and keys
    cross_attention: float = 0.15  # decoder cross-attention out_proj
    cross_attention_sharpness: float = 3.0  # decoder cross-attention queries and keys
    feed_forward: float = 1.0  # decoder fc2
    first_layer_attention: float = 0.2  # extra gain of layer 0's attention: its MLP reads the current token
    middle_layer: float = 0.04  # extra gain of the target decoder layers that the drafts lack
    deep_encoder_layer: float = 0.3  # extra gain of the target encoder layers that draft-separate lacks


# --- tokenizer -------------------------------------------------------------------------------------------


class _TiktokenFileConverter(TikTokenConverter):
    """transformers' tiktoken converter, reading the `.tiktoken` file without the `tiktoken` package."""

    @staticmethod
    def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
        with open(tiktoken_url, "rb") as lines:
            return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines)}


def special_tokens(vocabulary: Vocabulary) -> list[str]:
    """Special tokens after `<|endoftext|>`, in id order (`<|startoftranscript|>` is id 50258)."""
    languages = list(LANGUAGES)[: vocabulary.num_languages]
    return [
        "<|startoftranscript|>",
        *[f"<|{code}|>" for code in languages],
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        vocabulary.no_speech_token,
        "<|notimestamps|>",
    ]


def build_tokenizer(vocabulary: Vocabulary) -> WhisperTokenizer:
    """A Whisper tokenizer with openai/whisper's text tokens and the hub's special and timestamp tokens."""
    vocab, merges = _TiktokenFileConverter().extract_vocab_merges_from_model(str(VOCABULARY_FILE))
    return whisper_tokenizer(vocab, merges, special_tokens(vocabulary))  # <|endoftext|> appended as 50257


def non_speech_tokens(tokenizer: WhisperTokenizer) -> list[int]:
    """openai/whisper's `Tokenizer.non_speech_tokens`: symbols that are not speech, e.g. `♪♪♪` or `[`."""
    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()  # noqa: SIM905
    miscellaneous = set("♩♪♫♬♭♮♯")  # may be several tokens: suppress the first
    result = {tokenizer.encode(" -", add_special_tokens=False)[0]}
    result.add(tokenizer.encode(" '", add_special_tokens=False)[0])
    for symbol in symbols + sorted(miscellaneous):
        for text in (symbol, " " + symbol):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1 or symbol in miscellaneous:
                result.add(ids[0])
    return sorted(result)


def _blank_id(tokenizer: WhisperTokenizer) -> int:
    """Id of the token " " (220), which Whisper never lets a transcript start with."""
    return tokenizer.encode(" ", add_special_tokens=False)[0]


# --- configs ---------------------------------------------------------------------------------------------


def build_generation_config(tokenizer: WhisperTokenizer, spec: DemoModelSpec) -> GenerationConfig:
    """A generation config laid out like the hub's Whisper ones, with this vocabulary's ids."""
    ids = tokenizer.convert_tokens_to_ids
    # like openai/whisper's suppress_tokens="-1" and the hub configs: non-speech symbols and control tokens
    control = ["<|translate|>", "<|transcribe|>", "<|startoftranscript|>", "<|startoflm|>", "<|startofprev|>"]
    control.append(spec.vocabulary.no_speech_token)
    suppress = set(non_speech_tokens(tokenizer)) | {ids(token) for token in control}
    languages = list(LANGUAGES)[: spec.vocabulary.num_languages]
    last_layer = spec.decoder_layers - 1
    return GenerationConfig(
        alignment_heads=[[last_layer, head] for head in range(spec.attention_heads)],
        begin_suppress_tokens=[_blank_id(tokenizer), ids("<|endoftext|>")],
        bos_token_id=ids("<|endoftext|>"),
        decoder_start_token_id=ids("<|startoftranscript|>"),
        eos_token_id=ids("<|endoftext|>"),
        pad_token_id=ids("<|endoftext|>"),
        is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in languages},
        task_to_id={"translate": ids("<|translate|>"), "transcribe": ids("<|transcribe|>")},
        max_initial_timestamp_index=50,
        max_length=448,
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        suppress_tokens=sorted(suppress),
    )


def build_model_config(tokenizer: WhisperTokenizer, spec: DemoModelSpec) -> WhisperConfig:
    """The `WhisperConfig` of one demo checkpoint."""
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=spec.num_mel_bins,
        d_model=spec.d_model,
        encoder_layers=spec.encoder_layers,
        encoder_attention_heads=spec.attention_heads,
        encoder_ffn_dim=spec.encoder_ffn_dim,
        decoder_layers=spec.decoder_layers,
        decoder_attention_heads=spec.attention_heads,
        decoder_ffn_dim=spec.decoder_ffn_dim,
        max_source_positions=1500,
        max_target_positions=448,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        decoder_start_token_id=tokenizer.convert_tokens_to_ids("<|startoftranscript|>"),
        begin_suppress_tokens=[_blank_id(tokenizer), eot],
    )


# --- weights ---------------------------------------------------------------------------------------------


def _random_rows(rows: int, dim: int, norm: float, generator: torch.Generator) -> torch.Tensor:
    """(rows, dim) random directions of length `norm`."""
    values = torch.randn(rows, dim, generator=generator)
    return values / values.norm(dim=-1, keepdim=True) * norm


def _token_embeddings(
    vocab_size: int, dim: int, scales: InitScales, generator: torch.Generator
) -> torch.Tensor:
    """(vocab, dim) unit rows, timestamps close to one shared direction (dimension 0 is set later)."""
    rows = _random_rows(vocab_size, dim, norm=1.0, generator=generator)
    # near-equal timestamp logits add up: in timestamp mode, where a timestamp is forced once their total
    # probability beats the best text token's, segments then end now and again; alone, none wins in text mode
    shared = _random_rows(1, dim, norm=1.0, generator=generator)
    spread = _random_rows(NUM_TIMESTAMPS, dim, norm=scales.timestamp_spread, generator=generator)
    timestamps = shared + spread
    rows[-NUM_TIMESTAMPS:] = timestamps * (scales.timestamp_norm / timestamps.norm(dim=-1, keepdim=True))
    return rows


def _layer_index(name: str, stack: str) -> int | None:
    """Index of the encoder or decoder (`stack`) layer a parameter belongs to, else None."""
    match = re.search(rf"{stack}\.layers\.(\d+)\.", name)
    return int(match.group(1)) if match else None


def _linear_gain(name: str, scales: InitScales) -> float:
    """Gain over N(0, 1/fan_in) of one linear layer's weight of the target, by its role."""
    writes_residual = name.endswith(("out_proj.weight", "fc2.weight"))
    if name.startswith("model.encoder."):
        if not writes_residual:
            return 1.0
        deep = _layer_index(name, "encoder") >= DRAFT_SEPARATE.encoder_layers
        return scales.encoder_residual * (scales.deep_encoder_layer if deep else 1.0)
    gains = {
        "self_attn.q_proj": scales.self_attention_sharpness,
        "self_attn.k_proj": scales.self_attention_sharpness,
        "self_attn.out_proj": scales.self_attention,
        "encoder_attn.q_proj": scales.cross_attention_sharpness,
        "encoder_attn.k_proj": scales.cross_attention_sharpness,
        "encoder_attn.out_proj": scales.cross_attention,
        "fc2": scales.feed_forward,
    }
    gain = next((value for role, value in gains.items() if f".{role}." in name), 1.0)
    layer = _layer_index(name, "decoder")
    if layer == 0 and "attn.out_proj" in name:
        gain *= scales.first_layer_attention
    if layer not in COPIED_DECODER_LAYERS and writes_residual:
        gain *= scales.middle_layer
    return gain


def _initial_value(
    name: str, shape: torch.Size, scales: InitScales, generator: torch.Generator
) -> torch.Tensor:
    """The deliberate random value of one parameter (see the module docstring)."""
    if "layer_norm" in name:
        if name == "model.decoder.layer_norm.weight":
            return torch.full(shape, scales.logit_scale)
        return torch.ones(shape) if name.endswith("weight") else torch.zeros(shape)
    if name.endswith("bias"):
        return torch.zeros(shape)
    if name == "model.encoder.embed_positions.weight":
        return sinusoids(*shape)
    if name == "model.decoder.embed_positions.weight":
        return _random_rows(*shape, norm=scales.position_norm, generator=generator)
    if name == "model.decoder.embed_tokens.weight":
        return _token_embeddings(*shape, scales=scales, generator=generator)
    fan_in = math.prod(shape[1:])  # linear (out, in) and conv (out, in, kernel)
    gain = scales.conv_gain if ".conv" in name else _linear_gain(name, scales)
    weight = torch.randn(shape, generator=generator) * (gain / math.sqrt(fan_in))
    if name.endswith(("fc2.weight", "conv2.weight")):
        # these read GELU outputs, whose mean is positive: zero-sum rows keep that mean from becoming one
        # direction shared by every state (in the decoder, a token that would win at every step)
        weight -= weight.mean(dim=tuple(range(1, weight.dim())), keepdim=True)
    return weight


def _initialise(
    model: WhisperForConditionalGeneration, scales: InitScales, generator: torch.Generator
) -> None:
    """Overwrite every parameter of the target (its output projection is tied to the token embeddings)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(_initial_value(name, param.shape, scales, generator))
        _reserve_length_channel(model.model.decoder, scales, model.config.eos_token_id)


def _reserve_length_channel(decoder: WhisperDecoder, scales: InitScales, eot_id: int) -> None:
    """Make dimension 0 of the decoder's residual stream a position counter that only `<|endoftext|>` reads.

    No layer reads or writes that dimension, so the counter reaches the output untouched and raises the
    end-of-text logit with every position: transcripts end after a few dozen tokens, not at random.
    """
    for layer in decoder.layers:
        readers = [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.fc1]
        for linear in [*readers, layer.encoder_attn.q_proj]:  # encoder_attn's k and v read the encoder
            linear.weight[:, 0] = 0.0
        for linear in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
            linear.weight[0, :] = 0.0
    decoder.embed_tokens.weight[:, 0] = 0.0
    decoder.embed_tokens.weight[eot_id, 0] = scales.eot_length_gain
    positions = torch.arange(decoder.embed_positions.weight.shape[0], dtype=torch.float32)
    decoder.embed_positions.weight[:, 0] = scales.length_drift * positions


def _new_model(config: WhisperConfig) -> WhisperForConditionalGeneration:
    """An untrained model; its own random init runs on a forked RNG, leaving the caller's untouched."""
    with torch.random.fork_rng(devices=[]):
        return WhisperForConditionalGeneration(config).eval()


def _copy_decoder(
    target: WhisperForConditionalGeneration, draft: WhisperForConditionalGeneration, target_rows: torch.Tensor
) -> None:
    """Give `draft` the target's embeddings (row i <- target row `target_rows[i]`) and copied layers."""
    source, destination = target.model.decoder, draft.model.decoder
    with torch.no_grad():
        destination.embed_tokens.weight.copy_(source.embed_tokens.weight[target_rows])
        destination.embed_positions.weight.copy_(source.embed_positions.weight)
    destination.layer_norm.load_state_dict(source.layer_norm.state_dict())
    for draft_index, target_index in enumerate(COPIED_DECODER_LAYERS):
        destination.layers[draft_index].load_state_dict(source.layers[target_index].state_dict())


def _mel_interpolation(num_target_mels: int, num_draft_mels: int) -> torch.Tensor:
    """(target mels, draft mels) linear interpolation between two log-mel layouts of the same audio.

    Whisper's mel bins are evenly spaced on the mel scale over 0-8 kHz whatever their number, so target
    bin j is centred at draft bin (j + 1) * (draft + 1) / (target + 1) - 1.
    """
    centres = (torch.arange(num_target_mels) + 1) * (num_draft_mels + 1) / (num_target_mels + 1) - 1
    centres = centres.clamp(0, num_draft_mels - 1)
    low = centres.floor().long().clamp(max=num_draft_mels - 2)
    weights = torch.zeros(num_target_mels, num_draft_mels)
    weights[torch.arange(num_target_mels), low] = 1 - (centres - low)
    weights[torch.arange(num_target_mels), low + 1] = centres - low
    return weights


def _copy_encoder(target: WhisperForConditionalGeneration, draft: WhisperForConditionalGeneration) -> None:
    """Give `draft` the target's first encoder layers, its first convolution reading the draft's mel bins."""
    source, destination = target.model.encoder, draft.model.encoder
    source_state = source.state_dict()  # has more layers than the draft
    copied = destination.state_dict().keys() - {"conv1.weight"}
    destination.load_state_dict({key: source_state[key] for key in copied}, strict=False)
    mel_map = _mel_interpolation(source.conv1.in_channels, destination.conv1.in_channels)
    with torch.no_grad():
        destination.conv1.weight.copy_(torch.einsum("ojk,ji->oik", source.conv1.weight, mel_map))


def _matching_rows(draft_tokenizer: WhisperTokenizer, target_tokenizer: WhisperTokenizer) -> torch.Tensor:
    """(draft vocab,) target id of each draft token, matched by string; `<|nocaptions|>` is `<|nospeech|>`."""
    target_vocab = target_tokenizer.get_vocab()
    aliases = {V2.no_speech_token: V3.no_speech_token}
    rows = torch.empty(len(draft_tokenizer), dtype=torch.long)
    for token, draft_id in draft_tokenizer.get_vocab().items():
        rows[draft_id] = target_vocab[aliases.get(token, token)]
    return rows


# --- checkpoints -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoModel:
    """One demo checkpoint in memory, before it is written."""

    model: WhisperForConditionalGeneration
    tokenizer: WhisperTokenizer
    spec: DemoModelSpec


def build_models(seed: int = 0, scales: InitScales | None = None) -> dict[str, DemoModel]:
    """The three demo models with generation configs attached, keyed like `build_demo_models`' result."""
    scales = scales or InitScales()
    generator = torch.Generator().manual_seed(seed)
    tokenizers = {vocabulary: build_tokenizer(vocabulary) for vocabulary in (V3, V2)}
    models = {name: _new_model(build_model_config(tokenizers[s.vocabulary], s)) for name, s in SPECS.items()}

    target, draft_shared, draft_separate = models["target"], models["draft-shared"], models["draft-separate"]
    _initialise(target, scales, generator)
    draft_shared.model.encoder.load_state_dict(target.model.encoder.state_dict())
    _copy_decoder(target, draft_shared, torch.arange(target.config.vocab_size))
    _copy_encoder(target, draft_separate)
    _copy_decoder(target, draft_separate, _matching_rows(tokenizers[V2], tokenizers[V3]))

    for name, spec in SPECS.items():
        models[name].generation_config = build_generation_config(tokenizers[spec.vocabulary], spec)
    return {name: DemoModel(models[name], tokenizers[s.vocabulary], s) for name, s in SPECS.items()}


def build_demo_models(out_dir: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write the target and both drafts under `out_dir` (see the module docstring); returns their paths."""
    paths = {}
    for name, demo in build_models(seed).items():
        paths[name] = Path(out_dir) / name
        demo.model.save_pretrained(paths[name])
        features = WhisperFeatureExtractor(feature_size=demo.spec.num_mel_bins)
        WhisperProcessor(feature_extractor=features, tokenizer=demo.tokenizer).save_pretrained(paths[name])
    return paths
