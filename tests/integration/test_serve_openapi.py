"""schemathesis against ``/openapi.json`` of ``snapllm local serve``: generated requests, valid and invalid,
never get a 5xx and every answer matches the document (status, content type, body schema).

Each operation's hypothesis strategy is driven directly (schemathesis' pytest plugin does not load under
this project's pytest version).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from tests.support.serve import SERVER_GROUP, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SERVER_GROUP)]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
OPERATIONS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/chat/completions/input_tokens"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/rerank"),
    ("POST", "/rerank"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("GET", "/health"),
    ("POST", "/v1/agent/runs"),
    ("GET", "/v1/agent/runs/{run_id}"),
    ("POST", "/v1/agent/runs/{run_id}/approval"),
]
# Valid starts would each begin a real agent run in the shared server (test_serve_agent covers that path);
# invalid ones are generated like every other operation's.
NO_POSITIVE_CASES = {("POST", "/v1/agent/runs")}


@pytest.fixture(scope="module")
def openapi_schema(server: ServeProcess):
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json"), server.url


def test_the_document_lists_every_route(openapi_schema):
    schema, _ = openapi_schema
    listed = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert listed == set(OPERATIONS)


# Negative cases need something to break: the GET routes take no body, and any string is a run id.
CASES = [
    (method, path, GenerationMode.POSITIVE)
    for method, path in OPERATIONS
    if (method, path) not in NO_POSITIVE_CASES
] + [(method, path, GenerationMode.NEGATIVE) for method, path in OPERATIONS if method == "POST"]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=lambda v: getattr(v, "value", v))
def test_api_conforms_to_its_openapi_document(openapi_schema, method, path, mode):
    schema, base_url = openapi_schema
    operation = schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def conforms(case):
        case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=60)

    conforms()
