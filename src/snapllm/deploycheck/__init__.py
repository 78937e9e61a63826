"""``snapllm deploy-check``: what CloudFormation will create, checked before any AWS call.

- :mod:`snapllm.deploycheck.transform` turns template.yaml into the CloudFormation template ``sam deploy``
  would submit, offline, with SAM's own translator;
- :mod:`snapllm.deploycheck.calls` lists the AWS API calls each function's code makes, from its source;
- :mod:`snapllm.deploycheck.rules` holds the checks, pure functions listed in one tuple.
"""
