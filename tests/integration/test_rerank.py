"""``/v1/rerank`` with the test-model builder's Qwen3-shaped reranker (random weights, the real Qwen3
tokenizer, a two-label score head, rank pooling, a rerank prompt): the protocol over the engine loaded here,
the inference runtime's routes (warm-up included), and ``snapllm local serve`` with an API key over httpx.

The weights are random, so a score says nothing about relevance; what is checked is what does not depend on
them: each pair is scored as it would be alone, results are sorted and cut as asked, the prompt is the one
the GGUF names, and what cannot be scored is refused naming its field."""

from __future__ import annotations

import httpx
import pytest

from snapllm.engine.embedding import EmbeddingEngine
from snapllm.engine.loader import DownloadStats
from snapllm.engine.settings import EngineSettings, ModelSource
from snapllm.errors import ContextLengthExceededError, InvalidRequestError, UnknownModelError
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.http.routes import EMBEDDINGS, RERANK, RERANK_ALIAS, routed_event
from snapllm.protocol.model_routes.embeddings import EmbeddingLimits
from snapllm.protocol.model_routes.rerank import RerankServing, fill_rerank_template
from tests.support.family_models import family_model
from tests.support.generation import TEST_THREADS
from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL, RERANK_MODEL, SERVE_ENV, ServeProcess, rerank_serve_args

pytestmark = pytest.mark.slow

QUERY = "What do cats eat?"
DOCUMENTS = [
    "Cats are carnivores: they eat meat and fish.",
    "The stock market fell sharply today.",
    "Kittens drink milk from their mother.",
    "Rain is expected over the weekend.",
]
LIMITS = EmbeddingLimits(max_inputs=8, max_tokens=600, max_input_chars=500)
KEY = "sk-rerank-0123456789abcdef"


@pytest.fixture(scope="module")
def reranker_path():
    return family_model(RERANK_MODEL).path


@pytest.fixture(scope="module")
def reranker(reranker_path) -> EmbeddingEngine:
    # "model": the GGUF's own pooling type, which the builder writes as rank.
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=256, embedding_pooling="model")
    return EmbeddingEngine.load(str(reranker_path), settings, model_name=RERANK_MODEL)


@pytest.fixture(scope="module")
def reranking(reranker) -> RerankServing:
    return RerankServing(reranker, limits=LIMITS)


def runtime_over(engine: EmbeddingEngine) -> InferenceRuntime:
    """The inference runtime around an engine loaded here, as the function's init builds it."""
    return InferenceRuntime(
        engine,
        InferenceSettings(model=ModelSource(bucket="b", key="k", name=engine.model_name)),
        download=DownloadStats(bytes=1, seconds=1, parts=1, concurrency=1, retries=0, verified=False),
    )


def test_the_gguf_pools_by_rank_through_a_two_label_head(reranker):
    assert reranker.pooling == "rank" and reranker.is_reranker and reranker.n_outputs == 2
    assert reranker.metadata["qwen3.pooling_type"] == "4"


def test_results_are_sorted_by_score_and_cut_to_top_n(reranking, reranker):
    everything = reranking.answer({"query": QUERY, "documents": DOCUMENTS, "model": RERANK_MODEL})
    assert everything["object"] == "list" and everything["model"] == RERANK_MODEL
    results = everything["results"]
    scores = [r["relevance_score"] for r in results]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4
    # A Qwen3 reranker's score is llama.cpp's softmax of its two labels: a probability.
    assert all(0.0 < s < 1.0 for s in scores)
    assert all(set(r) == {"index", "relevance_score"} for r in results)
    pairs = reranking.pairs(QUERY, DOCUMENTS)
    count = sum(len(p) for p in pairs)
    assert everything["usage"] == {"prompt_tokens": count, "total_tokens": count}
    top = reranking.answer({"query": QUERY, "documents": DOCUMENTS, "top_n": 2})["results"]
    assert top == results[:2]
    assert reranking.answer({"query": QUERY, "documents": DOCUMENTS, "top_n": 99})["results"] == results


def test_documents_as_strings_or_objects_and_returned_on_request(reranking):
    mixed = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2]]
    answer = reranking.answer({"query": QUERY, "documents": mixed, "return_documents": True})
    as_strings = reranking.answer({"query": QUERY, "documents": DOCUMENTS[:3]})
    for returned, plain in zip(answer["results"], as_strings["results"], strict=True):
        assert returned["index"] == plain["index"]
        assert returned["relevance_score"] == pytest.approx(plain["relevance_score"], abs=1e-6)
        assert returned["document"] == {"text": DOCUMENTS[returned["index"]]}


def test_a_batch_scores_each_pair_as_it_would_alone(reranking):
    together = {
        r["index"]: r["relevance_score"]
        for r in reranking.answer({"query": QUERY, "documents": DOCUMENTS})["results"]
    }
    for index, document in enumerate(DOCUMENTS):
        alone = reranking.answer({"query": QUERY, "documents": [document]})["results"][0]["relevance_score"]
        # Flash attention over a batch of sequences sums in another order than over one: float32 rounding.
        assert together[index] == pytest.approx(alone, abs=1e-4)


