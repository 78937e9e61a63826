"""Putting a model in place before any version is published.

- :mod:`snapllm.deploy.source` reads a model from an ``https://`` URL, resuming a dropped connection with a
  Range request;
- :mod:`snapllm.deploy.upload` writes a stream into S3 as a multipart upload, hashing it on the way, and
  completes it only when the SHA-256 matches;
- :mod:`snapllm.deploy.custom_resource` is the CloudFormation custom resource (``ModelObject``) that copies
  the ``ModelSource`` URL into the model bucket during ``sam deploy``;
- :mod:`snapllm.deploy.version_digest` is the custom resource (``VersionDigests``) whose digests name each
  function's published version, so a change in a layer or a parameter value publishes a new one;
- :mod:`snapllm_dev.model_push.push` is ``snapllm model push``: a model on disk into the bucket, then a
  stack update
  that publishes new versions.
"""
