"""The OpenAI protocol: requests in, engine requests out, and the engine's output rendered back.

Runs without llama.cpp and without the AWS SDKs, so all of it is tested without a model. Its subpackages
(``model_routes``, ``serving``, ``completions``, ``responses``, ``families``, ``constraints``, ``http``) and
their order, which import-linter contracts hold, are in docs/architecture.md ("Packages").
"""
