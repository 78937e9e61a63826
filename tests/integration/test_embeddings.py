"""``/v1/embeddings`` with the packaged SmolLM2 as an embedding model (mean pooling): the protocol over the
engine loaded here, the model function's direct invoke (restored from a snapshot its warm-up primed), and
``snapllm local serve`` with the official ``openai`` client and LangChain's ``OpenAIEmbeddings``."""

from __future__ import annotations

import base64
import math
import struct

import openai
import pytest
from langchain_openai import OpenAIEmbeddings

from snapllm.engine.embedding import EmbeddingEngine
from snapllm.engine.settings import EngineSettings
from snapllm.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    UnknownModelError,
    UnsupportedParameterError,
)
from snapllm.protocol.http.routes import EMBEDDINGS, TOKENIZE, routed_event
from snapllm.protocol.model_routes.embeddings import EmbeddingLimits, EmbeddingServing
from tests.support.generation import TEST_THREADS
from tests.support.serve import API_KEY, EMBEDDING_MODEL, KEYED_SERVER_GROUP, MODEL

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(KEYED_SERVER_GROUP)]

TEXTS = ["The cat sat on the mat.", "Stock markets fell sharply today.", "A kitten slept on the rug."]


@pytest.fixture(scope="module")
def embedding_engine(model_path) -> EmbeddingEngine:
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=256, embedding_pooling="mean")
    return EmbeddingEngine.load(str(model_path), settings, model_name=EMBEDDING_MODEL)


def serving(engine: EmbeddingEngine, *, truncatable: bool = False) -> EmbeddingServing:
    limits = EmbeddingLimits(max_inputs=8, max_tokens=300, max_input_chars=2000, truncatable=truncatable)
    return EmbeddingServing(engine, limits=limits)


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


def test_each_input_gets_a_unit_vector_of_the_models_size(embedding_engine):
    answer = serving(embedding_engine).answer({"input": TEXTS, "model": EMBEDDING_MODEL})
    assert answer["object"] == "list" and answer["model"] == EMBEDDING_MODEL
    assert [item["index"] for item in answer["data"]] == [0, 1, 2]
    vectors = [item["embedding"] for item in answer["data"]]
    assert all(len(v) == embedding_engine.n_embd == 576 for v in vectors)
    assert all(abs(norm(v) - 1.0) < 1e-5 for v in vectors)
    tokens = [len(embedding_engine.tokenize(t, add_bos=True, special=False)) for t in TEXTS]
    assert answer["usage"] == {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}
    assert len({tuple(v) for v in vectors}) == 3


def test_a_batch_embeds_each_input_as_it_would_alone(embedding_engine):
    together = serving(embedding_engine).answer({"input": TEXTS})["data"]
    for text, item in zip(TEXTS, together, strict=True):
        alone = serving(embedding_engine).answer({"input": text})["data"][0]["embedding"]
        assert cosine(alone, item["embedding"]) > 0.9999


def test_token_arrays_embed_as_the_text_they_tokenize(embedding_engine):
    tokens = [embedding_engine.tokenize(t, add_bos=True, special=False) for t in TEXTS[:2]]
    by_text = serving(embedding_engine).answer({"input": TEXTS[:2]})["data"]
    by_tokens = serving(embedding_engine).answer({"input": tokens})["data"]
    one = serving(embedding_engine).answer({"input": tokens[0]})["data"]
    for a, b in zip(by_text, by_tokens, strict=True):
        assert cosine(a["embedding"], b["embedding"]) > 0.9999
    assert len(one) == 1 and cosine(one[0]["embedding"], by_text[0]["embedding"]) > 0.9999


def test_base64_is_the_little_endian_float32_bytes_of_the_vector(embedding_engine):
    floats = serving(embedding_engine).answer({"input": TEXTS[0]})["data"][0]["embedding"]
    encoded = serving(embedding_engine).answer({"input": TEXTS[0], "encoding_format": "base64"})
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(decoded) == 576 and max(abs(a - b) for a, b in zip(decoded, floats, strict=True)) < 1e-6


