"""Errors the agent raises on purpose. Each says whether retrying can help.

A *permanent* error fails its step at once (the retry strategies never retry it); a transient one is retried
with backoff by the durable step::

    raise DocumentNotFoundError("s3://bucket/agent/documents/missing.md does not exist")
"""

from __future__ import annotations

from snapllm.errors import SnapllmError


class AgentError(SnapllmError):
    """Base class of the agent's errors. ``code`` is what a failed run reports as its error type."""

    code = "agent_failed"


class PermanentAgentError(AgentError):
    """Retrying cannot help: the input, a document or the model's answer to this request is wrong."""


class AgentInputError(PermanentAgentError):
    """The run's input is malformed (missing task, bad URI, too many documents...)."""

    code = "invalid_input"


class DocumentNotFoundError(PermanentAgentError):
    """A document URI names an object that does not exist."""

    code = "document_not_found"


class DocumentAccessDeniedError(PermanentAgentError):
    """A document lies outside the agent's S3 prefix, or its role may not read it."""

    code = "document_access_denied"


class InferenceRejectedError(PermanentAgentError):
    """The model answered the request with a 4xx error (e.g. context length exceeded)."""

    code = "model_rejected_request"


class ModelAnswerIncompleteError(PermanentAgentError):
    """The model's constrained answer (a plan, tool call arguments) was cut short by ``max_tokens``."""

    code = "model_answer_incomplete"


class StateBudgetExceededError(PermanentAgentError):
    """A value that must stay in the checkpoint (it cannot be offloaded) is over the state budget."""

    code = "state_budget_exceeded"


class UnknownToolError(PermanentAgentError):
    """A tool call names a tool that is not registered."""

    code = "unknown_tool"


class ToolServerRejectedError(PermanentAgentError):
    """A tool server refused the request itself (HTTP 4xx: authentication, a wrong URL), not the call."""

    code = "tool_server_rejected"


class ToolServerUnreachableError(AgentError):
    """A tool server could not be reached (connection refused, DNS): nothing was sent, so any tool may
    be retried, idempotent or not."""

    code = "tool_server_unreachable"


class ToolTransportError(AgentError):
    """A tool call broke off after it was sent (reset, closed connection, timeout, HTTP 5xx): the call
    may or may not have taken effect, so only an idempotent tool is retried."""

    code = "tool_transport_error"


class ArtifactStoreError(AgentError):
    """Writing or reading an artifact failed for a reason that may pass (network, throttling)."""

    code = "artifact_store_error"


def agent_error_class(error_type: str | None) -> type[AgentError] | None:
    """The agent error class a failure's type names (``snapllm.agent.errors.DocumentNotFoundError``, as
    the durable SDK records it), or None when it is not one of the agent's errors."""
    if not error_type:
        return None
    pending: list[type[AgentError]] = [AgentError]
    while pending:
        cls = pending.pop()
        if error_type in (cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"):
            return cls
        pending.extend(cls.__subclasses__())
    return None


def failure_code(error_type: str | None) -> str:
    """The public error type of a failed run: the agent error's code, else ``agent_failed``."""
    cls = agent_error_class(error_type)
    return cls.code if cls is not None else AgentError.code
