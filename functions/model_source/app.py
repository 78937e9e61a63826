"""ModelSourceFunction: the CloudFormation custom resource that copies ``ModelSource`` into the model bucket.

Runs during ``sam deploy``, before InferenceFunction and StreamFunction publish their SnapStart versions
(whose init loads the model). Streams the URL into a multipart upload, verifies the SHA-256 before
completing it, and answers CloudFormation. The logic lives in ``snapllm.deploy.custom_resource``.
"""

from snapllm.deploy.custom_resource import ModelObjectResource

resource = ModelObjectResource.from_env()


def handler(event: dict, context: object) -> dict:
    return resource.handle(event, context)
