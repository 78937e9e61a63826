"""Everything that plays AWS on a developer machine, to run the template's functions without Docker.

- :mod:`~snapllm.local.kinds`: how each function runs, read from the template (durable, web adapter,
  HTTP API, direct invoke); :mod:`~snapllm.local.environment`: the variables it runs with.
- :mod:`~snapllm.local.s3`, :mod:`~snapllm.local.faults`: the local S3 endpoint and a fault proxy for it.
- :mod:`~snapllm.local.lifecycle`, :mod:`~snapllm.local.host`, :mod:`~snapllm.local.session`: the Lambda
  lifecycle (init, snapshot, restore, invoke) of direct-invoke functions against the local S3.
- :mod:`~snapllm.local.durable`, :mod:`~snapllm.local.durable_service`: durable executions on the SDK's
  testing runner; :mod:`~snapllm.local.lwa`: Lambda Web Adapter; :mod:`~snapllm.local.stack` and
  :mod:`~snapllm.local.gateway`: API Gateway and the Function URL in front of them.
- :mod:`~snapllm.local.cli`, :mod:`~snapllm.local.serve_cli`, :mod:`~snapllm.local.durable_cli`: the
  ``snapllm local invoke`` / ``snapllm local serve`` commands.
"""
