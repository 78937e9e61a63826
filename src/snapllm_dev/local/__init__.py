"""Everything that plays AWS on a developer machine, to run the template's functions without Docker.

- :mod:`~snapllm_dev.local.kinds`: how each function runs, read from the template (durable, web adapter,
  HTTP API, direct invoke); :mod:`~snapllm_dev.local.environment`: the variables it runs with.
- :mod:`~snapllm_dev.local.s3`, :mod:`~snapllm_dev.local.faults`: the local S3 endpoint and a fault proxy
  for it.
- :mod:`~snapllm_dev.local.lifecycle`, :mod:`~snapllm_dev.local.host`, :mod:`~snapllm_dev.local.session`:
  the Lambda
  lifecycle (init, snapshot, restore, invoke) of direct-invoke functions against the local S3.
- :mod:`~snapllm_dev.local.durable`, :mod:`~snapllm_dev.local.durable_service`: durable executions on the
  SDK's
  testing runner; :mod:`~snapllm_dev.local.lwa`: Lambda Web Adapter; :mod:`~snapllm_dev.local.stack` and
  :mod:`~snapllm_dev.local.gateway`: API Gateway and the Function URL in front of them.
- :mod:`~snapllm_dev.local.cli`, :mod:`~snapllm_dev.local.serve_cli`,
  :mod:`~snapllm_dev.local.durable_cli`: the
  ``snapllm local invoke`` / ``snapllm local serve`` commands.
"""
