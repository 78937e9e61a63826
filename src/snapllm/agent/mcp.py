"""Tools from MCP servers, over the streamable HTTP transport of the official ``mcp`` SDK: each configured
server is a :class:`~snapllm.agent.tools.ToolSource` (``tools/list``, ``tools/call``).

    source = McpToolSource(McpServerConfig(name="docs", url="http://127.0.0.1:8931/mcp"))
    source.call("search", {"q": "snapstart"}, ctx, idempotency_key="3f2a...")

Each call opens its own connection; docs/agents.md says how failures are sorted and which are retried.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import boto3
import httpx2
import mcp_types as types
import pydantic
from botocore.exceptions import ClientError
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from snapllm.agent.errors import (
    ToolServerProtocolError,
    ToolServerRejectedError,
    ToolServerUnreachableError,
    ToolTransportError,
    bounded_text,
)
from snapllm.agent.schemas import enforceable
from snapllm.agent.settings import McpServerConfig
from snapllm.agent.tools import BinaryPart, ToolContext, ToolResult, ToolSpec, require_unique_names
from snapllm.aws_auth import SigV4, secret_api_key
from snapllm.errors import UnsupportedParameterError
from snapllm.protocol.constraints.structured import check_schema

IDEMPOTENCY_META_KEY = "snapllm/idempotency-key"
MAX_DESCRIPTION_CHARS = 1024
# A string argument the server leaves unbounded is bounded for the model: a small model may otherwise write
# one until max_tokens cuts the call.
MAX_ARGUMENT_CHARS = 64
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MODEL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIGEST_CHARS = 8
# Errors the client makes up itself when the connection, not the server, ended the exchange.
_CONNECTION_CODES = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})
_T = TypeVar("_T")
# httpx2 logs every request at INFO; the agent's logs keep what it decided, not each POST of the protocol.
logging.getLogger("httpx2").setLevel(logging.WARNING)
# Binary content types and the file extension their S3 object gets.
_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "audio/wav": "wav",
    "audio/mpeg": "mp3",
}


def model_tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``, within OpenAI's ``^[a-zA-Z0-9_-]{1,64}$``.

    ``server__tool`` when that name says exactly which tool it is: it fits, the tool's name has no other
    character, and the server's name has no ``__`` (so the name splits back at its first ``__``). Otherwise
    (``web.search``, ``web search``, server ``a__b``, a long name) the other characters become ``_`` and a
    digest of the exact server and tool names is appended: ``docs__web_search_1f0c9a2e``. Two tools whose
    names differ only in punctuation thus get two names, and every name stays the same from run to run.
    """
    plain = f"{server}__{tool}"
    if _MODEL_NAME.fullmatch(plain) and "__" not in server:
        return plain
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{_NAME_CHARS.sub('_', plain)[: 63 - _DIGEST_CHARS]}_{digest}"


@dataclass
class _Exchange:
    """What one connection saw, for sorting a failure: whether ``tools/call`` left, the last status."""

    call_sent: bool = False
    statuses: list[int] = field(default_factory=list)

    async def on_request(self, request: httpx2.Request) -> None:
        if request.method == "POST" and b'"tools/call"' in request.content:
            self.call_sent = True

    async def on_response(self, response: httpx2.Response) -> None:
        self.statuses.append(response.status_code)


