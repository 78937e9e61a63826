"""Everything that plays AWS on a developer machine, to run the template's functions without Docker.

The local S3 and its fault proxy, the Lambda lifecycle of direct-invoke functions, durable executions,
Lambda Web Adapter, and API Gateway and the Function URL in front of them, behind the ``snapllm local
invoke`` / ``snapllm local serve`` commands. docs/testing.md ("The local stack") describes them.
"""
