"""The VersionDigests custom resource: digests of what each function's version runs, answered to a real HTTP
endpoint on 127.0.0.1 standing in for CloudFormation's pre-signed response URL."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from snapllm.deploy.version_digest import VersionDigestResource, digest, digests
from snapllm.errors import ConfigurationError, CustomResourceResponseError
from tests.support.http_stub import HttpStub, Reply

INFERENCE = {"Architecture": "arm64", "MemorySize": "3008", "Layers": ["arn:...:layer:SnapllmLayerArm64:7"]}


@pytest.fixture
def response_url() -> Iterator[HttpStub]:
    with HttpStub() as stub:
        yield stub


def _url(stub: HttpStub) -> str:
    return f"{stub.base_url}/response?signature=x"


def _event(kind: str, url: str, **properties: object) -> dict:
    return {
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-2:123456789012:stack/snapllm/x",
        "RequestId": "r-1",
        "LogicalResourceId": "VersionDigests",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:...:VersionDigestFunction", **properties},
    }


def test_a_digest_changes_with_the_value_only():
    assert digest(INFERENCE) == digest(dict(reversed(INFERENCE.items())))  # key order does not matter
    assert digest(INFERENCE) != digest({**INFERENCE, "MemorySize": "3009"})
    assert digest(INFERENCE) != digest({**INFERENCE, "Layers": ["arn:...:layer:SnapllmLayerArm64:8"]})
    assert len(digest(INFERENCE)) == 64


def test_each_property_gets_its_own_digest_and_service_properties_none():
    found = digests(
        {"ServiceToken": "arn", "ServiceTimeout": "120", "InferenceFunction": INFERENCE, "R": "x"}
    )
    assert set(found) == {"InferenceFunction", "R"}


def test_create_and_update_answer_the_digests_to_the_response_url(response_url):
    resource = VersionDigestResource()
    body = resource.handle(
        _event("Update", _url(response_url), InferenceFunction=INFERENCE, Router={"a": "1"})
    )
    [received] = response_url.requests
    content_type, sent = received.headers.get("content-type", ""), received.body
    assert content_type == "" and json.loads(sent) == body
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "version-digests"
    assert body["Data"] == {"InferenceFunction": digest(INFERENCE), "Router": digest({"a": "1"})}
    assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
        "arn:aws:cloudformation:us-east-2:123456789012:stack/snapllm/x",
        "r-1",
        "VersionDigests",
    )


def test_delete_succeeds_without_data(response_url):
    body = VersionDigestResource().handle(_event("Delete", _url(response_url), InferenceFunction=INFERENCE))
    assert body["Status"] == "SUCCESS" and body["Data"] == {}
    assert response_url.requests[0].json()["Status"] == "SUCCESS"


def test_a_5xx_is_retried_and_a_4xx_is_a_clear_error(response_url):
    response_url.replies = [Reply(status=503)]
    VersionDigestResource().handle(_event("Create", _url(response_url), InferenceFunction=INFERENCE))
    assert len(response_url.requests) == 2
    response_url.replies = [Reply(status=403)]
    with pytest.raises(CustomResourceResponseError, match="refused the response: 403"):
        VersionDigestResource().handle(_event("Create", _url(response_url), InferenceFunction=INFERENCE))


def test_an_event_that_is_not_a_request_names_what_it_lacks():
    with pytest.raises(ConfigurationError, match="no ResponseURL"):
        VersionDigestResource(send=lambda url, body, deadline=None: None).handle(
            {"RequestType": "Create", "StackId": "s", "RequestId": "r", "LogicalResourceId": "V"}
        )
