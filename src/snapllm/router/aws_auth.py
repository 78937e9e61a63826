"""SigV4 signing for OpenAI clients that call an IAM-protected deployment: see :mod:`snapllm.aws_auth`,
where it lives, since the agent signs its requests to AWS-hosted MCP servers with it too."""

from snapllm.aws_auth import SigV4

__all__ = ["SigV4"]
