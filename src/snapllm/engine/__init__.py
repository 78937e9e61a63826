"""The model engine: a GGUF model streamed from S3 into memory, loaded with llama.cpp, generating tokens.

It knows tokens, samplers and grammars, and no OpenAI or Lambda type (an import-linter contract keeps
:mod:`snapllm.protocol` out of it). docs/architecture.md ("Packages") lists its modules.
"""
