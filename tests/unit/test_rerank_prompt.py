"""How a query and a document become one sequence for a reranker, without a model: the GGUF's rerank
prompt filled in, or llama-server's BOS/EOS/SEP layout around the two texts' tokens. The vocabularies here
are plain values standing for what a loaded model reports of its special tokens (no model is needed to
check a layout)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from snapllm.protocol.model_routes.rerank import fill_rerank_template, pair_tokens

QUERY, DOCUMENT = [10, 11], [20, 21, 22]


@dataclass(frozen=True)
class Specials:
    """What :func:`pair_tokens` reads of a model: its BOS, EOS and SEP ids and whether it adds each."""

    bos_token: int | None = 1
    eos_token: int | None = 2
    sep_token: int | None = 3
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False


def test_the_template_takes_the_query_and_the_document_where_it_names_them():
    template = "<s>Q: {query}\nD: {document}</s> (again: {query})"
    assert fill_rerank_template(template, "cats?", "A cat.") == "<s>Q: cats?\nD: A cat.</s> (again: cats?)"


def test_a_placeholder_written_in_the_query_stays_text():
    assert fill_rerank_template("{query}|{document}", "about {document}", "doc") == "about {document}|doc"
    assert fill_rerank_template("{query}|{document}", "q", "about {query}") == "q|about {query}"


@pytest.mark.parametrize(
    ("specials", "expected"),
    [
        # BERT: [CLS] query [SEP] [SEP] document [SEP] (CLS as BOS, SEP as EOS and as separator).
        (Specials(1, 2, 2, add_bos=True, add_eos=True, add_sep=True), [1, *QUERY, 2, 2, *DOCUMENT, 2]),
        # A BOS-only tokenizer: BOS query document.
        (Specials(add_bos=True), [1, *QUERY, *DOCUMENT]),
        # Nothing added: the two texts back to back.
        (Specials(), [*QUERY, *DOCUMENT]),
        # No EOS: SEP stands in for it.
        (Specials(eos_token=None, add_eos=True), [*QUERY, 3, *DOCUMENT, 3]),
        # A BOS the tokenizer adds but the vocabulary lacks is left out.
        (Specials(bos_token=None, add_bos=True, add_sep=True), [*QUERY, 3, *DOCUMENT]),
    ],
    ids=["bert", "bos-only", "none", "sep-for-eos", "no-bos-token"],
)
def test_without_a_template_the_pair_is_laid_out_as_llama_server_lays_it(specials, expected):
    assert pair_tokens(specials, QUERY, DOCUMENT) == expected
