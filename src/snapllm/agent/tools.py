"""The agent's tools behind one interface, whatever serves them: a :class:`ToolSource` lists
:class:`ToolSpec` s and runs calls. The built-in tools (:class:`BuiltinTools`) are one source; each MCP
server (:mod:`snapllm.agent.mcp`) is another::

    tools.call("read_excerpt", {"uri": "s3://b/agent/documents/a.md"}, ctx, idempotency_key="...")

Built-in tools take references and read only the bytes they need: docs/agents.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from snapllm.agent import prompts
from snapllm.agent.artifacts import ArtifactRef, ArtifactStore
from snapllm.agent.errors import ToolNameCollisionError, UnknownToolError
from snapllm.agent.llm import chat
from snapllm.agent.schemas import enforceable
from snapllm.agent.settings import MAX_CHUNKS_PER_DOCUMENT, AgentSettings
from snapllm.inference.client import InferenceClient

RetryClass = Literal["storage", "inference", "tool"]
BUILTIN = "builtin"


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the agent's S3 prefix, the model, and the settings."""

    store: ArtifactStore
    inference: InferenceClient
    settings: AgentSettings


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model sees it (``name``, ``description``, ``parameters``) and as the flow runs it.

    ``idempotent``: calling it twice with the same arguments has the effect of calling it once, so its
    step may be retried after a call that broke off. ``needs_approval``: a person approves each call, with
    its exact arguments, before it is made. ``documents``: its ``uri`` argument names one of the run's
    documents (the flow limits it to them).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    source: str = BUILTIN
    tool: str = ""
    retry_class: RetryClass = "tool"
    idempotent: bool = True
    needs_approval: bool = False
    documents: bool = False

    def __post_init__(self) -> None:
        if not self.tool:
            object.__setattr__(self, "tool", self.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "source": self.source,
            "tool": self.tool,
            "retry_class": self.retry_class,
            "idempotent": self.idempotent,
            "needs_approval": self.needs_approval,
            "documents": self.documents,
        }

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> ToolSpec:
        return cls(**value)

    def definition(self, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        """The OpenAI ``tools`` entry of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters if parameters is not None else self.parameters,
            },
        }


@dataclass(frozen=True)
class BinaryPart:
    """An image or audio part of a tool's answer, kept in S3 (never inlined in a checkpoint)."""

    type: str
    mime_type: str
    artifact: ArtifactRef

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "mime_type": self.mime_type, "artifact": dict(self.artifact)}


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer: its text, binary parts stored in S3, and whether it is an error the model sees."""

    text: str
    is_error: bool = False
    binary: list[BinaryPart] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        value: dict[str, Any] = {"is_error": self.is_error, "text": self.text}
        if self.binary:
            value["binary"] = [part.to_dict() for part in self.binary]
        if self.data:
            value["data"] = self.data
        return value


class ToolSource(Protocol):
    """Anything that serves tools: the built-in ones, or an MCP server."""

    name: str

    def list_tools(self, ctx: ToolContext) -> list[ToolSpec]: ...

    def call(
        self, tool: str, arguments: dict[str, Any], ctx: ToolContext, *, idempotency_key: str
    ) -> ToolResult: ...


def require_unique_names(specs: list[ToolSpec]) -> list[ToolSpec]:
    """``specs``, checked that no two tools reach the model under one name (the model could not say which
    it calls, and the inference function refuses duplicate function names).

    Raises:
        ToolNameCollisionError: naming both tools and the name they share.
    """
    seen: dict[str, ToolSpec] = {}
    for spec in specs:
        other = seen.setdefault(spec.name, spec)
        if other is not spec:
            raise ToolNameCollisionError(
                f"tool {other.tool!r} of {other.source!r} and tool {spec.tool!r} of {spec.source!r} both "
                f"reach the model as {spec.name!r}; leave one out (the server's 'tools' list) or rename it"
            )
    return specs


class DocumentExcerpt(BaseModel):
    """Arguments of ``read_excerpt``."""

    model_config = ConfigDict(extra="forbid")

    uri: str = Field(description="s3:// URI of one of the run's documents")


class DocumentChunk(BaseModel):
    """Arguments of ``summarize_chunk``."""

    model_config = ConfigDict(extra="forbid")

    uri: str = Field(description="s3:// URI of one of the run's documents")
    part: int = Field(
        0,
        ge=0,
        lt=MAX_CHUNKS_PER_DOCUMENT,
        description="which of the document's evenly spaced chunks (0 = the first)",
    )


def _decode(data: bytes) -> str:
    # A range may cut a multi-byte character at either end; drop the fragments, keep the text.
    return data.decode("utf-8", errors="ignore")


def chunk_offset(size: int, part: int, settings: AgentSettings) -> tuple[int, int]:
    """Offset and length of chunk ``part`` of a ``size``-byte document: ``chunks_per_document`` chunks
    spread evenly over it (so a 10 MB document costs that many model calls, not thousands); a document
    of one chunk has only part 0, and a larger part number reads the last chunk."""
    length = max(1, min(settings.chunk_bytes, size))
    count = 1 if size <= settings.chunk_bytes else settings.chunks_per_document
    part = min(part, count - 1)
    span = max(size - length, 0)
    return (span * part) // max(count - 1, 1), length


class BuiltinTool(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    retry_class: ClassVar[RetryClass]
    input_model: ClassVar[type[BaseModel]]

    def parameters(self, settings: AgentSettings) -> dict[str, Any]: ...

    def run(self, args: Any, ctx: ToolContext) -> ToolResult: ...


class ReadExcerpt:
    """Read the opening ``excerpt_bytes`` of an S3 document (a ranged GET)."""

    name: ClassVar[str] = "read_excerpt"
    description: ClassVar[str] = "Read the opening excerpt of one of the documents."
    retry_class: ClassVar[RetryClass] = "storage"
    input_model: ClassVar[type[BaseModel]] = DocumentExcerpt

    def parameters(self, settings: AgentSettings) -> dict[str, Any]:
        return enforceable(self.input_model.model_json_schema())

    def run(self, args: DocumentExcerpt, ctx: ToolContext) -> ToolResult:
        location = ctx.store.document(args.uri)
        data = ctx.store.read_range(location, 0, ctx.settings.excerpt_bytes)
        return ToolResult(text=_decode(data), data={"uri": args.uri, "offset": 0, "length": len(data)})


class SummarizeChunk:
    """Summarize one chunk of a document with the model; only the summary comes back."""

    name: ClassVar[str] = "summarize_chunk"
    description: ClassVar[str] = "Summarize one chunk of one of the documents in a sentence."
    retry_class: ClassVar[RetryClass] = "inference"
    input_model: ClassVar[type[BaseModel]] = DocumentChunk

    def parameters(self, settings: AgentSettings) -> dict[str, Any]:
        schema = enforceable(self.input_model.model_json_schema())
        schema["properties"]["part"]["enum"] = list(range(settings.chunks_per_document))
        return schema

    def run(self, args: DocumentChunk, ctx: ToolContext) -> ToolResult:
        location = ctx.store.document(args.uri)
        size = ctx.store.head(location).size
        offset, length = chunk_offset(size, args.part, ctx.settings)
        text = _decode(ctx.store.read_range(location, offset, length)).strip()
        data: dict[str, Any] = {"uri": args.uri, "offset": offset, "length": length, "tokens": 0}
        if not text:
            return ToolResult(text="", data=data)
        reply = chat(
            ctx.inference,
            system=prompts.SUMMARY,
            user=f"Summarize this text in one sentence:\n\n{text}",
            max_tokens=ctx.settings.summary_max_tokens,
        )
        return ToolResult(text=reply.prose, data={**data, "tokens": reply.completion_tokens})


class BuiltinTools:
    """The built-in tools as a :class:`ToolSource`. Arguments are validated against the tool's input
    model; invalid ones are an error answer the model sees, as an MCP server would answer."""

    name = BUILTIN

    def __init__(self, tools: list[BuiltinTool] | None = None) -> None:
        tools = tools if tools is not None else [ReadExcerpt(), SummarizeChunk()]
        self._tools = {tool.name: tool for tool in tools}

    def described(self) -> list[tuple[str, str]]:
        """Each tool's name and description, as the plan's system message lists them."""
        return [(tool.name, tool.description) for tool in self._tools.values()]

    def list_tools(self, ctx: ToolContext) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters(ctx.settings),
                retry_class=tool.retry_class,
                documents="uri" in tool.input_model.model_fields,
            )
            for tool in self._tools.values()
        ]

    def get(self, name: str) -> BuiltinTool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools))
            raise UnknownToolError(f"no tool named {name!r}; tools: {known}") from None

    def call(
        self, tool: str, arguments: dict[str, Any], ctx: ToolContext, *, idempotency_key: str = ""
    ) -> ToolResult:
        builtin = self.get(tool)
        try:
            parsed = builtin.input_model.model_validate(arguments)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult(text=f"invalid arguments for {tool}: {details}", is_error=True)
        return builtin.run(parsed, ctx)
