"""AWS credentials for HTTP clients: SigV4 request signing, and API keys kept in Secrets Manager.

    client = openai.OpenAI(base_url=stack_output["OpenAIBaseUrl"], api_key="unused",  # IAM authenticates
                           http_client=httpx.Client(auth=SigV4(region="us-east-1", service="execute-api")))

A :class:`SigV4` is a callable auth that ``httpx`` and ``httpx2`` both take, so this module imports neither
(the functions that use it do not ship ``httpx``). docs/api.md and docs/agents.md say which endpoints sign.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError

from snapllm.errors import ConfigurationError

# Headers the OpenAI client sets that a proxy may rewrite; signing them would break the signature.
_UNSIGNED = frozenset({"authorization", "connection", "user-agent", "expect", "x-amzn-trace-id"})


class SigV4:
    """Signs each request with AWS Signature Version 4 (botocore's signer): ``auth=SigV4(...)`` on an
    ``httpx`` or ``httpx2`` client. The request's body must be bytes (as the OpenAI and MCP clients send)."""

    def __init__(self, *, region: str, service: str = "execute-api", session: Any = None) -> None:
        self.region = region
        self.service = service
        self._session = session or boto3.Session()

    def __call__(self, request: _Request) -> Any:
        """Sign ``request`` in place (any ``httpx``-like request whose body has been read) and return it."""
        credentials = self._session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials found to sign the request (see boto3's credential chain)")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _UNSIGNED}
        signed = AWSRequest(
            method=request.method, url=str(request.url), data=request.content, headers=headers
        )
        SigV4Auth(credentials.get_frozen_credentials(), self.service, self.region).add_auth(signed)
        request.headers.pop("authorization", None)  # the OpenAI client's "Bearer <api_key>"
        request.headers.update(dict(signed.headers.items()))
        return request


class _Request(Protocol):
    method: str
    url: Any
    headers: Any

    @property
    def content(self) -> bytes: ...


def secret_api_key(secret_arn: str, client: Any = None) -> str:
    """An API key kept in Secrets Manager: the secret string, or its JSON ``api_key``."""
    client = client or boto3.client("secretsmanager")
    secret = client.get_secret_value(SecretId=secret_arn)["SecretString"]
    try:
        value = json.loads(secret)
    except ValueError:
        return secret.strip()
    return str(value["api_key"]) if isinstance(value, dict) and "api_key" in value else secret.strip()


def session_with_credentials(region: str | None) -> boto3.Session:
    """A boto3 session of the caller's that has credentials and a region, or a ConfigurationError saying
    which is missing: commands call it first, so that they stop before doing anything."""
    try:
        session = boto3.Session(region_name=region or None)
        credentials = session.get_credentials()
    except BotoCoreError as exc:  # a profile that does not exist, a config file that does not parse
        raise ConfigurationError(f"AWS configuration: {exc}") from None
    if credentials is None:
        raise ConfigurationError(
            "no AWS credentials found (environment, shared credentials/config files, SSO or instance "
            "metadata); configure them, for example `aws configure` or AWS_PROFILE, and run again"
        )
    if not (session.region_name or "").strip():
        raise ConfigurationError("no AWS region: pass --region or set AWS_REGION")
    return session
