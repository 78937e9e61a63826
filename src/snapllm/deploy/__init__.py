"""Putting a model in place before any version is published, and naming each version after what it runs.

- :mod:`~snapllm.deploy.source` reads a model from an ``https://`` URL, resuming dropped connections;
- :mod:`~snapllm.deploy.upload` writes a stream into S3, completed only when its SHA-256 matches;
- :mod:`~snapllm.deploy.custom_resource` (``ModelObject``) copies ``ModelSource`` into the bucket at deploy;
- :mod:`~snapllm.deploy.version_digest` (``VersionDigests``) digests what each function's version runs;
- :mod:`snapllm_dev.model_push.push` is ``snapllm model push``: a model on disk into the bucket.
"""