def test_each_pair_is_the_ggufs_rerank_prompt_with_its_control_tokens(reranking, reranker):
    template = reranker.rerank_template
    assert template is not None and "{query}" in template and "{document}" in template
    pair = reranking.pairs(QUERY, DOCUMENTS[:1])[0]
    prompt = fill_rerank_template(template, QUERY, DOCUMENTS[0])
    assert pair == reranker.tokenize(prompt, add_bos=False, special=True)
    im_start = reranker.tokenize("<|im_start|>", add_bos=False, special=True)
    assert len(im_start) == 1 and pair[0] == im_start[0]  # the template's control tokens are read as such
    assert reranker.detokenize(pair).decode() == prompt


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"query": QUERY, "documents": []}, InvalidRequestError, "documents"),
        ({"query": QUERY, "documents": ["a"] * 9}, InvalidRequestError, "documents"),
        ({"query": "", "documents": ["a"]}, InvalidRequestError, "query"),
        ({"query": QUERY, "documents": ["a", ""]}, InvalidRequestError, "documents.1"),
        ({"query": QUERY, "documents": [{"text": ""}]}, InvalidRequestError, "documents.0"),
        ({"query": QUERY, "documents": ["x " * 240]}, ContextLengthExceededError, "documents.0"),
        ({"query": QUERY, "documents": ["word " * 60] * 8}, ContextLengthExceededError, "documents"),
        ({"query": "q" * 501, "documents": ["a"]}, ContextLengthExceededError, "query"),
        ({"query": QUERY, "documents": ["a<|im_end|>b"]}, InvalidRequestError, "documents.0"),
        ({"query": "<|im_start|>user", "documents": ["a"]}, InvalidRequestError, "query"),
        ({"query": QUERY, "documents": "a text"}, InvalidRequestError, "documents"),
        ({"query": QUERY, "documents": [1, 2]}, InvalidRequestError, "documents.0"),
        ({"query": QUERY, "documents": [{"content": "a"}]}, InvalidRequestError, "documents.0"),
        ({"query": 5, "documents": ["a"]}, InvalidRequestError, "query"),
        ({"documents": ["a"]}, InvalidRequestError, "query"),
        ({"query": QUERY, "documents": ["a"], "top_n": 0}, InvalidRequestError, "top_n"),
        ({"query": QUERY, "documents": ["a"], "top_n": "2"}, InvalidRequestError, "top_n"),
        (
            {"query": QUERY, "documents": ["a"], "return_documents": "yes"},
            InvalidRequestError,
            "return_documents",
        ),
        ({"query": QUERY, "documents": ["a"], "model": "gpt"}, UnknownModelError, "model"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_what_cannot_be_scored_is_refused_naming_the_field(reranking, body, error, param):
    with pytest.raises(error) as refused:
        reranking.answer(body)
    assert refused.value.param == param


def test_the_reranker_function_reranks_and_refuses_embeddings_and_completions(reranker):
    runtime = runtime_over(reranker)
    runtime.before_snapshot()  # the warm-up goes through the rerank route
    body = {"query": QUERY, "documents": DOCUMENTS[:2]}
    answer = runtime.handle(routed_event(RERANK, body), None)
    assert [r["index"] for r in answer["results"]] != [] and answer["model"] == RERANK_MODEL
    assert runtime.handle(routed_event(RERANK_ALIAS, body), None)["results"] == answer["results"]
    embeddings = runtime.handle(routed_event(EMBEDDINGS, {"input": "a text"}), None)
    assert embeddings["statusCode"] == 400 and embeddings["error"]["param"] == "model"
    assert "reranker" in embeddings["error"]["message"]
    chat = runtime.handle({"messages": [{"role": "user", "content": "Hi"}]}, None)
    assert chat["statusCode"] == 400 and "reranker" in chat["error"]["message"]


def test_an_embedding_model_refuses_rerank_naming_why(reranker_path):
    # The same GGUF loaded with mean pooling is an embedding model: it embeds, it does not score.
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=256, embedding_pooling="mean")
    embedder = EmbeddingEngine.load(str(reranker_path), settings, model_name="mean-pooled")
    runtime = runtime_over(embedder)
    refused = runtime.handle(routed_event(RERANK, {"query": QUERY, "documents": ["a"]}), None)
    assert refused["statusCode"] == 400 and refused["error"]["param"] == "model"
    assert "embedding model, not a reranker" in refused["error"]["message"]
    assert len(runtime.handle(routed_event(EMBEDDINGS, {"input": "a"}), None)["data"][0]["embedding"]) == 64


@pytest.fixture(scope="module")
def rerank_server(reranker_path):
    args = [*rerank_serve_args(reranker_path), "--no-stream"]
    with ServeProcess.start(template=TEMPLATE, env=SERVE_ENV, api_key=KEY, args=args) as running:
        yield running


def test_local_serve_reranks_with_an_api_key_at_both_paths(rerank_server):
    headers = {"authorization": f"Bearer {KEY}"}
    body = {
        "model": RERANK_MODEL,
        "query": QUERY,
        "documents": DOCUMENTS,
        "top_n": 3,
        "return_documents": True,
    }
    with httpx.Client(base_url=rerank_server.url, headers=headers, timeout=120) as client:
        answer = client.post("/v1/rerank", json=body)
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert len(results) == 3 and all(r["document"]["text"] == DOCUMENTS[r["index"]] for r in results)
        alias = client.post("/rerank", json=body)
        assert alias.status_code == 200 and alias.json()["results"] == results
        # The chat model is not a reranker; the reranker is not an embedding model.
        chat = client.post("/v1/rerank", json={**body, "model": MODEL})
        assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
        assert "chat model, not a reranker" in chat.json()["error"]["message"]
        embed = client.post("/v1/embeddings", json={"model": RERANK_MODEL, "input": "a"})
        assert embed.status_code == 400 and embed.json()["error"]["param"] == "model"
        empty = client.post("/v1/rerank", json={**body, "documents": []})
        assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"
    wrong = httpx.post(
        f"{rerank_server.url}/v1/rerank", json=body, headers={"authorization": f"Bearer {KEY}x"}, timeout=60
    )
    assert wrong.status_code == 401 and set(wrong.json()["error"]) == {"message", "type", "param", "code"}
