"""The model engine: a GGUF model streamed from S3 into memory, loaded with llama.cpp, generating tokens.

It knows tokens, samplers and grammars, and no OpenAI or Lambda type (an import-linter contract keeps
:mod:`snapllm.protocol` out of it):

- :mod:`~snapllm.engine.loader`: the model object from S3 into a memfd; :mod:`~snapllm.engine.gguf`: the
  header check before llama.cpp sees the bytes.
- :mod:`~snapllm.engine.model`: one loaded model that runs one generation at a time.
- :mod:`~snapllm.engine.decode`: the decode loop over llama.cpp's C API (KV cache, samplers, grammars).
- :mod:`~snapllm.engine.threadpool`: the worker threads a model's decodes run on, kept between tokens.
- :mod:`~snapllm.engine.prefault`: the restored environment's memory faulted in before the first request.
- :mod:`~snapllm.engine.settings`: the values all of them take.
"""
