"""VersionDigestFunction: the CloudFormation custom resource that digests what each function's version runs.

Each function's version description is its digest, so a change in a layer or in a parameter value
publishes a new version of exactly the functions it reaches. The logic lives in
``snapllm.deploy.version_digest``.
"""

from snapllm.deploy.version_digest import VersionDigestResource

resource = VersionDigestResource()


def handler(event: dict, context: object) -> dict:
    return resource.handle(event, context)
