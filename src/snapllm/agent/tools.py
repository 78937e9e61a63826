"""A small, typed tool interface and the built-in tools.

A tool takes a validated pydantic input and returns a small JSON-able dict. Tools get *references*
(``s3://`` URIs with byte ranges) and read only the bytes they need; they never take or return a whole
document. Each tool says which retry class its step uses (``"storage"`` or ``"inference"``)::

    registry = ToolRegistry.builtin()
    registry.call("read_excerpt", {"uri": "s3://b/agent/documents/a.md", "offset": 0, "length": 2048}, ctx)
    registry.call("summarize_chunk", {"uri": "...", "offset": 0, "length": 1200}, ctx)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from snapllm.agent.artifacts import ArtifactStore
from snapllm.agent.errors import AgentInputError, UnknownToolError
from snapllm.agent.llm import chat
from snapllm.agent.settings import AgentSettings
from snapllm.inference_client import InferenceClient

RetryClass = Literal["storage", "inference"]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the agent's S3 prefix, the model, and the settings."""

    store: ArtifactStore
    inference: InferenceClient
    settings: AgentSettings


class ChunkRef(BaseModel):
    """A byte range of a document: the unit tools pass around instead of text."""

    model_config = ConfigDict(extra="forbid")

    uri: str
    offset: int = Field(default=0, ge=0)
    length: int = Field(gt=0, le=1024 * 1024)


class Tool(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]
    retry_class: ClassVar[RetryClass]
    input_model: ClassVar[type[BaseModel]]

    def run(self, args: Any, ctx: ToolContext) -> dict[str, Any]: ...


def _decode(data: bytes) -> str:
    # A range may cut a multi-byte character at either end; drop the fragments, keep the text.
    return data.decode("utf-8", errors="ignore")


class ReadExcerpt:
    """Read up to ``length`` bytes of an S3 document from ``offset`` (a ranged GET)."""

    name: ClassVar[str] = "read_excerpt"
    description: ClassVar[str] = "Read an excerpt of an S3 document by reference (uri, offset, length)."
    retry_class: ClassVar[RetryClass] = "storage"
    input_model: ClassVar[type[BaseModel]] = ChunkRef

    def run(self, args: ChunkRef, ctx: ToolContext) -> dict[str, Any]:
        location = ctx.store.document(args.uri)
        data = ctx.store.read_range(location, args.offset, args.length)
        return {"uri": args.uri, "offset": args.offset, "length": len(data), "text": _decode(data)}


class SummarizeChunk:
    """Summarize one chunk of a document with the model; only the summary comes back."""

    name: ClassVar[str] = "summarize_chunk"
    description: ClassVar[str] = "Summarize a byte range of an S3 document with the model."
    retry_class: ClassVar[RetryClass] = "inference"
    input_model: ClassVar[type[BaseModel]] = ChunkRef

    def run(self, args: ChunkRef, ctx: ToolContext) -> dict[str, Any]:
        location = ctx.store.document(args.uri)
        text = _decode(ctx.store.read_range(location, args.offset, args.length)).strip()
        if not text:
            return {"uri": args.uri, "offset": args.offset, "length": 0, "summary": "", "tokens": 0}
        reply = chat(
            ctx.inference,
            system="You summarize text in one short sentence.",
            user=f"Summarize this text in one sentence:\n\n{text}",
            max_tokens=ctx.settings.summary_max_tokens,
        )
        return {
            "uri": args.uri,
            "offset": args.offset,
            "length": args.length,
            "summary": reply.text,
            "tokens": reply.completion_tokens,
        }


class ToolRegistry:
    """Tools by name; :meth:`call` validates the arguments against the tool's input model."""

    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}

    @classmethod
    def builtin(cls) -> ToolRegistry:
        return cls([ReadExcerpt(), SummarizeChunk()])

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools))
            raise UnknownToolError(f"no tool named {name!r}; tools: {known}") from None

    def call(self, name: str, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        tool = self.get(name)
        try:
            parsed = tool.input_model.model_validate(args)
        except ValidationError as exc:
            raise AgentInputError(f"invalid arguments for {name}: {exc.errors(include_url=False)}") from exc
        return tool.run(parsed, ctx)
