"""Durable agents: plan, use tools, wait for a person's approval and answer, on Lambda durable functions.

The pieces, one job each:

- :mod:`~snapllm.agent.flow`: the durable orchestration (every side effect is a named operation).
- :mod:`~snapllm.agent.tools`: typed tools that take and return references and small values.
- :mod:`~snapllm.agent.budget`: keeps every checkpointed value under a byte budget (S3 offload).
- :mod:`~snapllm.agent.handler`: the Lambda handler wiring; :mod:`snapllm_dev.local.durable`: the local
  runner.
- :mod:`~snapllm.agent.runs` and :mod:`~snapllm.agent.routes`: the HTTP side (start, status, approval).
"""