class McpToolSource:
    """One MCP server's tools as a :class:`~snapllm.agent.tools.ToolSource`."""

    def __init__(self, config: McpServerConfig, *, secrets_client: Any = None) -> None:
        self.config = config
        self.name = config.name
        self._secrets_client = secrets_client
        self._api_key: str | None = None

    # --- the ToolSource interface -----------------------------------------------------------------------

    def list_tools(self, ctx: ToolContext) -> list[ToolSpec]:
        try:
            listed = self._run(self._list_tools, what="tools/list")
        except MCPError as exc:
            raise ToolServerRejectedError(
                f"MCP server {self.name!r} ({self.config.url}) answered tools/list with error {exc.code}: "
                f"{exc.error.message}"
            ) from None
        offered = set(self.config.tools)
        specs = [self._spec(tool) for tool in listed if not offered or tool.name in offered]
        return require_unique_names(specs)

    def call(
        self, tool: str, arguments: dict[str, Any], ctx: ToolContext, *, idempotency_key: str
    ) -> ToolResult:
        meta = {IDEMPOTENCY_META_KEY: idempotency_key}
        try:
            result = self._run(lambda c: c.call_tool(tool, arguments, meta=meta), what=f"calling {tool}")
        except MCPError as exc:
            # The server answered the request with a JSON-RPC error (unknown tool, invalid arguments...):
            # the model hears it as the tool's answer and may do better. Its text is the server's and may
            # be of any size: it is cut, as any text that may end up in an error or a prompt.
            data = "" if exc.error.data is None else f" {json.dumps(exc.error.data, ensure_ascii=False)}"
            text = bounded_text(f"error {exc.code}: {exc.error.message}{data}")
            return ToolResult(text=text, is_error=True)
        return _result(result, ctx, idempotency_key)

    # --- the connection ---------------------------------------------------------------------------------

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _run(self, operation: Callable[[Client], Awaitable[_T]], *, what: str) -> _T:
        exchange = _Exchange()
        auth, headers = self._auth(), self._headers()

        async def session() -> _T:
            http = httpx2.AsyncClient(
                timeout=self.config.timeout_s,
                auth=auth,
                headers=headers,
                event_hooks={"request": [exchange.on_request], "response": [exchange.on_response]},
            )
            async with (
                http,
                Client(streamable_http_client(self.config.url, http_client=http), cache=None) as c,
            ):
                with anyio.fail_after(self.config.timeout_s):
                    return await operation(c)

        try:
            return anyio.run(session)
        except (Exception, BaseExceptionGroup) as exc:
            # Whatever the transport raised (httpx2's errors, a timeout, the server's JSON-RPC error, inside
            # anyio's exception groups) becomes one of the agent's errors, by whether the call may have left;
            # a JSON-RPC error the server sent is re-raised as it is, for the caller to read.
            raise self._failure(_leaf(exc), exchange, what) from None

    def _failure(self, leaf: BaseException, exchange: _Exchange, what: str) -> Exception:
        where = f"MCP server {self.name!r} ({self.config.url})"
        http = self._http_failure(exchange, what)
        if http is not None:
            return http
        if isinstance(leaf, MCPError) and leaf.code not in _CONNECTION_CODES:
            if leaf.code == types.PARSE_ERROR or leaf.message.startswith("Unexpected content type"):
                # The client's own verdict on the answer's body (not JSON, not a JSON-RPC message).
                return ToolServerProtocolError(f"{where} answered with invalid JSON-RPC while {what}: {leaf}")
            return leaf
        if isinstance(leaf, pydantic.ValidationError):
            # Valid JSON-RPC whose result does not have the shape MCP gives it.
            return ToolServerProtocolError(
                f"{where} answered with invalid JSON-RPC while {what}: {_describe(leaf)}"
            )
        if isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout) or not exchange.call_sent:
            return ToolServerUnreachableError(f"{where} could not be reached while {what}: {_describe(leaf)}")
        return ToolTransportError(f"{where} broke off while {what}: {_describe(leaf)}")

    def _http_failure(self, exchange: _Exchange, what: str) -> Exception | None:
        status = next((s for s in reversed(exchange.statuses) if s >= 400), None)
        if status is None:
            return None
        where = f"MCP server {self.name!r} ({self.config.url})"
        if status in (401, 403, 407):
            return ToolServerRejectedError(
                f"{where} refused the agent ({status}) while {what}; check its auth"
            )
        if status >= 500 or status == 429:
            error = ToolTransportError if exchange.call_sent else ToolServerUnreachableError
            return error(f"{where} answered HTTP {status} while {what}")
        return None

    def _auth(self) -> Any:
        if self.config.auth != "iam":
            return None
        session = boto3.Session()
        region = self.config.region or session.region_name
        if not region:
            raise ToolServerRejectedError(f"MCP server {self.name!r}: auth 'iam' needs a region")
        # Signed with the function's own credentials. An AgentCore Gateway with IAM inbound authorization
        # also checks that the role may bedrock-agentcore:InvokeGateway on it (AgentMcpGatewayArns).
        return SigV4(region=region, service=self.config.service, session=session)

    def _headers(self) -> dict[str, str]:
        if self.config.auth != "bearer" or self.config.secret_arn is None:
            return {}
        if self._api_key is None:
            try:
                self._api_key = secret_api_key(self.config.secret_arn, self._secrets_client)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                raise ToolServerRejectedError(
                    f"MCP server {self.name!r}: cannot read its key {self.config.secret_arn} ({code}); "
                    "the agent's role may read only the secrets listed in AgentMcpSecretArns"
                ) from None
        return {"Authorization": f"Bearer {self._api_key}"}

    def _spec(self, tool: types.Tool) -> ToolSpec:
        annotations = tool.annotations
        hinted = annotations is not None and bool(annotations.idempotent_hint or annotations.read_only_hint)
        idempotent = tool.name in self.config.idempotent or hinted
        return ToolSpec(
            name=model_tool_name(self.name, tool.name),
            description=(tool.description or tool.title or tool.name)[:MAX_DESCRIPTION_CHARS],
            parameters=_parameters(tool.input_schema),
            source=self.name,
            tool=tool.name,
            retry_class="tool" if idempotent else "tool_once",
            idempotent=idempotent,
            needs_approval=tool.name in self.config.needs_approval,
        )


