"""RouterFunction: OpenAI-compatible routes, and the agent's runs, behind an API Gateway HTTP API.

Validates and limits requests, picks the inference alias from the routing table by ``model`` and invokes
it; ``/v1/agent/runs`` starts, reads and approves durable agent runs. Powertools' Logger, Tracer and
Metrics wrap the handler. The logic lives in ``snapllm.router`` and ``snapllm.agent.routes``.
"""

from snapllm.agent import routes as agent_routes
from snapllm.router.app import RouterApp

router = RouterApp.from_env(routers=[agent_routes.router])
handler = router.handler
