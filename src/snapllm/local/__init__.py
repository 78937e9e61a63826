"""Run snapllm's functions on a developer machine: a local S3 endpoint and the Lambda lifecycle."""
