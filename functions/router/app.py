"""RouterFunction: OpenAI-compatible routes behind an API Gateway HTTP API.

Validates and limits requests, picks the inference alias from the routing table by ``model`` and invokes
it. Powertools' Logger, Tracer and Metrics wrap the handler. The logic lives in ``snapllm.router``.
"""

from snapllm.router.app import RouterApp

router = RouterApp.from_env()
handler = router.handler