def test_dimensions_cut_and_renormalise_only_where_the_model_allows(embedding_engine):
    with pytest.raises(UnsupportedParameterError) as refused:
        serving(embedding_engine).answer({"input": "x", "dimensions": 64})
    assert refused.value.param == "dimensions"
    full = serving(embedding_engine).answer({"input": TEXTS[0], "dimensions": 576})["data"][0]["embedding"]
    cut = serving(embedding_engine, truncatable=True).answer({"input": TEXTS[0], "dimensions": 64})
    vector = cut["data"][0]["embedding"]
    assert len(vector) == 64 and abs(norm(vector) - 1.0) < 1e-5
    scale = norm(full[:64])
    assert max(abs(a - b / scale) for a, b in zip(vector, full[:64], strict=True)) < 1e-5
    with pytest.raises(InvalidRequestError) as refused:
        serving(embedding_engine, truncatable=True).answer({"input": "x", "dimensions": 577})
    assert refused.value.param == "dimensions"


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"input": []}, InvalidRequestError, "input"),
        ({"input": ""}, InvalidRequestError, "input"),
        ({"input": ["a", ""]}, InvalidRequestError, "input.1"),
        ({"input": [[1, 2], []]}, InvalidRequestError, "input.1"),
        ({"input": ["a"] * 9}, InvalidRequestError, "input"),
        ({"input": [1, 49152]}, InvalidRequestError, "input.1"),
        ({"input": [[1], [5, -1]]}, InvalidRequestError, "input.1.1"),
        ({"input": ["word " * 290]}, ContextLengthExceededError, "input.0"),
        ({"input": ["word " * 100] * 4}, ContextLengthExceededError, "input"),
        ({"input": "a" * 2001}, ContextLengthExceededError, "input"),
        ({"input": [1.5]}, InvalidRequestError, "input"),
        ({"input": "x", "encoding_format": "int8"}, InvalidRequestError, "encoding_format"),
        ({"input": "x", "dimensions": 0}, InvalidRequestError, "dimensions"),
        ({"input": "x", "model": "gpt"}, UnknownModelError, "model"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_what_cannot_be_embedded_is_refused_naming_the_field(embedding_engine, body, error, param):
    with pytest.raises(error) as refused:
        serving(embedding_engine).answer(body)
    assert getattr(refused.value, "param", None) == param


def test_the_embedding_function_answers_embeddings_and_refuses_completions(embedding_environment):
    answer = embedding_environment.invoke(routed_event(EMBEDDINGS, {"input": TEXTS})).response
    assert len(answer["data"]) == 3 and answer["model"] == EMBEDDING_MODEL
    tokens = embedding_environment.invoke(routed_event(TOKENIZE, {"content": "Hi"})).response
    assert tokens["tokens"]
    chat = embedding_environment.invoke({"messages": [{"role": "user", "content": "Hi"}]}).response
    assert chat["statusCode"] == 400 and chat["error"]["param"] == "model"


def test_the_openai_client_embeds_in_float_and_base64(keyed_server):
    client = openai.OpenAI(base_url=keyed_server.base_url, api_key=API_KEY, max_retries=0, timeout=120)
    assert {m.id for m in client.models.list().data} == {MODEL, EMBEDDING_MODEL}
    floats = client.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS, encoding_format="float")
    # The SDK asks for base64 when no format is given, and decodes it.
    decoded = client.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS)
    assert [len(e.embedding) for e in floats.data] == [576] * 3
    for a, b in zip(floats.data, decoded.data, strict=True):
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding, strict=True)) < 1e-6
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 3
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input="x")  # a chat model serves no embeddings
    assert refused.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=EMBEDDING_MODEL, input="x", dimensions=8)


def test_langchain_embeds_documents_and_queries(keyed_server):
    embeddings = OpenAIEmbeddings(
        base_url=keyed_server.base_url,
        api_key=API_KEY,
        model=EMBEDDING_MODEL,
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    documents = embeddings.embed_documents(TEXTS)
    query = embeddings.embed_query(TEXTS[0])
    assert len(documents) == 3 and all(len(d) == 576 for d in documents)
    assert cosine(query, documents[0]) > 0.9999


def test_with_an_api_key_the_sdk_embeds_and_a_wrong_key_gets_401(keyed_server):
    sdk = openai.OpenAI(base_url=keyed_server.base_url, api_key=API_KEY, max_retries=0, timeout=120)
    answer = sdk.embeddings.create(model=EMBEDDING_MODEL, input=TEXTS[:2])
    assert [len(e.embedding) for e in answer.data] == [576, 576]
    wrong = openai.OpenAI(base_url=keyed_server.base_url, api_key=API_KEY + "x", max_retries=0, timeout=120)
    with pytest.raises(openai.AuthenticationError):
        wrong.embeddings.create(model=EMBEDDING_MODEL, input="x")
