"""A deployment's limits on a parsed request: one check, run once per hop.

The router checks them before it invokes anything; the engine, before it tokenizes (for the direct invoke
and the streaming function alike)::

    Limits(max_tokens=512, max_prompt_chars=32_000).check(request)
"""

from __future__ import annotations

from dataclasses import dataclass

from snapllm.errors import ContextLengthExceededError, InvalidRequestError
from snapllm.protocol.constraints.compiled_schema import MAX_SCHEMA_CHARS, schema_size
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    InferenceRequest,
    JSONSchemaResponseFormat,
    prompt_chars,
)

# A constraint grows with its schema and every tool adds a branch to it, so both are bounded before
# anything is invoked (compile_schema also refuses a schema over MAX_SCHEMA_CHARS before compiling it).
MAX_TOOLS = 32
__all__ = ["MAX_SCHEMA_CHARS", "MAX_TOOLS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """``max_tokens`` caps what a request may ask to generate; ``max_prompt_chars`` the prompt's length in
    characters, checked before anything is tokenized (a prompt's tokens are checked by the engine)."""

    max_tokens: int
    max_prompt_chars: int | None = None
    max_tools: int = MAX_TOOLS
    max_schema_chars: int = MAX_SCHEMA_CHARS

    def check(self, request: InferenceRequest) -> None:
        if isinstance(request, ChatCompletionRequest):
            self._check_structure(request)
        requested = request.requested_max_tokens
        if requested is not None and requested > self.max_tokens:
            raise InvalidRequestError(
                f"max_tokens is {requested}; this deployment allows at most {self.max_tokens}",
                param="max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens",
            )
        if self.max_prompt_chars is None:
            return
        chars, param = prompt_chars(request)
        if chars > self.max_prompt_chars:
            raise ContextLengthExceededError(
                f"the prompt is {chars} characters; this deployment accepts at most {self.max_prompt_chars}",
                param=param,
            )

    def _check_structure(self, request: ChatCompletionRequest) -> None:
        tools = request.tools or []
        if len(tools) > self.max_tools:
            raise InvalidRequestError(
                f"{len(tools)} tools were sent; this deployment accepts at most {self.max_tools}",
                param="tools",
            )
        schemas = [(f"tools.{i}.function.parameters", t.function.parameters) for i, t in enumerate(tools)]
        if isinstance(request.response_format, JSONSchemaResponseFormat):
            schemas.append(("response_format", request.response_format.json_schema.json_schema))
        for param, schema in schemas:
            size = schema_size(schema) if schema is not None else 0
            if size > self.max_schema_chars:
                raise InvalidRequestError(
                    f"{param}: the schema is {size} characters as compact JSON; this deployment accepts at "
                    f"most {self.max_schema_chars}",
                    param=param,
                )
