"""The VersionDigests custom resource: digests of what each function's version runs, answered to a real HTTP
endpoint on 127.0.0.1 standing in for CloudFormation's pre-signed response URL."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from snapllm.deploy.version_digest import VersionDigestResource, digest, digests
from snapllm.errors import ConfigurationError, CustomResourceResponseError

INFERENCE = {"Architecture": "arm64", "MemorySize": "3008", "Layers": ["arn:...:layer:SnapllmLayerArm64:7"]}


class _ResponseUrl(http.server.BaseHTTPRequestHandler):
    statuses: ClassVar[list[int]] = []
    received: ClassVar[list[tuple[str, bytes]]] = []
    url: ClassVar[str] = ""

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.headers.get("Content-Type", ""), body))
        self.send_response(type(self).statuses.pop(0) if type(self).statuses else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def response_url() -> Iterator[type[_ResponseUrl]]:
    handler = type("Handler", (_ResponseUrl,), {"statuses": [], "received": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/response?signature=x"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


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
    body = resource.handle(_event("Update", response_url.url, InferenceFunction=INFERENCE, Router={"a": "1"}))
    content_type, sent = response_url.received[0]
    assert content_type == "" and json.loads(sent) == body
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "version-digests"
    assert body["Data"] == {"InferenceFunction": digest(INFERENCE), "Router": digest({"a": "1"})}
    assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
        "arn:aws:cloudformation:us-east-2:123456789012:stack/snapllm/x",
        "r-1",
        "VersionDigests",
    )


def test_delete_succeeds_without_data(response_url):
    body = VersionDigestResource().handle(_event("Delete", response_url.url, InferenceFunction=INFERENCE))
    assert body["Status"] == "SUCCESS" and body["Data"] == {}
    assert json.loads(response_url.received[0][1])["Status"] == "SUCCESS"


def test_a_5xx_is_retried_and_a_4xx_is_a_clear_error(response_url):
    response_url.statuses = [503]
    VersionDigestResource().handle(_event("Create", response_url.url, InferenceFunction=INFERENCE))
    assert len(response_url.received) == 2
    response_url.statuses = [403]
    with pytest.raises(CustomResourceResponseError, match="refused the response: 403"):
        VersionDigestResource().handle(_event("Create", response_url.url, InferenceFunction=INFERENCE))


def test_an_event_that_is_not_a_request_names_what_it_lacks():
    with pytest.raises(ConfigurationError, match="no ResponseURL"):
        VersionDigestResource(send=lambda url, body, deadline=None: None).handle(
            {"RequestType": "Create", "StackId": "s", "RequestId": "r", "LogicalResourceId": "V"}
        )
