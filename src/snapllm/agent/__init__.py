"""Durable agents: plan, use tools, wait for a person's approval and answer, on Lambda durable functions.

:mod:`~snapllm.agent.flow` is the durable orchestration, :mod:`~snapllm.agent.tools` the tools,
:mod:`~snapllm.agent.budget` keeps checkpoints small, :mod:`~snapllm.agent.handler` wires Lambda (the local
runner: :mod:`snapllm_dev.local.durable`), and :mod:`~snapllm.agent.runs` and :mod:`~snapllm.agent.routes`
are the HTTP side. docs/agents.md describes the agent.
"""
