"""Writing a family's test model: random weights in its architecture, its real tokenizer and template.

    model = build("qwen3")          # TestModel(path=..., tokenizer_json=..., bos_token=..., ...)
    reranker = build("qwen3-reranker")   # a reranker of :data:`RERANKERS` (rank pooling, a score head)

Files are cached by the hash of their recipe; docs/testing.md ("Test models of each family") says more.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from snapllm_dev.cache import ensure
from snapllm_dev.testmodels.families import RERANKERS, TEST_MODEL_FAMILIES, Family, RerankerFamily
from snapllm_dev.testmodels.sources import cache_root, corpus_template
from snapllm_dev.testmodels.vocab import Vocabulary, read_vocabulary, write_vocabulary

#: Bumped whenever what a recipe writes changes, so that older cached files are not reused.
BUILDER_VERSION = 3


@dataclass(frozen=True)
class Shape:
    """The model's size: layers, widths and heads (the vocabulary is always the tokenizer's)."""

    name: str
    layers: int
    embedding: int
    feed_forward: int
    heads: int
    kv_heads: int
    #: Weights as random Q4_0 blocks (the benchmark sizes), else random F16 values.
    quantized: bool = False
    context: int = 4096

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads


SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("tiny", layers=2, embedding=64, feed_forward=128, heads=4, kv_heads=2),
        # Real models' sizes (SmolLM2-135M's, Llama 3.2 1B's and 3B's), for benchmarks: Q4_0, as deployed.
        Shape("135m", layers=30, embedding=576, feed_forward=1536, heads=9, kv_heads=3, quantized=True),
        Shape("1b", layers=16, embedding=2048, feed_forward=8192, heads=32, kv_heads=8, quantized=True),
        Shape("3b", layers=28, embedding=3072, feed_forward=8192, heads=24, kv_heads=8, quantized=True),
    )
}


@dataclass(frozen=True)
class TestModel:
    """A built test model and what a test needs to check it against its tokenizer."""

    family: str
    path: Path
    tokenizer_json: Path
    chat_template: str
    bos_token: str
    eos_token: str
    end_of_turn: str
    add_bos: bool


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes a special token as text or as an AddedToken mapping.
    if isinstance(value, dict):
        return value.get("content")
    return value


def _adds_bos(config: dict, tokenizer: dict) -> bool:
    """``add_bos_token`` from the config, else whether the post-processor puts a special token first."""
    if "add_bos_token" in config:
        return bool(config["add_bos_token"])
    processors = [tokenizer.get("post_processor") or {}]
    processors += processors[0].get("processors", [])
    for processor in processors:
        if processor.get("type") == "TemplateProcessing":
            return "SpecialToken" in processor["single"][0]
    return False


def _recipe_key(family: Family, shape: Shape) -> str:
    recipe = {"family": asdict(family), "shape": asdict(shape), "builder": BUILDER_VERSION}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:12]


def build(name: str, shape: str = "tiny") -> TestModel:
    """Family (or reranker) ``name``'s test model, built on first use and cached."""
    family = TEST_MODEL_FAMILIES[name] if name in TEST_MODEL_FAMILIES else RERANKERS[name]
    size = SHAPES[shape]
    config = family.tokenizer.config()
    tokenizer_json = family.tokenizer.tokenizer_json
    template = corpus_template(family.corpus_template) if family.corpus_template else config["chat_template"]
    bos = _token_text(config.get("bos_token")) or ""
    eos = _token_text(config.get("eos_token")) or ""
    path = cache_root() / "models" / f"{name}-{shape}-{_recipe_key(family, size)}.gguf"
    # What the tokenizer says about its BOS is kept beside the file: a cached build reads no tokenizer.json.
    facts_path = path.with_suffix(".json")

    def write() -> None:
        tokenizer = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        facts = {"add_bos": _adds_bos(config, tokenizer)}
        vocabulary = read_vocabulary(tokenizer_json, family.tokenizer_model)
        _write(path, family, size, vocabulary, template, bos=bos, eos=eos, add_bos=facts["add_bos"])
        facts_path.write_text(json.dumps(facts))
        # Files of older recipes of this family and shape are never read again.
        for older in path.parent.glob(f"{name}-{shape}-*"):
            if older.stem != path.stem:
                older.unlink(missing_ok=True)

    ensure(f"models/{name}-{shape}", made=lambda: path.is_file() and facts_path.is_file(), make=write)
    facts = json.loads(facts_path.read_text())
    return TestModel(name, path, tokenizer_json, template, bos, eos, family.end_of_turn, facts["add_bos"])


