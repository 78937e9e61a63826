"""A request's schema is compiled once on its whole path: the router's validation, the function's, the
grammar the real model generates under and the check of its finished answer all share one
:class:`~snapllm.protocol.constraints.compiled_schema.CompiledSchema`.

Here the router's validation and the function run in one process over the packaged model (in a deployment
they are two processes, each compiling once, and each warm environment keeps its cache).
"""

from __future__ import annotations

import contextlib
import json

from snapllm.engine import constraint, decode
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.errors import SchemaValidationFailedError
from snapllm.protocol.constraints import compiled_schema
from snapllm.protocol.constraints.compiled_schema import clear_cache
from snapllm.protocol.requests import ChatCompletionRequest
from snapllm.protocol.serving import OpenAIServing
from tests.support.generation import serving_over

PLACE = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "tags": {"type": "array", "uniqueItems": True},
    },
    "required": ["city"],
    "x-kubernetes-preserve-unknown-fields": True,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _body(**fields) -> dict:
    return {
        "messages": [{"role": "user", "content": "Which city is the capital of France? Answer in JSON."}],
        "max_tokens": 24,
        "temperature": 0.0,
        **fields,
    }


def _serve(serving: OpenAIServing, body: dict) -> None:
    """What a request goes through: the router's validation, then the function's, the real model
    generating under the constraint, and the answer's check."""
    ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))  # the router's copy of the body
    request = serving.parse(json.loads(json.dumps(body)))
    # A 422 is an answer checked too (uniqueItems is validated, not generated).
    with contextlib.suppress(SchemaValidationFailedError):
        serving.generate(request)


def test_each_schema_of_a_request_is_compiled_once_and_a_repeat_not_at_all(serving):
    clear_cache()
    form = {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE}}
    before = compiled_schema.COMPILATIONS.count
    grammars_before = constraint.COMPILES.count
    _serve(serving, _body(response_format=form))
    assert compiled_schema.COMPILATIONS.count == before + 1
    # The request's grammar over the model's vocabulary: compiled once, for the check and the decode loop.
    assert constraint.COMPILES.count == grammars_before + 1
    # The response_format and one tool's parameters: two schemas, two compiles (the response_format's from
    # the cache), and one new grammar holding both.
    _serve(serving, _body(response_format=form, tools=[WEATHER], tool_choice="auto"))
    assert compiled_schema.COMPILATIONS.count == before + 2
    assert constraint.COMPILES.count == grammars_before + 2
    # The same request again (the next turn of a conversation): nothing is compiled, the grammar's matcher
    # is a copy of the one kept.
    _serve(serving, _body(response_format=form, tools=[WEATHER], tool_choice="auto"))
    assert compiled_schema.COMPILATIONS.count == before + 2
    assert constraint.COMPILES.count == grammars_before + 2


def test_a_declared_schema_is_compiled_before_the_snapshot_and_kept(model_path, monkeypatch):
    # A deploy's declared prefix with its response_format (SNAPLLM_PROMPT_PREFIXES), kept by the warm-up:
    # a request with that schema compiles nothing, whatever its messages, even after other schemas have
    # turned both caches over.
    clear_cache()
    engine = Engine.load(str(model_path), EngineSettings(threads=1), model_name="smollm2")
    serving = serving_over(engine)
    form = {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE}}
    system = {"role": "system", "content": "You answer in JSON."}
    serving.keep_prefixes([{"messages": [system], "response_format": form}])
    monkeypatch.setattr(compiled_schema, "CACHE_SIZE", 2)
    monkeypatch.setattr(decode, "COMPILED_GRAMMARS", 2)
    for length in range(3, 7):
        other = {"type": "object", "properties": {"name": {"type": "string", "maxLength": length}}}
        _serve(
            serving,
            _body(response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": other}}),
        )
    before = compiled_schema.COMPILATIONS.count, constraint.COMPILES.count
    question = {"role": "user", "content": "Name the capital of Italy as a place."}
    _serve(serving, _body(response_format=form, messages=[system, question]))
    assert (compiled_schema.COMPILATIONS.count, constraint.COMPILES.count) == before
    engine.close()
