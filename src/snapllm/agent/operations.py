"""Names of the agent's durable operations that code outside the flow looks up in a run's history.

Kept apart from :mod:`snapllm.agent.flow` so that readers of a run (the HTTP routes in the router
function) do not import the durable execution SDK.

A run asks for approval with one callback per decision: ``approval`` for the whole run (before its
answer), and ``approve call N`` before step N's call to a tool configured as needing approval. Each
callback's review document (what the approver reads) is ``{prefix}runs/{run id}/`` +
:func:`review_document` of its name.
"""

APPROVAL_CALLBACK = "approval"
TOOL_APPROVAL_PREFIX = "approve call "


def tool_approval_callback(index: int) -> str:
    """The callback that gates step ``index``'s tool call."""
    return f"{TOOL_APPROVAL_PREFIX}{index}"


def is_approval_callback(name: str | None) -> bool:
    return name == APPROVAL_CALLBACK or (name or "").startswith(TOOL_APPROVAL_PREFIX)


def review_document(callback_name: str) -> str:
    """The review document's name, under the run's prefix, of an approval callback."""
    if callback_name == APPROVAL_CALLBACK:
        return "approval-request.json"
    return f"approval-call-{callback_name.removeprefix(TOOL_APPROVAL_PREFIX)}.json"
