"""Errors the agent raises on purpose. Each says whether retrying can help.

A *permanent* error fails its step at once (the retry strategies never retry it); a transient one is retried
with backoff by the durable step::

    raise DocumentNotFoundError("s3://bucket/agent/documents/missing.md does not exist")
"""

from __future__ import annotations

from snapllm.errors import SnapllmError


class AgentError(SnapllmError):
    """Base class of the agent's errors."""


class PermanentAgentError(AgentError):
    """Retrying cannot help: the input, a document or the model's answer to this request is wrong."""


class AgentInputError(PermanentAgentError):
    """The run's input is malformed (missing task, bad URI, too many documents...)."""


class DocumentNotFoundError(PermanentAgentError):
    """A document URI names an object that does not exist."""


class DocumentAccessDeniedError(PermanentAgentError):
    """A document lies outside the agent's S3 prefix, or its role may not read it."""


class InferenceRejectedError(PermanentAgentError):
    """The model answered the request with a 4xx error (e.g. context length exceeded)."""


class StateBudgetExceededError(PermanentAgentError):
    """A value that must stay in the checkpoint (it cannot be offloaded) is over the state budget."""


class UnknownToolError(PermanentAgentError):
    """A tool call names a tool that is not registered."""


class ArtifactStoreError(AgentError):
    """Writing or reading an artifact failed for a reason that may pass (network, throttling)."""
