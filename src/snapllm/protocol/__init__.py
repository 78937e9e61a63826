"""The OpenAI protocol: requests in, engine requests out, and the engine's output rendered back.

Runs without llama.cpp and without the AWS SDKs (an import-linter contract), so all of it is tested
without a model. Its subpackages, highest first (an import-linter contract holds the order):

- :mod:`~snapllm.protocol.model_routes`: tokens, embeddings and rerank, the routes besides the completions.
- :mod:`~snapllm.protocol.serving`: request -> engine request -> answer, the one path of every entry point.
- :mod:`~snapllm.protocol.completions`: a chat rendered with its template
  (:mod:`~snapllm.protocol.completions.chat`, :mod:`~snapllm.protocol.completions.chat_templates`), the
  llguidance grammar a request is generated under (:mod:`~snapllm.protocol.completions.constraints`), and
  every answer's shape, streamed or whole (:mod:`~snapllm.protocol.completions.objects`,
  :mod:`~snapllm.protocol.completions.sse`).
- :mod:`~snapllm.protocol.responses`: the Responses request, served as a chat completion.
- :mod:`~snapllm.protocol.families`: what differs by model family (tool-call formats, thinking markers).
- :mod:`~snapllm.protocol.limits`: a deployment's limits on a parsed request;
  :mod:`~snapllm.protocol.metrics`: the CloudWatch metrics of a completion.
- :mod:`~snapllm.protocol.requests`: the Chat Completions and Completions requests, and what generation
  yields.
- :mod:`~snapllm.protocol.constraints`: JSON schemas compiled once by llguidance, tool-call arguments and
  Lark grammar pieces; :mod:`~snapllm.protocol.http`: what every entry point checks in raw input
  (:mod:`~snapllm.protocol.http.edge`), the decision for every field of the official SDK's request types
  (:mod:`~snapllm.protocol.http.fields`) and the errors' documentation
  (:mod:`~snapllm.protocol.http.openapi`).
"""