def build_all(shape: str = "tiny") -> dict[str, TestModel]:
    """Every family's test model."""
    return {name: build(name, shape) for name in TEST_MODEL_FAMILIES}


def _write(
    path: Path,
    family: Family,
    shape: Shape,
    vocabulary: Vocabulary,
    template: str,
    *,
    bos: str,
    eos: str,
    add_bos: bool,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}")
    writer = gguf.GGUFWriter(str(partial), family.architecture)
    writer.add_name(f"snapllm test model: {family.name} ({shape.name}, random weights)")
    _hyperparameters(writer, family, shape)
    write_vocabulary(writer, vocabulary, family.pre)
    if bos:
        writer.add_bos_token_id(vocabulary.id_of(bos))
    writer.add_eos_token_id(vocabulary.id_of(eos))
    writer.add_eot_token_id(vocabulary.id_of(family.end_of_turn))
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    if family.tokenizer_model == "llama":
        writer.add_add_space_prefix(False)
    writer.add_chat_template(template)
    if isinstance(family, RerankerFamily):
        writer.add_chat_template([{"name": "rerank", "template": family.rerank_template}])
        writer.add_pooling_type(gguf.PoolingType.RANK)
        writer.add_classifier_output_labels(list(family.labels))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if shape.quantized else gguf.LlamaFileType.MOSTLY_F16)
    seed = int.from_bytes(hashlib.sha256(family.name.encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    layout = _layout(family, shape, len(vocabulary.tokens))
    # The tensors are described first and written one by one, so a large shape never holds all its weights.
    for tensor in layout:
        kind = _stored_type(tensor, shape)
        byte_shape = gguf.quant_shape_to_byte_shape(tensor.dims, kind) if kind == Q4_0 else tensor.dims
        dtype = np.dtype(np.uint8 if kind == Q4_0 else np.float16 if kind == F16 else np.float32)
        nbytes = int(np.prod(byte_shape)) * dtype.itemsize
        writer.add_tensor_info(
            tensor.name, byte_shape, dtype, nbytes, raw_dtype=kind if kind == Q4_0 else None
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in layout:
        writer.write_tensor_data(_values(tensor, _stored_type(tensor, shape), rng))
    writer.close()
    partial.rename(path)


def _hyperparameters(writer: gguf.GGUFWriter, family: Family, shape: Shape) -> None:
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.embedding)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    if family.sliding_window:
        writer.add_sliding_window(family.sliding_window)
    if family.experts:
        writer.add_expert_count(family.experts)
        writer.add_expert_used_count(family.experts_used)
        writer.add_expert_feed_forward_length(shape.feed_forward // 2)


Q4_0, F16, F32 = gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
#: A Q4_0 block's scale: random nibbles (-8..7) times it give weights of about the usual initial size.
_Q4_0_SCALE = np.float16(0.005)


@dataclass(frozen=True)
class _Tensor:
    """One tensor: its GGUF name, its dimensions (numpy's order: ggml's reversed) and its values: random
    weights, or ``fill`` everywhere (norm weights 1, biases 0), stored as F32."""

    name: str
    dims: tuple[int, ...]
    fill: float | None = None
    float32: bool = False


def _stored_type(tensor: _Tensor, shape: Shape) -> gguf.GGMLQuantizationType:
    if tensor.fill is not None or tensor.float32:
        return F32
    return Q4_0 if shape.quantized else F16


def _values(tensor: _Tensor, kind: gguf.GGMLQuantizationType, rng: np.random.Generator) -> np.ndarray:
    if tensor.fill is not None:
        return np.full(tensor.dims, tensor.fill, dtype=np.float32)
    if kind == Q4_0:
        # Random blocks written directly (no float weights to quantize): 2 bytes of scale, 16 of nibbles.
        block_size, type_size = gguf.GGML_QUANT_SIZES[Q4_0]
        blocks = rng.integers(0, 256, (*tensor.dims[:-1], tensor.dims[-1] // block_size, type_size), np.uint8)
        blocks[..., :2] = np.frombuffer(_Q4_0_SCALE.tobytes(), dtype=np.uint8)
        return blocks.reshape(*tensor.dims[:-1], -1)
    values = rng.standard_normal(tensor.dims, dtype=np.float32) * 0.02
    return values if kind == F32 else values.astype(np.float16)


def _layout(family: Family, shape: Shape, vocab: int) -> list[_Tensor]:
    """Each tensor the architecture's graph loads, as llama.cpp names and shapes it."""
    names = gguf.TENSOR_NAMES
    kind = gguf.MODEL_TENSOR
    embd, hd, ff = shape.embedding, shape.head_dim, shape.feed_forward
    q, kv = shape.heads * hd, shape.kv_heads * hd
    tensors = [_Tensor(names[kind.TOKEN_EMBD] + ".weight", (vocab, embd))]
    tensors.append(_Tensor(names[kind.OUTPUT_NORM] + ".weight", (embd,), fill=1.0))
    if not family.tied_output:
        tensors.append(_Tensor(names[kind.OUTPUT] + ".weight", (vocab, embd)))
    if isinstance(family, RerankerFamily):
        # The score head: one row per output label, applied to the pooled (last) token.
        tensors.append(_Tensor(names[kind.CLS_OUT] + ".weight", (len(family.labels), embd)))
    arch = family.architecture
    for layer in range(shape.layers):

        def name(tensor: gguf.MODEL_TENSOR, suffix: str = "weight", layer: int = layer) -> str:
            return names[tensor].format(bid=layer) + "." + suffix

        tensors += [
            _Tensor(name(kind.ATTN_NORM), (embd,), fill=1.0),
            _Tensor(name(kind.ATTN_Q), (q, embd)),
            _Tensor(name(kind.ATTN_K), (kv, embd)),
            _Tensor(name(kind.ATTN_V), (kv, embd)),
            _Tensor(name(kind.ATTN_OUT), (embd, q)),
        ]
        if arch in ("qwen2", "gpt-oss"):
            tensors += [
                _Tensor(name(kind.ATTN_Q, "bias"), (q,), fill=0.0),
                _Tensor(name(kind.ATTN_K, "bias"), (kv,), fill=0.0),
                _Tensor(name(kind.ATTN_V, "bias"), (kv,), fill=0.0),
            ]
        if arch in ("qwen3", "gemma3"):
            tensors += [
                _Tensor(name(kind.ATTN_Q_NORM), (hd,), fill=1.0),
                _Tensor(name(kind.ATTN_K_NORM), (hd,), fill=1.0),
            ]
        if arch in ("gemma3", "gpt-oss"):
            tensors.append(_Tensor(name(kind.ATTN_POST_NORM), (embd,), fill=1.0))
        if arch == "gpt-oss":
            experts, expert_ff = family.experts, ff // 2
            tensors += [
                _Tensor(name(kind.ATTN_OUT, "bias"), (embd,), fill=0.0),
                _Tensor(name(kind.ATTN_SINKS), (shape.heads,), fill=0.0),
                _Tensor(name(kind.FFN_GATE_INP), (experts, embd), float32=True),
                _Tensor(name(kind.FFN_GATE_INP, "bias"), (experts,), fill=0.0),
                _Tensor(name(kind.FFN_GATE_EXP), (experts, expert_ff, embd)),
                _Tensor(name(kind.FFN_UP_EXP), (experts, expert_ff, embd)),
                _Tensor(name(kind.FFN_DOWN_EXP), (experts, embd, expert_ff)),
                _Tensor(name(kind.FFN_GATE_EXP, "bias"), (experts, expert_ff), fill=0.0),
                _Tensor(name(kind.FFN_UP_EXP, "bias"), (experts, expert_ff), fill=0.0),
                _Tensor(name(kind.FFN_DOWN_EXP, "bias"), (experts, embd), fill=0.0),
            ]
            continue
        tensors += [
            _Tensor(name(kind.FFN_NORM), (embd,), fill=1.0),
            _Tensor(name(kind.FFN_GATE), (ff, embd)),
            _Tensor(name(kind.FFN_UP), (ff, embd)),
            _Tensor(name(kind.FFN_DOWN), (embd, ff)),
        ]
        if arch == "gemma3":
            tensors.append(_Tensor(name(kind.FFN_POST_NORM), (embd,), fill=1.0))
    return tensors
