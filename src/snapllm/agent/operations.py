"""Names of the agent's durable operations that code outside the flow looks up in a run's history.

Kept apart from :mod:`snapllm.agent.flow` so that readers of a run (the HTTP routes in the router
function) do not import the durable execution SDK.
"""

APPROVAL_CALLBACK = "approval"