def _parameters(schema: dict[str, Any] | None) -> dict[str, Any]:
    """The tool's input schema as the grammar can keep it; one it cannot (a recursive ``$ref``) leaves the
    arguments to the server's own validation."""
    enforced = enforceable(schema or {"type": "object"}, string_limit=MAX_ARGUMENT_CHARS)
    enforced.setdefault("type", "object")
    try:
        check_schema(enforced, param="parameters")
    except UnsupportedParameterError:
        return {"type": "object"}
    return enforced


def _result(result: types.CallToolResult, ctx: ToolContext, key: str) -> ToolResult:
    texts: list[str] = []
    binary: list[BinaryPart] = []
    for index, part in enumerate(result.content):
        if isinstance(part, types.TextContent):
            texts.append(part.text)
        elif isinstance(part, types.ImageContent | types.AudioContent):
            binary.append(_store(ctx, key, index, part.type, part.mime_type, part.data))
        elif isinstance(part, types.EmbeddedResource):
            resource = part.resource
            if isinstance(resource, types.TextResourceContents):
                texts.append(resource.text)
            else:
                mime = resource.mime_type or "application/octet-stream"
                binary.append(_store(ctx, key, index, "resource", mime, resource.blob))
        elif isinstance(part, types.ResourceLink):
            texts.append(f"[resource {part.name}: {part.uri}]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(texts)
    if binary and not text:
        text = ", ".join(f"[{part.type} {part.mime_type}, {part.artifact['size']} bytes]" for part in binary)
    return ToolResult(text=text, is_error=bool(result.is_error), binary=binary)


def _store(ctx: ToolContext, key: str, index: int, kind: str, mime_type: str, data: str) -> BinaryPart:
    """Write one base64 part to S3 (keyed by the call's idempotency key: a retry writes the same object)."""
    extension = _EXTENSIONS.get(mime_type, "bin")
    raw = base64.b64decode(data)
    ref = ctx.store.put_bytes(f"runs/tool-content/{key}-{index}.{extension}", raw, content_type=mime_type)
    return BinaryPart(type=kind, mime_type=mime_type, artifact=ref)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
