"""The OpenAI protocol: requests in, engine requests out, and the engine's output rendered back.

Runs without llama.cpp and without the AWS SDKs (an import-linter contract), so all of it is tested
without a model:

- :mod:`~snapllm.protocol.edge`: what every entry point checks in raw input (size, depth, headers, paths).
- :mod:`~snapllm.protocol.requests`, :mod:`~snapllm.protocol.responses_api`,
  :mod:`~snapllm.protocol.fields`: the Chat Completions, Completions and Responses requests, and the
  decision for every field of the official SDK's request types.
- :mod:`~snapllm.protocol.limits`: a deployment's limits on a parsed request.
- :mod:`~snapllm.protocol.structured`, :mod:`~snapllm.protocol.compiled_schema`,
  :mod:`~snapllm.protocol.tool_formats`, :mod:`~snapllm.protocol.lark_grammar`,
  :mod:`~snapllm.protocol.constraints`: JSON schemas and tool calls, and the llguidance grammar a request
  is generated under.
- :mod:`~snapllm.protocol.chat_templates`: chat templates for models whose GGUF file has none.
- :mod:`~snapllm.protocol.objects`, :mod:`~snapllm.protocol.sse`, :mod:`~snapllm.protocol.openapi`:
  every answer's shape, streamed or whole, and its documentation.
- :mod:`~snapllm.protocol.metrics`: the CloudWatch metrics of a completion.
"""
