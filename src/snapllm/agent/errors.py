"""Errors the agent raises on purpose. Each says whether retrying can help.

A *permanent* error fails its step at once (the retry strategies never retry it); a transient one is retried
with backoff by the durable step::

    raise DocumentNotFoundError("s3://bucket/agent/documents/missing.md does not exist")
"""

from __future__ import annotations

import json

from snapllm.errors import SnapllmError

# The durable service refuses to checkpoint an error object of 32 KB or more (message, type, data and stack
# trace, as JSON); a refused checkpoint leaves the step looking interrupted and hides the real cause. An
# error's message is therefore bounded well below that, whatever a server put into it.
MAX_ERROR_TEXT_BYTES = 4096


def bounded_text(text: str, limit_bytes: int = MAX_ERROR_TEXT_BYTES) -> str:
    """``text`` whole if its JSON encoding (as the SDK writes it) fits ``limit_bytes``, else its opening
    and how much was left out: ``"...the start ... (38211 more characters)"``."""
    if len(json.dumps(text)) <= limit_bytes:
        return text
    keep = min(len(text), limit_bytes)
    while True:
        shortened = f"{text[:keep]} ... ({len(text) - keep} more characters)"
        size = len(json.dumps(shortened))
        if size <= limit_bytes or keep == 0:
            return shortened
        # Each character takes 1 to 12 bytes of JSON (escapes, surrogate pairs): cut in proportion.
        keep = max(0, min(keep - 1, keep * limit_bytes // size - 32))


class AgentError(SnapllmError):
    """Base class of the agent's errors. ``code`` is what a failed run reports as its error type. The
    message is bounded (:func:`bounded_text`), so the failure can always be checkpointed."""

    code = "agent_failed"

    def __init__(self, message: str = "") -> None:
        super().__init__(bounded_text(str(message)))


def bounded_failure(exc: Exception) -> Exception:
    """``exc`` with a message the durable service can record: an agent error's is bounded already; any
    other whose message is over :data:`MAX_ERROR_TEXT_BYTES` has it cut in place (so its type, and how it
    is retried, stay), or, if its type renders its message otherwise, becomes an :class:`AgentError`."""
    if isinstance(exc, AgentError) or len(json.dumps(str(exc))) <= MAX_ERROR_TEXT_BYTES:
        return exc
    exc.args = (bounded_text(str(exc)),)
    if len(json.dumps(str(exc))) <= MAX_ERROR_TEXT_BYTES:
        return exc
    return AgentError(f"{type(exc).__qualname__}: {exc}")


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


class InferenceDeadlineError(AgentError):
    """The model stopped where its invoke's time ran out (a slow or loaded environment): the text it had is
    not an answer. Transient: the step is retried."""

    code = "inference_deadline"


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


class ToolServerProtocolError(PermanentAgentError):
    """A tool server answered with something that is not valid JSON-RPC (not JSON, not a JSON-RPC message,
    a result of the wrong shape): a wrong URL or a broken server, which a retry does not fix."""

    code = "tool_server_protocol_error"


class ToolNameCollisionError(PermanentAgentError):
    """Two tools would reach the model under one name; the message names both."""

    code = "tool_name_collision"


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
