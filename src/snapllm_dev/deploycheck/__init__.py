"""``snapllm deploy-check``: what CloudFormation will create, checked before any AWS call.

- :mod:`snapllm_dev.deploycheck.transform` turns template.yaml into the CloudFormation template ``sam deploy``
  would submit, offline, with SAM's own translator;
- :mod:`snapllm_dev.deploycheck.calls` lists the AWS API calls each function's code makes, from its source;
- :mod:`snapllm_dev.deploycheck.rules` holds the checks, pure functions listed in one tuple.
"""
