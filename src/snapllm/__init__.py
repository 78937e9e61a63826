"""snapllm: small language models on AWS Lambda.

The package holds the logic that the Lambda handlers under ``functions/`` wire together:

- :mod:`snapllm.loader` streams a GGUF model from S3 into an anonymous in-memory file;
- :mod:`snapllm.engine` generates with llama.cpp from that file;
- :mod:`snapllm.contract` parses OpenAI-style requests and shapes responses;
- :mod:`snapllm.runtime` is the inference function's lifecycle (init, SnapStart hooks, invoke);
- :mod:`snapllm.local` plays that lifecycle on a developer machine against a local S3 endpoint.
"""

__version__ = "0.1.0"
