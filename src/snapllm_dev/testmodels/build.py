"""Writing a family's test model: random weights in its architecture, its real tokenizer and template.

    model = build("qwen3")          # TestModel(path=..., tokenizer_json=..., bos_token=..., ...)
    models = build_all()            # every family of :data:`FAMILIES`

The weights are random (seeded by the family's name, so a rebuild writes the same file): the model
generates noise, but it tokenizes, renders, stops and follows grammars exactly as the real model's file
does. A file is cached under ``<cache>/test-models/models`` with a name that carries the hash of its recipe
(family, shape, package versions, builder version), so a second build only finds it.
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

from snapllm_dev.testmodels.families import FAMILIES, Family
from snapllm_dev.testmodels.sources import cache_root, corpus_template
from snapllm_dev.testmodels.vocab import Vocabulary, read_vocabulary, write_vocabulary

#: Bumped whenever what a recipe writes changes, so that older cached files are not reused.
BUILDER_VERSION = 2


@dataclass(frozen=True)
class Shape:
    """The model's size: layers, widths and heads (the vocabulary is always the tokenizer's)."""

    name: str
    layers: int
    embedding: int
    feed_forward: int
    heads: int
    kv_heads: int
    context: int = 4096

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads


SHAPES: dict[str, Shape] = {
    "tiny": Shape("tiny", layers=2, embedding=64, feed_forward=128, heads=4, kv_heads=2)
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
    """Family ``name``'s test model, built on first use and cached."""
    family = FAMILIES[name]
    size = SHAPES[shape]
    config = family.tokenizer.config()
    tokenizer_json = family.tokenizer.tokenizer_json
    template = corpus_template(family.corpus_template) if family.corpus_template else config["chat_template"]
    bos = _token_text(config.get("bos_token")) or ""
    eos = _token_text(config.get("eos_token")) or ""
    path = cache_root() / "models" / f"{name}-{shape}-{_recipe_key(family, size)}.gguf"
    # What the tokenizer says about its BOS is kept beside the file: a cached build reads no tokenizer.json.
    facts_path = path.with_suffix(".json")
    if not (path.is_file() and facts_path.is_file()):
        tokenizer = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        facts = {"add_bos": _adds_bos(config, tokenizer)}
        vocabulary = read_vocabulary(tokenizer_json, family.tokenizer_model)
        _write(path, family, size, vocabulary, template, bos=bos, eos=eos, add_bos=facts["add_bos"])
        facts_path.write_text(json.dumps(facts))
    facts = json.loads(facts_path.read_text())
    return TestModel(name, path, tokenizer_json, template, bos, eos, family.end_of_turn, facts["add_bos"])


def build_all(shape: str = "tiny") -> dict[str, TestModel]:
    """Every family's test model."""
    return {name: build(name, shape) for name in FAMILIES}


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
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
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
    seed = int.from_bytes(hashlib.sha256(family.name.encode()).digest()[:8], "little")
    for name, array in _tensors(family, shape, len(vocabulary.tokens), np.random.default_rng(seed)):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
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


def _tensors(
    family: Family, shape: Shape, vocab: int, rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    """Each tensor's GGUF name and values; numpy shapes are ggml's dimensions reversed."""
    names = gguf.TENSOR_NAMES
    kind = gguf.MODEL_TENSOR
    embd, hd = shape.embedding, shape.head_dim
    q, kv = shape.heads * hd, shape.kv_heads * hd

    def matrix(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    def vector(size: int, value: float = 1.0) -> np.ndarray:
        return np.full(size, value, dtype=np.float32)

    tensors = [(names[kind.TOKEN_EMBD] + ".weight", matrix(vocab, embd))]
    tensors.append((names[kind.OUTPUT_NORM] + ".weight", vector(embd)))
    if not family.tied_output:
        tensors.append((names[kind.OUTPUT] + ".weight", matrix(vocab, embd)))
    arch = family.architecture
    for layer in range(shape.layers):

        def name(tensor: gguf.MODEL_TENSOR, suffix: str = "weight", layer: int = layer) -> str:
            return names[tensor].format(bid=layer) + "." + suffix

        tensors += [
            (name(kind.ATTN_NORM), vector(embd)),
            (name(kind.ATTN_Q), matrix(q, embd)),
            (name(kind.ATTN_K), matrix(kv, embd)),
            (name(kind.ATTN_V), matrix(kv, embd)),
            (name(kind.ATTN_OUT), matrix(embd, q)),
        ]
        if arch in ("qwen2", "gpt-oss"):
            tensors += [
                (name(kind.ATTN_Q, "bias"), vector(q, 0.0)),
                (name(kind.ATTN_K, "bias"), vector(kv, 0.0)),
                (name(kind.ATTN_V, "bias"), vector(kv, 0.0)),
            ]
        if arch in ("qwen3", "gemma3"):
            tensors += [(name(kind.ATTN_Q_NORM), vector(hd)), (name(kind.ATTN_K_NORM), vector(hd))]
        if arch in ("gemma3", "gpt-oss"):
            tensors.append((name(kind.ATTN_POST_NORM), vector(embd)))
        if arch == "gpt-oss":
            experts, ff = family.experts, shape.feed_forward // 2
            tensors += [
                (name(kind.ATTN_OUT, "bias"), vector(embd, 0.0)),
                (name(kind.ATTN_SINKS), vector(shape.heads, 0.0)),
                (name(kind.FFN_GATE_INP), matrix(experts, embd).astype(np.float32)),
                (name(kind.FFN_GATE_INP, "bias"), vector(experts, 0.0)),
                (name(kind.FFN_GATE_EXP), matrix(experts, ff, embd)),
                (name(kind.FFN_UP_EXP), matrix(experts, ff, embd)),
                (name(kind.FFN_DOWN_EXP), matrix(experts, embd, ff)),
                (name(kind.FFN_GATE_EXP, "bias"), np.zeros((experts, ff), dtype=np.float32)),
                (name(kind.FFN_UP_EXP, "bias"), np.zeros((experts, ff), dtype=np.float32)),
                (name(kind.FFN_DOWN_EXP, "bias"), np.zeros((experts, embd), dtype=np.float32)),
            ]
            continue
        tensors += [
            (name(kind.FFN_NORM), vector(embd)),
            (name(kind.FFN_GATE), matrix(shape.feed_forward, embd)),
            (name(kind.FFN_UP), matrix(shape.feed_forward, embd)),
            (name(kind.FFN_DOWN), matrix(embd, shape.feed_forward)),
        ]
        if arch == "gemma3":
            tensors.append((name(kind.FFN_POST_NORM), vector(embd)))
    return tensors
