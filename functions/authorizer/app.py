"""AuthorizerFunction: the HTTP API's Lambda authorizer with ApiAuth=KEY (a bearer key checked against the
salted hashes in SSM Parameter Store). The logic lives in ``snapllm.authorizer``."""

from snapllm.authorizer import KeyAuthorizer

authorizer = KeyAuthorizer.from_env()


def handler(event: dict, context: object) -> dict:
    return authorizer.handle(event, context)
