"""snapllm: small language models on AWS Lambda.

The package holds the logic that the Lambda handlers under ``functions/`` wire together:

- :mod:`snapllm.engine.loader` streams a GGUF model from S3 into an anonymous in-memory file;
- :mod:`snapllm.engine.model` generates with llama.cpp from that file;
- :mod:`snapllm.protocol.requests` parses OpenAI-style requests and shapes responses;
- :mod:`snapllm.inference.runtime` is the inference function's lifecycle (init, SnapStart hooks, invoke);
- :mod:`snapllm_dev.local` plays that lifecycle on a developer machine against a local S3 endpoint.
"""

__version__ = "0.1.0"
