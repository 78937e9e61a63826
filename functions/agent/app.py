"""AgentFunction: a durable agent that plans, uses tools, waits for approval and answers.

The flow lives in ``snapllm.agent.flow``; this module only builds the handler.
"""

from snapllm.agent.handler import build_handler

handler = build_handler()
